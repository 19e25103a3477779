package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// -h, --help and help work at every level: they print the usage to stdout and exit 0
// ("turnstile locks --help" failed with "unknown command").
func TestHelpEveryLevel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	top := [][]string{{"-h"}, {"--help"}, {"help"}, {"help", "locks"}, {"locks", "-h"}, {"locks", "--help"}, {"locks", "-help"}, {"locks", "help"}}
	for _, args := range top {
		out, errs, code := f.run(args...)
		if code != 0 || errs != "" || !strings.Contains(out, "Usage:") || !strings.Contains(out, "turnstile locks show KEY") {
			t.Errorf("turnstile %q: exit %d, stderr %q, stdout %q; want exit 0 and the usage on stdout", args, code, errs, out)
		}
	}
	for _, cmd := range []string{"ls", "list", "show", "watch", "abandoned", "release"} {
		for _, args := range [][]string{{"locks", cmd, "-h"}, {"locks", cmd, "--help"}, {"locks", cmd, "-help"},
			{"locks", "help", cmd}, {"help", "locks", cmd}, {"locks", cmd, "--table", "t", "--help"}} {
			out, errs, code := f.run(args...)
			if code != 0 || errs != "" || !strings.Contains(out, "Usage: turnstile locks "+cmd+" ") ||
				!strings.Contains(out, "Flags:") || !strings.Contains(out, "-table") {
				t.Errorf("turnstile %q: exit %d, stderr %q, stdout %q; want exit 0 and %s's usage on stdout", args, code, errs, out, cmd)
			}
		}
	}
	// Wrong usage still fails with 2, on stderr.
	for _, args := range [][]string{{}, {"locks"}, {"locks", "help", "rm"}, {"help", "keys"}, {"locks", "ls", "--bogus"}} {
		out, errs, code := f.run(args...)
		if code != 2 || errs == "" || out != "" {
			t.Errorf("turnstile %q: exit %d, stdout %q, stderr %q; want exit 2 with the message on stderr", args, code, out, errs)
		}
	}
	// A bad flag is reported once, not followed by the whole flag list.
	if _, errs, _ := f.run("locks", "ls", "--bogus"); strings.Count(errs, "-bogus") != 1 || strings.Contains(errs, "Flags:") {
		t.Errorf("bad flag: stderr %q", errs)
	}
}

