package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []int
		want float64
	}{
		{[]int{5, 5, 5, 5}, 1},
		{[]int{8, 0, 0, 0}, 0.25},
		{[]int{2, 1}, 0.9},
		{[]int{0, 0}, 0},
	} {
		if got := Jain(c.xs); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := Percentile(ds, 50); got != 50*time.Millisecond {
		t.Errorf("p50 = %v", got)
	}
	if got := Percentile(ds, 99); got != 99*time.Millisecond {
		t.Errorf("p99 = %v", got)
	}
	if got := Percentile(ds, 100); got != 100*time.Millisecond {
		t.Errorf("p100 = %v", got)
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Percentile sorted its argument")
	}
}

func TestHandoffsAndOverlap(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var tl Timeline
	tl.Add(Interval{Start: at(30), End: at(40)})
	tl.Add(Interval{Start: at(0), End: at(10)})
	tl.Add(Interval{Start: at(12), End: at(25)})
	tl.Add(Interval{Start: at(20), End: at(28)}) // overlaps the previous: no sample
	got := Handoffs(tl.Intervals())
	want := []time.Duration{2 * time.Millisecond, 2 * time.Millisecond}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Handoffs = %v, want %v", got, want)
	}

	var o Overlap
	if o.Enter() {
		t.Error("first holder saw another")
	}
	if !o.Enter() {
		t.Error("second holder saw nobody")
	}
	o.Exit()
	o.Exit()
	if o.Enter() {
		t.Error("holder after both left saw another")
	}
	if o.Events() != 1 {
		t.Errorf("Events = %d, want 1", o.Events())
	}
}

// echoServer echoes every connection until EOF, then closes it.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestDelayProxy(t *testing.T) {
	const rtt = 20 * time.Millisecond
	p, err := NewDelayProxy(echoServer(t), rtt)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A small round trip takes at least the RTT the proxy adds.
	start := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < rtt {
		t.Errorf("round trip took %v, less than the added %v", took, rtt)
	}
	if string(buf) != "ping" {
		t.Errorf("echo = %q", buf)
	}

	// A large payload arrives intact, streamed while earlier chunks are delayed.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	go func() { _, _ = c.Write(payload) }()
	got := make([]byte, len(payload))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Errorf("payload of %d bytes came back as %d bytes, or changed", len(payload), len(got))
	}
}

func TestDelayProxyCloseEndsConnections(t *testing.T) {
	p, err := NewDelayProxy(echoServer(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a connection open")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after Close")
	}
}

// fakeDB answers every call with the configured output or error.
type fakeDB struct {
	err      error
	units    *float64 // ConsumedCapacity the engine reports
	item     map[string]types.AttributeValue
	transact []types.ConsumedCapacity
}

func (f *fakeDB) cc() *types.ConsumedCapacity {
	if f.units == nil {
		return nil
	}
	return &types.ConsumedCapacity{CapacityUnits: f.units}
}

func (f *fakeDB) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &dynamodb.GetItemOutput{Item: f.item, ConsumedCapacity: f.cc()}, nil
}

func (f *fakeDB) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &dynamodb.PutItemOutput{ConsumedCapacity: f.cc()}, nil
}

func (f *fakeDB) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &dynamodb.UpdateItemOutput{ConsumedCapacity: f.cc()}, nil
}

func (f *fakeDB) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &dynamodb.DeleteItemOutput{ConsumedCapacity: f.cc()}, nil
}

func (f *fakeDB) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &dynamodb.QueryOutput{Items: []map[string]types.AttributeValue{f.item}, ConsumedCapacity: f.cc()}, nil
}

func (f *fakeDB) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &dynamodb.TransactWriteItemsOutput{ConsumedCapacity: f.transact}, nil
}

