package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/faultproxy"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func start(t *testing.T, f faultproxy.Faults) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(testenv.Endpoint(), 1, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// client talks through the proxy without SDK retries, so every fault is seen.
func client(t *testing.T, p *faultproxy.Proxy) *dynamodb.Client {
	t.Helper()
	c, err := ddblocal.NewClient(context.Background(), p.Endpoint(), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: id},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
}

func put(ctx context.Context, c *dynamodb.Client, table, id string) error {
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key(id)})
	return err
}

func exists(t *testing.T, table, id string) bool {
	t.Helper()
	out, err := testenv.Client(t).GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: key(id), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

func only(kind string, rate float64) faultproxy.Faults {
	f := faultproxy.NoFaults()
	f.Rates[kind] = rate
	f.StallFor = 400 * time.Millisecond
	f.LateFor = 400 * time.Millisecond
	return f
}

// Each fault kind, at rate 1, shows the client the failure it stands for and leaves the
// engine applied or not as the kind says.
func TestFaultKinds(t *testing.T) {
	table := testenv.Table(t, "InventoryTable")
	cases := []struct {
		kind     string
		code     string // API error code the client sees ("" = a transport error)
		status   int
		applied  bool
		deadline time.Duration // client timeout for the call (0 = none)
	}{
		{faultproxy.KindThroughputExceeded, "ProvisionedThroughputExceededException", 400, false, 0},
		{faultproxy.KindThrottling, "ThrottlingException", 400, false, 0},
		{faultproxy.KindInternalError, "InternalServerError", 500, false, 0},
		{faultproxy.KindInternalErrorApplied, "InternalServerError", 500, true, 0},
		{faultproxy.KindDropResponse, "", 0, true, 0},
		{faultproxy.KindResetRequest, "", 0, false, 0},
		{faultproxy.KindResetResponse, "", 0, true, 0},
		{faultproxy.KindStall, "", 0, true, 100 * time.Millisecond},
		{faultproxy.KindLate, "", 0, true, 0},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			p := start(t, only(c.kind, 1))
			db := client(t, p)
			ctx := context.Background()
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			id := "item-" + c.kind
			err := put(ctx, db, table, id)
			if err == nil {
				t.Fatal("call succeeded through a rate-1 fault")
			}
			var api smithy.APIError
			switch {
			case c.code != "":
				if !errors.As(err, &api) || api.ErrorCode() != c.code {
					t.Fatalf("want API error %s, got %v", c.code, err)
				}
				var re interface{ HTTPStatusCode() int }
				if !errors.As(err, &re) || re.HTTPStatusCode() != c.status {
					t.Fatalf("want HTTP %d, got %v", c.status, err)
				}
			case errors.As(err, &api):
				t.Fatalf("want a transport error, got API error %v", err)
			}
			if err := p.Close(); err != nil { // waits for stalled requests to land
				t.Fatal(err)
			}
			if got := exists(t, table, id); got != c.applied {
				t.Fatalf("applied = %v, want %v (error: %v)", got, c.applied, err)
			}
			counts := p.Counts()
			for _, k := range faultproxy.Kinds {
				want := int64(0)
				if k == c.kind {
					want = 1
				}
				// A reset fires per chunk: a request written in two chunks has a
				// second chance only if the first passed, so exactly one still holds.
				if counts[k] != want {
					t.Errorf("count[%s] = %d, want %d", k, counts[k], want)
				}
			}
		})
	}
}