// -o json is for scripts and people: lease durations as Go duration strings plus whole
// milliseconds (not nanoseconds), data as text when it is valid UTF-8 (base64 only for
// binary data, with dataEncoding saying so), tokens with their epoch and seq.
func TestJSONShapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	m, err := lockcore.NewMutex(db, f.table, opts("worker-a", lockcore.WithHeartbeat(0), lockcore.WithLease(4500*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	lt, err := m.Acquire(ctx, "text", lockcore.Data([]byte("ord-42 ✓")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lt.Release(ctx) }()
	lb, err := m.Acquire(ctx, "bin", lockcore.Data([]byte{0xff, 0xfe, 0x00}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lb.Release(ctx) }()

	var locks []map[string]any
	if err := json.Unmarshal([]byte(f.ok("locks", "ls", "--table", f.table, "-o", "json")), &locks); err != nil {
		t.Fatal(err)
	}
	byKey := map[string]map[string]any{}
	for _, l := range locks {
		byKey[l["key"].(string)] = l
	}
	txt, bin := byKey["text"], byKey["bin"]
	if txt == nil || bin == nil {
		t.Fatalf("ls -o json: %v", locks)
	}
	h := txt["holder"].(map[string]any)
	if h["lease"] != "4.5s" || h["leaseMs"] != float64(4500) || h["leaseNanos"] != nil {
		t.Errorf("holder JSON %v: want lease \"4.5s\", leaseMs 4500, no leaseNanos", h)
	}
	if h["leaseId"] != lt.ID() || h["owner"] != "worker-a" {
		t.Errorf("holder JSON %v", h)
	}
	if txt["data"] != "ord-42 ✓" || txt["dataEncoding"] != "text" {
		t.Errorf("text data: data %v encoding %v, want the text", txt["data"], txt["dataEncoding"])
	}
	if bin["data"] != "//4A" || bin["dataEncoding"] != "base64" {
		t.Errorf("binary data: data %v encoding %v, want base64", bin["data"], bin["dataEncoding"])
	}
	fence := txt["fence"].(map[string]any)
	if fence["token"] != float64(lt.Token()) || fence["epoch"] != float64(lt.Token().Epoch()) || fence["seq"] != float64(1) {
		t.Errorf("fence JSON %v, token %d", fence, lt.Token())
	}
	// The same shapes from show, and they read back into lockcore.Lock.
	var shown []lockcore.Lock
	if err := json.Unmarshal([]byte(f.ok("locks", "show", "bin", "--table", f.table, "-o", "json")), &shown); err != nil {
		t.Fatal(err)
	}
	if len(shown) != 1 || string(shown[0].Data) != "\xff\xfe\x00" || shown[0].Holder.Lease != 4500*time.Millisecond {
		t.Fatalf("show -o json read back: %+v", shown)
	}
	// Text output: tokens with their parts.
	contains(t, f.ok("locks", "ls", "--table", f.table), fmt.Sprintf("%d (epoch %d, seq 1)", int64(lt.Token()), lt.Token().Epoch()))
}

// The lease id a holder logs ("orderprocessor-7f3a#yA3b_9Qz") can be matched to what
// show and ls print for a holder shown as "ticket N", and show --lease finds its lock.
func TestShowLeaseID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	tl, _ := lockcore.NewTicketLock(db, f.table, opts("orderprocessor-7f3a")...)
	la, err := tl.Acquire(ctx, "sku#CPU")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Release(ctx) }()
	q, _ := lockcore.NewQueue(db, f.table, opts("q-holder")...)
	lq, err := q.Acquire(ctx, "order#9")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lq.Release(ctx) }()
	q2, _ := lockcore.NewQueue(db, f.table, opts("q-waiter")...)
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		if l, err := q2.Acquire(wctx, "order#9"); err == nil {
			_ = l.Release(context.Background())
		}
	}()
	defer func() { wcancel(); <-wdone }()

	suffix := strings.TrimPrefix(la.ID(), "orderprocessor-7f3a#")
	if suffix == la.ID() {
		t.Fatalf("lease id %s", la.ID())
	}
	out := f.ok("locks", "show", "sku#CPU", "--table", f.table)
	contains(t, out, "lease id", "ticket 1, lease id <owner>#"+suffix)
	contains(t, f.ok("locks", "ls", "--table", f.table), "ticket 1 (<owner>#"+suffix+")")
	var locks []lockcore.Lock
	if err := json.Unmarshal([]byte(f.ok("locks", "ls", "--table", f.table, "-o", "json", "--strategy", "ticket")), &locks); err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Holder.LeaseSuffix != suffix {
		t.Fatalf("ls -o json: %+v", locks)
	}

	// show --lease: the holder's lease id from its logs.
	out = f.ok("locks", "show", "--lease", la.ID(), "--table", f.table)
	contains(t, out, "lease "+la.ID()+" holds this lock:", "sku#CPU", "ticket")
	if err := json.Unmarshal([]byte(f.ok("locks", "show", "--lease", lq.ID(), "--table", f.table, "-o", "json")), &locks); err != nil ||
		len(locks) != 1 || locks[0].Key != "order#9" || locks[0].Holder.LeaseID != lq.ID() {
		t.Fatalf("show --lease %s -o json: %+v, %v", lq.ID(), locks, err)
	}
	// A waiter's lease id.
	in, _ := lockcore.NewInspector(db, f.table)
	var waiter string
	deadline := time.Now().Add(10 * time.Second)
	for waiter == "" {
		if ls, err := in.Show(ctx, "order#9", lockcore.ShowOptions{}); err == nil && len(ls[0].Waiters) == 1 {
			waiter = ls[0].Waiters[0].LeaseID
		} else if time.Now().After(deadline) {
			t.Fatal("queue waiter never appeared")
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	contains(t, f.ok("locks", "show", "--lease", waiter, "--table", f.table), "lease "+waiter+" waits for this lock (position 1):", "order#9")
	// Unknown lease ids, and a key that may be a lease id.
	if _, errs, code := f.run("locks", "show", "--lease", "gone#abc", "--table", f.table); code != 1 || !strings.Contains(errs, "lease gone#abc holds and waits for no lock") {
		t.Errorf("show --lease of an unknown lease: exit %d: %s", code, errs)
	}
	if _, errs, code := f.run("locks", "show", "orderprocessor-7f3a#abc", "--table", f.table); code != 1 || !strings.Contains(errs, "--lease orderprocessor-7f3a#abc") {
		t.Errorf("show of a lease id as KEY: exit %d: %s", code, errs)
	}
	if _, errs, code := f.run("locks", "show", "k", "--lease", "x#y", "--table", f.table); code != 2 || !strings.Contains(errs, "unexpected arguments") {
		t.Errorf("show KEY --lease: exit %d: %s", code, errs)
	}
}

// A missing table and a table whose keys are not the lock table's are named as such,
// not as DynamoDB's ResourceNotFoundException / ValidationException.
func TestTableErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ep := testenv.Endpoint()
	missing := f.table + "-missing"
	for _, args := range [][]string{
		{"locks", "ls"}, {"locks", "abandoned"}, {"locks", "show", "sku#GPU"}, {"locks", "show", "--lease", "a#b"},
		{"locks", "watch", "sku#GPU", "--count", "1", "--interval", "10ms"},
		{"locks", "release", "sku#GPU", "--force", "--reason", "r", "--current"},
	} {
		out, errs, code := f.run(append(args, "--table", missing)...)
		want := "table " + missing + " not found at " + ep + "\nhint: the name came from --table"
		if code != 1 || !strings.Contains(errs, want) || strings.Contains(errs+out, "ResourceNotFound") {
			t.Errorf("turnstile %q on a missing table: exit %d\nstderr %s\nstdout %s\nwant exit 1 and %q", args, code, errs, out, want)
		}
	}
	f.vars["TURNSTILE_LOCK_TABLE"] = missing
	if _, errs, _ := f.run("locks", "ls"); !strings.Contains(errs, "the name came from $TURNSTILE_LOCK_TABLE") {
		t.Errorf("hint for a table from the environment: %s", errs)
	}
	// The orders table (key orderId) given for the lock table.
	orders := testenv.Table(t, "OrdersTable")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testenv.Client(t).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(orders),
		Item: map[string]types.AttributeValue{"orderId": &types.AttributeValueMemberS{Value: "o-1"}}}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"locks", "ls"}, {"locks", "abandoned"}, {"locks", "show", "sku#GPU"}, {"locks", "show", "--lease", "a#b"},
		{"locks", "watch", "sku#GPU", "--count", "1", "--interval", "10ms"},
		{"locks", "release", "sku#GPU", "--force", "--reason", "r", "--current"},
	} {
		out, errs, code := f.run(append(args, "--table", orders)...)
		want := "table " + orders + " at " + ep + " is not a lock table: its key schema is orderId (HASH, string); " +
			"a lock table's is pk (HASH, string), sk (RANGE, string)"
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("turnstile %q on a table with other keys: exit %d\nstderr %s\nstdout %s\nwant exit 1 and %q", args, code, errs, out, want)
		}
	}
	// show --strategy item: the data table missing, or KEY not its key.
	if _, errs, code := f.run("locks", "show", "--strategy", "item", "--item-table", missing, "pk=a,sk=b"); code != 1 ||
		!strings.Contains(errs, "table "+missing+" not found at "+ep+"\nhint: the name came from --item-table") {
		t.Errorf("show item in a missing table: exit %d: %s", code, errs)
	}
	if _, errs, code := f.run("locks", "show", "--strategy", "item", "--item-table", orders, "pk=a,sk=b"); code != 1 ||
		!strings.Contains(errs, "KEY pk=a,sk=b is not the primary key of table "+orders+" at "+ep+", whose key schema is orderId (HASH, string)") {
		t.Errorf("show item with the wrong key: exit %d: %s", code, errs)
	}
}