func TestCountingCapacity(t *testing.T) {
	ctx := context.Background()
	two := 2.0
	big := map[string]types.AttributeValue{"data": &types.AttributeValueMemberS{Value: strings.Repeat("x", 5000)}}
	twoItems := &dynamodb.TransactWriteItemsInput{TransactItems: make([]types.TransactWriteItem, 2)}
	for _, c := range []struct {
		name     string
		db       *fakeDB
		call     func(d *CountingDB) error
		wcu, rcu float64
		fails    int64
	}{
		{"write: engine's figure", &fakeDB{units: &two}, func(d *CountingDB) error {
			_, err := d.PutItem(ctx, &dynamodb.PutItemInput{})
			return err
		}, 2, 0, 0},
		{"write: at least 1", &fakeDB{}, func(d *CountingDB) error {
			_, err := d.DeleteItem(ctx, &dynamodb.DeleteItemInput{})
			return err
		}, 1, 0, 0},
		{"failed condition: 1 WCU", &fakeDB{err: &types.ConditionalCheckFailedException{}}, func(d *CountingDB) error {
			_, err := d.UpdateItem(ctx, &dynamodb.UpdateItemInput{})
			return err
		}, 1, 0, 1},
		{"throttled: nothing", &fakeDB{err: &smithy.GenericAPIError{Code: "ThrottlingException"}}, func(d *CountingDB) error {
			_, err := d.UpdateItem(ctx, &dynamodb.UpdateItemInput{})
			return err
		}, 0, 0, 0},
		{"transaction: 2 per item (DynamoDB Local reports 2 per table)", &fakeDB{transact: []types.ConsumedCapacity{{CapacityUnits: &two}}}, func(d *CountingDB) error {
			_, err := d.TransactWriteItems(ctx, twoItems)
			return err
		}, 4, 0, 0},
		{"transaction: the service's figure when larger (items over 1 KB)", &fakeDB{transact: []types.ConsumedCapacity{{CapacityUnits: aws.Float64(6)}}}, func(d *CountingDB) error {
			_, err := d.TransactWriteItems(ctx, twoItems)
			return err
		}, 6, 0, 0},
		{"cancelled transaction: 2 per item", &fakeDB{err: &types.TransactionCanceledException{
			CancellationReasons: []types.CancellationReason{{Code: aws.String("ConditionalCheckFailed")}, {Code: aws.String("None")}},
		}}, func(d *CountingDB) error {
			_, err := d.TransactWriteItems(ctx, twoItems)
			return err
		}, 4, 0, 1},
		{"consistent read: engine's figure", &fakeDB{units: &two}, func(d *CountingDB) error {
			_, err := d.GetItem(ctx, &dynamodb.GetItemInput{ConsistentRead: aws.Bool(true)})
			return err
		}, 0, 2, 0},
		{"consistent read: computed per 4 KB", &fakeDB{item: big}, func(d *CountingDB) error {
			_, err := d.Query(ctx, &dynamodb.QueryInput{ConsistentRead: aws.Bool(true)})
			return err
		}, 0, 2, 0},
		{"eventually consistent read: half", &fakeDB{item: big}, func(d *CountingDB) error {
			_, err := d.GetItem(ctx, &dynamodb.GetItemInput{})
			return err
		}, 0, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &CountingDB{Next: c.db, C: &Counters{}}
			err := c.call(d)
			if (err != nil) != (c.db.err != nil) || (err != nil && !errors.Is(err, c.db.err) && !errors.As(err, new(*types.TransactionCanceledException))) {
				t.Fatalf("call error = %v, want %v", err, c.db.err)
			}
			u := d.C.Snapshot()
			if u.Calls != 1 || u.WCU != c.wcu || u.RCU != c.rcu || u.CondFails != c.fails {
				t.Errorf("usage = %+v, want 1 call, %v WCU, %v RCU, %d condition failures", u, c.wcu, c.rcu, c.fails)
			}
		})
	}
}

func sampleResults() *Results {
	r := &Results{
		Generated: time.Unix(0, 0).UTC(),
		Params:    Params{RTTs: []float64{0, 5}, TargetRTTms: 5, Duration: "20s"},
	}
	hot := func(s string, eff, jain, cu float64, starved int, baseline bool) Record {
		return Record{Strategy: s, Scenario: ScenarioHotKey, RTTms: 5, Workers: 16, Baseline: baseline,
			Efficiency: fp(eff), Jain: fp(jain), LockCUPerCS: fp(cu), Starved: ip(starved), RCUPerCS: fp(cu)}
	}
	r.Records = []Record{
		{Strategy: "mutex", Scenario: ScenarioUncontended, RTTms: 5, Workers: 1, CallsPerCS: fp(2)},
		{Strategy: "lockingread", Scenario: ScenarioUncontended, RTTms: 5, Workers: 1, CallsPerCS: fp(2.5)},
		hot("mutex", 0.95, 0.5, 3, 2, false),
		hot("queue", 0.85, 0.995, 6, 0, false),
		hot("versioned", 3, 1, 0, 0, false), // not a lock: never "best"
		hot("published-lockingread", 1, 1, 1, 0, true),
		{Strategy: "mutex", Scenario: ScenarioBurst, RTTms: 5, Workers: 16, DoubleHolders: i64p(0)},
		{Strategy: "published-fifo", Scenario: ScenarioBurst, RTTms: 5, Workers: 16, Baseline: true, DoubleHolders: i64p(3)},
		{Strategy: "mutex", Scenario: ScenarioTakeover, RTTms: 5, Workers: 2, TakeoverMode: "observe",
			TakeoverMs: fp(3400), LeaseMs: fp(3000), EarlyTakeovers: ip(0)},
	}
	return r
}