func TestPassThroughAndLatency(t *testing.T) {
	table := testenv.Table(t, "InventoryTable")
	f := faultproxy.NoFaults()
	f.Latency = 40 * time.Millisecond
	p := start(t, f)
	db := client(t, p)
	ctx := context.Background()
	for i := range 5 {
		begin := time.Now()
		if err := put(ctx, db, table, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d < 40*time.Millisecond {
			t.Errorf("call took %s, want ≥ 40ms of injected latency", d)
		}
	}
	for k, n := range p.Counts() {
		if n != 0 {
			t.Errorf("count[%s] = %d without faults", k, n)
		}
	}
	if p.Requests() != 5 {
		t.Errorf("requests = %d, want 5", p.Requests())
	}
}

// A mixed run: the counts add up to roughly the configured rates, and every request the
// client saw succeed really landed.
func TestMixedRates(t *testing.T) {
	table := testenv.Table(t, "InventoryTable")
	f := faultproxy.AllFaults()
	f = f.Scaled(10) // ~half the requests fail one way or another
	f.StallFor = 50 * time.Millisecond
	f.Rates[faultproxy.KindBlackout] = 0 // each would refuse everything for 1.5 s: TestBlackout
	p := start(t, f)
	db := client(t, p)
	ctx := context.Background()
	const n = 300
	var ok int
	for i := range n {
		id := fmt.Sprint("m", i)
		if err := put(ctx, db, table, id); err == nil {
			ok++
			if !exists(t, table, id) {
				t.Fatalf("%s acknowledged but not applied", id)
			}
		}
	}
	var total int64
	for _, c := range p.Counts() {
		total += c
	}
	t.Logf("%d/%d ok; faults %v", ok, n, p.Counts())
	if total < n/4 || ok < n/4 {
		t.Fatalf("faults %d, ok %d of %d: rates far off", total, ok, n)
	}
}

// A blackout applies the request, drops its response, then refuses every request for
// BlackoutFor; afterwards requests pass again.
func TestBlackout(t *testing.T) {
	table := testenv.Table(t, "InventoryTable")
	f := faultproxy.NoFaults()
	f.Rates[faultproxy.KindBlackout] = 1
	p := start(t, f)
	db := client(t, p)
	ctx := context.Background()
	if err := put(ctx, db, table, "b0"); err == nil {
		t.Fatal("the blackout's request got its response")
	}
	if !exists(t, table, "b0") {
		t.Fatal("the blackout's request was not applied")
	}
	if err := p.SetFaults(faultproxy.NoFaults()); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := put(ctx, db, table, "b1"); err == nil && time.Since(t0) < faultproxy.BlackoutFor {
		t.Fatal("a request during the blackout passed")
	}
	time.Sleep(faultproxy.BlackoutFor)
	if err := put(ctx, db, table, "b2"); err != nil {
		t.Fatalf("after the blackout: %v", err)
	}
	if got := p.Counts()[faultproxy.KindBlackout]; got != 1 {
		t.Errorf("blackouts counted %d, want 1", got)
	}
}

// A late request is not answered, and lands afterwards (at the latest when the proxy
// closes).
func TestLateRequestLandsAfterItsCaller(t *testing.T) {
	table := testenv.Table(t, "InventoryTable")
	f := only(faultproxy.KindLate, 1)
	f.LateFor = time.Second
	p := start(t, f)
	db := client(t, p)
	if err := put(context.Background(), db, table, "late"); err == nil {
		t.Fatal("a late request was answered")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !exists(t, table, "late") {
		if time.Now().After(deadline) {
			t.Fatal("the late request never landed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A stale read answers an eventually consistent read with a state its item had within
// StaleFor — also one nobody read (the proxy records the states writes leave) — never
// a consistent read, and never a state older than StaleFor.
func TestStaleRead(t *testing.T) {
	table := testenv.Table(t, "InventoryTable")
	f := only(faultproxy.KindStaleRead, 1)
	f.StaleFor = time.Second
	p := start(t, f)
	db := client(t, p)
	ctx := context.Background()
	write := func(v string) {
		t.Helper()
		it := key("s")
		it["v"] = &types.AttributeValueMemberS{Value: v}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(consistent bool) string {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("s"), ConsistentRead: aws.Bool(consistent)})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := out.Item["v"].(*types.AttributeValueMemberS)
		if v == nil {
			return ""
		}
		return v.Value
	}
	write("v1")
	if got := read(false); got != "v1" {
		t.Fatalf("first read = %q, want v1 (nothing earlier to serve)", got)
	}
	write("v2")
	write("v3")
	time.Sleep(100 * time.Millisecond) // the states the writes left are recorded
	seen := map[string]int{}
	for range 40 {
		seen[read(false)]++
	}
	for v := range seen {
		if v != "v1" && v != "v2" && v != "v3" {
			t.Errorf("eventually consistent read returned %q, a state the item never had", v)
		}
	}
	if seen["v1"] == 0 || seen["v2"] == 0 {
		t.Errorf("answers %v: want the earlier states v1 and v2 among them (v2 was never read)", seen)
	}
	if got := read(true); got != "v3" {
		t.Errorf("consistent read = %q, want v3", got)
	}
	if n := p.Counts()[faultproxy.KindStaleRead]; n != 40 {
		t.Errorf("stale reads counted %d, want 40", n)
	}
	time.Sleep(1100 * time.Millisecond)
	if got := read(false); got != "v3" {
		t.Errorf("read after StaleFor = %q, want v3", got)
	}
}

func TestParseFaults(t *testing.T) {
	f, err := faultproxy.ParseFaults("none,throttling=0.25,latency=10ms,jitter=2ms")
	if err != nil {
		t.Fatal(err)
	}
	if f.Rates[faultproxy.KindThrottling] != 0.25 || f.Latency != 10*time.Millisecond || f.Jitter != 2*time.Millisecond {
		t.Fatalf("parsed %+v", f)
	}
	all, err := faultproxy.ParseFaults("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range faultproxy.Kinds {
		if all.Rates[k] <= 0 {
			t.Errorf("all: %s off", k)
		}
	}
	again, err := faultproxy.ParseFaults(all.String())
	if err != nil || again.String() != all.String() {
		t.Fatalf("round trip: %q -> %q, %v", all.String(), again.String(), err)
	}
	scaled, _ := faultproxy.ParseFaults("all,scale=2,stall=0")
	if scaled.Rates[faultproxy.KindThrottling] != 2*all.Rates[faultproxy.KindThrottling] || scaled.Rates[faultproxy.KindStall] != 0 {
		t.Fatalf("scale: %v", scaled)
	}
	for _, bad := range []string{"bogus", "throttling=2", "latency=-1s", "nope=0.1", "drop_response=0.6,throttling=0.6"} {
		if _, err := faultproxy.ParseFaults(bad); err == nil || !strings.Contains(err.Error(), "fault") {
			t.Errorf("%q: want an error, got %v", bad, err)
		}
	}
}

// A replica lags in time, not in writes: right after the first write following an idle
// spell longer than StaleFor, an eventually consistent read may still show the state of
// before that write (an idle lock row, right after an uncontended take); once the write
// is StaleFor old, it no longer does.
func TestStaleReadAfterIdle(t *testing.T) {
	table := testenv.Table(t, "InventoryTable")
	f := only(faultproxy.KindStaleRead, 1)
	f.StaleFor = time.Second
	p := start(t, f)
	db := client(t, p)
	ctx := context.Background()
	write := func(v string) {
		t.Helper()
		it := key("idle")
		it["v"] = &types.AttributeValueMemberS{Value: v}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	reads := func(n int) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for range n {
			out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("idle")})
			if err != nil {
				t.Fatal(err)
			}
			v, _ := out.Item["v"].(*types.AttributeValueMemberS)
			if v == nil {
				seen[""]++
			} else {
				seen[v.Value]++
			}
		}
		return seen
	}
	write("v1")
	reads(1)                            // the proxy learns the read
	time.Sleep(1200 * time.Millisecond) // idle, longer than StaleFor
	write("v2")
	time.Sleep(100 * time.Millisecond) // v2's state is recorded
	if seen := reads(40); seen["v1"] == 0 || seen["v2"] == 0 || len(seen) != 2 {
		t.Errorf("answers just after the write that ended the idle spell: %v; want both v1 (the state until 100 ms ago) and v2", seen)
	}
	time.Sleep(1100 * time.Millisecond)
	if seen := reads(10); seen["v2"] != 10 {
		t.Errorf("answers StaleFor after the last write: %v; want only v2", seen)
	}
}