// A lock table may hold other items: ls, abandoned and show list the locks only (issue
// 26), whatever the items' sort keys look like.
func TestLocksIgnoreForeignItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	dead, _ := lockcore.NewMutex(db, f.table, opts("crashed", lockcore.WithHeartbeat(0))...)
	if _, err := dead.Acquire(ctx, "sku#GPU"); err != nil { // never renewed nor released
		t.Fatal(err)
	}
	sks := []string{"lock", "STOCK", "lock#ticket", "queue#counter", "queue#t#00000000000000000001"}
	states := []string{"released", "held", "fair"}
	for i := range 60 {
		item := map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("order#%03d", i)}, "sk": &types.AttributeValueMemberS{Value: sks[i%len(sks)]},
			"state": &types.AttributeValueMemberS{Value: states[i%len(states)]}, "until": &types.AttributeValueMemberN{Value: "1"},
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	var locks []lockcore.Lock
	if err := json.Unmarshal([]byte(f.ok("locks", "ls", "--table", f.table, "-o", "json")), &locks); err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Key != "sku#GPU" {
		t.Fatalf("ls on a table with 60 other items: %d locks (want sku#GPU alone): %+v", len(locks), locks)
	}
	if out := f.ok("locks", "ls", "--table", f.table); strings.Contains(out, "order#") {
		t.Fatalf("ls lists other items:\n%s", out)
	}
	time.Sleep(3*time.Second + 200*time.Millisecond) // the crashed holder's lease ends
	if err := json.Unmarshal([]byte(f.ok("locks", "abandoned", "--table", f.table, "--skew", "100ms", "-o", "json")), &locks); err != nil ||
		len(locks) != 1 || locks[0].Key != "sku#GPU" {
		t.Fatalf("abandoned on a table with other items: %+v, %v", locks, err)
	}
	if _, errs, code := f.run("locks", "show", "order#001", "--table", f.table); code != 1 || !strings.Contains(errs, "no such lock") {
		t.Fatalf("show of another item's key: exit %d: %s", code, errs)
	}
}