func TestEvaluate(t *testing.T) {
	r := sampleResults()
	r.Evaluate(5, 3*time.Second)
	if r.Best != "queue" {
		t.Errorf("best = %q, want queue (meets 2 of 4 hot-key targets, like mutex, with higher efficiency × Jain)", r.Best)
	}
	want := map[string]bool{
		"uncontended calls per cycle/mutex":                     true,
		"uncontended calls per cycle/lockingread":               false,
		"hot key N=16 (best lockcore): efficiency/queue":        false,
		"hot key N=16 (best lockcore): Jain/queue":              true,
		"hot key N=16 (best lockcore): lock CU per CS/queue":    false,
		"hot key N=16 FIFO queue: efficiency/queue":             true,
		"hot key N=16 FIFO queue: Jain/queue":                   true,
		"hot key N=16 FIFO queue: RCU per CS/queue":             false,
		"burst: double holders/mutex":                           true,
		"takeover ms (longest trial)/mutex":                     false,
		"takeover: waiter in while holder valid (safety)/mutex": true,
	}
	got := map[string]bool{}
	for _, tg := range r.Targets {
		got[tg.Name+"/"+tg.Strategy] = tg.Pass
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("target %s: pass = %v (present %v), want %v", k, p, ok, v)
		}
	}
	if _, ok := got["burst: double holders/published-fifo"]; ok {
		t.Error("a published design was held to lockcore's burst target")
	}
}

func TestChartAndMarkdown(t *testing.T) {
	r := sampleResults()
	r.Evaluate(5, 3*time.Second)
	svg := r.Chart()
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
	for _, s := range []string{"<svg", "mutex", "queue", "published-lockingread †",
		fmt.Sprintf("target ≥ %g at N = 16, 64", TargetEfficiency),
		fmt.Sprintf("target ≤ %g: lockingread, mutex, ticket", float64(TargetCheapLockCU)),
		fmt.Sprintf("target ≥ %g at N = 16, 64", TargetJain)} {
		if !strings.Contains(svg, s) {
			t.Errorf("chart lacks %q", s)
		}
	}
	md := r.Markdown(Strategies())
	for _, s := range []string{"## Targets", "![", ChartFile, "## Hot key", "## Burst safety", "## Takeover", "PASS", "MISS"} {
		if !strings.Contains(md, s) {
			t.Errorf("RESULTS.md lacks %q", s)
		}
	}
}

// TestChartCutsAnOutlyingBaseline: a published design far above lockcore's figures
// (124 lock CU per CS against 2–7) must not flatten lockcore's bars. Its bar is cut at the
// top of the axis and labelled with its value; the axis is scaled to lockcore's values and
// the target.
func TestChartCutsAnOutlyingBaseline(t *testing.T) {
	r := sampleResults()
	r.Records = append(r.Records, Record{Strategy: "published-fifo", Scenario: ScenarioHotKey, RTTms: 5, Workers: 16,
		Baseline: true, Efficiency: fp(0.7), Jain: fp(0.42), LockCUPerCS: fp(124.2), Starved: ip(0)})
	svg := r.Chart()
	// Bar heights by the <title> "strategy N=16: value" of the lock CU panel's bars.
	height := func(title string) float64 {
		t.Helper()
		re := regexp.MustCompile(`height="([0-9.]+)" fill="[^"]*"><title>` + regexp.QuoteMeta(title) + `</title>`)
		m := re.FindStringSubmatch(svg)
		if m == nil {
			t.Fatalf("no bar titled %q in the chart", title)
		}
		h, _ := strconv.ParseFloat(m[1], 64)
		return h
	}
	const plotH = 180
	if h := height("published-fifo N=16: 124.2"); h != plotH {
		t.Errorf("the outlying baseline's bar is %.1f high, want cut at the axis top (%d)", h, plotH)
	}
	if h := height("mutex N=16: 3"); h < plotH/4 {
		t.Errorf("mutex's 3 lock CU per CS is a bar %.1f high of %d: the axis is scaled to the outlier", h, plotH)
	}
	if !strings.Contains(svg, ">124.2 ▲</text>") {
		t.Error("the cut bar does not show its value")
	}
	if !strings.Contains(svg, "a bar cut at the top of its axis shows its value") {
		t.Error("the chart does not explain cut bars")
	}
}

// TestReportAWSLockClient: the AWS lock client's records appear in the chart and the
// tables as a baseline with what ran, it is never the best lockcore strategy, and a run
// that could not build it says so in RESULTS.md and the text report.
func TestReportAWSLockClient(t *testing.T) {
	r := sampleResults()
	impl := "dynamodb-lock-client 1.3.0 on AWS SDK for Java 2.57.8"
	r.Records = append(r.Records, Record{Strategy: AWSLockClient, Scenario: ScenarioHotKey, RTTms: 5, Workers: 16, Baseline: true,
		Efficiency: fp(2), Jain: fp(1), LockCUPerCS: fp(1), Starved: ip(0), Implementation: impl})
	r.Evaluate(5, 3*time.Second)
	if r.Best == AWSLockClient {
		t.Error("the AWS lock client was ranked as a lockcore strategy")
	}
	if svg := r.Chart(); !strings.Contains(svg, AWSLockClient+" †") {
		t.Error("chart lacks the AWS lock client as a baseline")
	}
	md := r.Markdown(Strategies())
	for _, s := range []string{"| " + AWSLockClient + " † |", impl, "`" + AWSLockClient + "` † (bench only)"} {
		if !strings.Contains(md, s) {
			t.Errorf("RESULTS.md lacks %q", s)
		}
	}

	r.Skipped = []Skipped{{Strategy: AWSLockClient, Reason: "awspeer: the AWS lock client peer needs mvn on PATH"}}
	md = r.Markdown(Strategies())
	if !strings.Contains(md, "**Not measured: `"+AWSLockClient+"`.** awspeer: the AWS lock client peer needs mvn on PATH") {
		t.Error("RESULTS.md does not say why the AWS lock client was not measured")
	}
	var text bytes.Buffer
	r.PrintText(&text)
	if !strings.Contains(text.String(), "NOT MEASURED: "+AWSLockClient+": awspeer: the AWS lock client peer needs mvn") {
		t.Errorf("text report does not say why the AWS lock client was not measured:\n%s", text.String())
	}
}

func TestSelectStrategies(t *testing.T) {
	all, err := SelectStrategies("all")
	if err != nil || len(all) != len(Strategies()) {
		t.Fatalf("all: %d strategies, %v", len(all), err)
	}
	more, err := SelectStrategies("all,ticket,mutex")
	if err != nil || len(more) != len(Strategies()) {
		t.Fatalf("all,ticket,mutex: %d strategies, %v", len(more), err)
	}
	two, err := SelectStrategies("queue, mutex")
	if err != nil || len(two) != 2 || two[0].Name != "queue" || two[1].Name != "mutex" {
		t.Fatalf("queue, mutex: %v, %v", two, err)
	}
	if _, err := SelectStrategies("mutex,nope"); err == nil {
		t.Error("unknown strategy accepted")
	}
}

func TestSectionKeys(t *testing.T) {
	pool := []string{"a", "b", "c", "d"}
	seen := map[string]int{}
	for i := range 8 {
		for j := range 4 {
			keys := sectionKeys(pool, 3, i, j)
			if len(keys) != 3 || !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != 3 {
				t.Fatalf("sectionKeys(%d, %d) = %v: want 3 distinct keys, sorted", i, j, keys)
			}
			// Any two sections of 3 of 4 keys share one: they must run one at a time.
			other := sectionKeys(pool, 3, i+1, j+2)
			if !slices.ContainsFunc(keys, func(k string) bool { return slices.Contains(other, k) }) {
				t.Fatalf("%v and %v share no key", keys, other)
			}
			for _, k := range keys {
				seen[k]++
			}
		}
	}
	for _, k := range pool {
		if seen[k] != 24 { // every key in 3 of 4 sections
			t.Errorf("key %s in %d of 32 sections, want 24", k, seen[k])
		}
	}
	if got := sectionKeys(pool[:1], 1, 3, 5); !slices.Equal(got, pool[:1]) {
		t.Errorf("one key: %v", got)
	}
}

func TestEvaluateFanOut(t *testing.T) {
	r := &Results{Params: Params{RTTs: []float64{0, 5}, TargetRTTms: 5}}
	rec := func(s, scenario string, rtt float64, n int, eff, jain, cu float64, starved int) Record {
		return Record{Strategy: s, Scenario: scenario, RTTms: rtt, Workers: n, Efficiency: fp(eff), Jain: fp(jain),
			LockCUPerCS: fp(cu), Starved: ip(starved), DoubleHolders: i64p(0)}
	}
	r.Records = []Record{
		rec("mutex", ScenarioHotKey, 5, 16, 0.92, 0.99, 2.5, 0),
		rec("mutex", ScenarioHotKey, 5, 64, 0.85, 0.97, 3.2, 0), // CU above 3 and 1.28 × N=16
		rec("ticket", ScenarioHotKey, 5, 16, 0.95, 1, 2.8, 0),
		rec("ticket", ScenarioHotKey, 5, 64, 0.93, 1, 2.9, 0),
		rec("ticket", ScenarioHotKey, 0, 16, 0.7, 1, 3, 0),
		rec("multi", ScenarioMultiKey, 5, 16, 0.75, 0.5, 6, 3),
	}
	r.Evaluate(5, 3*time.Second)
	got := map[string]bool{}
	for _, tg := range r.Targets {
		got[fmt.Sprintf("%s/%s/%d", tg.Name, tg.Strategy, tg.Workers)] = tg.Pass
	}
	want := map[string]bool{
		"fan-out hot key N=16: Jain/mutex/16":                      true,
		"fan-out hot key N=64: efficiency/mutex/64":                true,
		"fan-out hot key N=16: best efficiency/ticket/16":          true,
		"fan-out hot key N=64: lock CU per CS/mutex/64":            false,
		"fan-out hot key: lock CU per CS, N=64 / N=16/mutex/64":    false,
		"fan-out hot key: lock CU per CS, N=64 / N=16/ticket/64":   true,
		"fan-out hot key N=16 direct: ticket efficiency/ticket/16": false,
		"fan-out multi-key N=16: Jain/multi/16":                    false,
		"fan-out multi-key N=16: starved workers/multi/16":         false,
		"fan-out multi-key N=16: efficiency/multi/16":              false,
		"fan-out multi-key N=16: double holders/multi/16":          true,
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("target %s: pass = %v (present %v), want %v", k, p, ok, v)
		}
	}
}

func TestEvaluateAWSClient(t *testing.T) {
	r := &Results{Params: Params{RTTs: []float64{0, 5}, TargetRTTms: 5}}
	rec := func(s string, rtt float64, n int, cs, calls float64) Record {
		return Record{Strategy: s, Scenario: ScenarioHotKey, RTTms: rtt, Workers: n, CSPerSec: fp(cs), CallsPerCS: fp(calls),
			Baseline: s == AWSLockClient}
	}
	r.Records = []Record{
		rec(AWSLockClient, 0, 16, 120, 3.2),
		rec("mutex", 0, 16, 100, 6),
		rec(BypassStrategy, 0, 16, 200, 1.3),
		rec("ticket", 0, 16, 90, 3.1),
		rec(AWSLockClient, 5, 4, 20, 3),
		rec("mutex", 5, 4, 19, 5),
	}
	r.Evaluate(5, 3*time.Second)
	got := map[string]bool{}
	for _, tg := range r.Targets {
		got[fmt.Sprintf("%s/%s/%g/%d", tg.Name, tg.Strategy, tg.RTTms, tg.Workers)] = tg.Pass
	}
	want := map[string]bool{
		"vs AWS lock client: CS/s, best lockcore ÷ client/mutex-bypass/0/16": true,
		"vs AWS lock client: lock calls per CS (client's)/mutex/0/16":        false,
		"vs AWS lock client: lock calls per CS (client's)/ticket/0/16":       true,
		"vs AWS lock client: CS/s, best lockcore ÷ client/mutex/5/4":         false,
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("target %s: pass = %v (present %v), want %v", k, p, ok, v)
		}
	}
	for k := range got {
		if strings.Contains(k, "calls per CS") && strings.HasSuffix(k, "/4") {
			t.Errorf("calls target at 4 workers: %s", k)
		}
	}
}
