package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestTinyDemo runs the whole demo on a few orders against the test engine: the real
// handlers, one injected holder crash whose abandoned stock locks the janitor's sweep
// finds, then the naive baseline.
func TestTinyDemo(t *testing.T) {
	testenv.Client(t) // fails fast, naming the endpoint, when the engine is unreachable
	tuneSettings = func(s *settings) { s.asyncDelay = time.Second }
	defer func() { tuneSettings = nil }()

	var out bytes.Buffer
	cfg := Config{
		Orders: 30, Concurrency: 4, Seed: 7, Crashes: 1, HotSKUs: 2,
		Endpoint: testenv.Endpoint(), Out: &out, MaxDuration: 2 * time.Minute,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if rep != nil {
		rep.WriteText(&out)
	}
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	if !rep.InvariantsOK || !rep.ChecksOK {
		t.Errorf("invariants_ok %v, checks_ok %v: %v", rep.InvariantsOK, rep.ChecksOK, rep.Violations)
	}
	if rep.OrdersCompleted != rep.OrdersSubmitted || rep.OrdersSubmitted != 30 {
		t.Errorf("orders completed %d of %d submitted, want all 30", rep.OrdersCompleted, rep.OrdersSubmitted)
	}
	if rep.DoubleProcessed != 0 || rep.LostUpdates != 0 || rep.OversoldUnits != 0 {
		t.Errorf("double processed %d, lost updates %d, oversold %d; want 0", rep.DoubleProcessed, rep.LostUpdates, rep.OversoldUnits)
	}
	if rep.HolderCrashes != 1 || rep.AbandonedLocksInjected < 1 || rep.AbandonedLocksDetected != rep.AbandonedLocksInjected {
		t.Errorf("crashes %d, abandoned leases injected %d, detected %d; want 1 crash and every lease detected",
			rep.HolderCrashes, rep.AbandonedLocksInjected, rep.AbandonedLocksDetected)
	}
	if rep.AbandonedLeasesFound < rep.AbandonedLocksDetected {
		t.Errorf("the janitor reported %d abandoned leases, fewer than the %d detections", rep.AbandonedLeasesFound, rep.AbandonedLocksDetected)
	}
	// The baseline ran the same workload and was measured.
	if rep.Baseline.OrdersCompleted+len(rep.Baseline.SKUs) == 0 || len(rep.Baseline.SKUs) != rep.Settings.Catalogue {
		t.Errorf("baseline not measured: %+v", rep.Baseline)
	}
	if rep.Baseline.CallsPerOrder <= 0 {
		t.Errorf("baseline made no DynamoDB calls: %+v", rep.Baseline)
	}
	if rep.DynamoDBCallsPerOrder <= 0 || rep.LockWaitP50Ms <= 0 {
		t.Errorf("calls per order %v, lock wait p50 %v; want measured figures", rep.DynamoDBCallsPerOrder, rep.LockWaitP50Ms)
	}

	// The deployed settings: maxReceiveCount 5; poison is dead-lettered after 5 receives in
	// both runs, no valid order is.
	if rep.Settings.MaxReceiveCount != 5 {
		t.Errorf("maxReceiveCount %d, want the template's 5", rep.Settings.MaxReceiveCount)
	}
	for _, name := range []string{"turnstile", "naive"} {
		st, ok := rep.Runs[name]
		if !ok {
			t.Fatalf("no per-order figures for the %s run", name)
		}
		if st.PoisonSent < 2 || st.DeadLetteredPoison != st.PoisonSent || st.DeadLetteredOrders != 0 {
			t.Errorf("%s: poison sent %d, dead-lettered %d (receives %v); orders dead-lettered %d",
				name, st.PoisonSent, st.DeadLetteredPoison, st.PoisonReceives, st.DeadLetteredOrders)
		}
		if st.LatencyP50Ms <= 0 || st.CallsPerOrder <= 0 || st.ReceiveCounts["1"] == 0 {
			t.Errorf("%s: figures not measured: %+v", name, st)
		}
	}

	// demo-report.json holds the fields the issue lists.
	path := filepath.Join(t.TempDir(), "demo-report.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		"invariants_ok", "orders_submitted", "orders_completed", "orders_rejected", "double_processed",
		"lost_updates", "oversold_units", "abandoned_locks_injected", "abandoned_locks_detected",
		"baseline_lost_updates", "baseline_oversold_units", "baseline_double_processed",
		"lock_wait_p50_ms", "lock_wait_p99_ms", "dynamodb_calls_per_order", "duration_s",
	} {
		if _, ok := fields[k]; !ok {
			t.Errorf("demo-report.json lacks %q", k)
		}
	}
}

// The demo's StockAdjusted events are ones the template's rule would deliver (it matches
// source and detail-type).
func TestStockAdjustedEventMatchesTheRule(t *testing.T) {
	fn, err := stack.LookupFunction(testenv.Template(t), "InventoryUpdaterFunction")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []any
	for _, e := range fn.Events() {
		if e.Type == "EventBridgeRule" {
			patterns = append(patterns, e.FilterPatterns()...)
		}
	}
	if len(patterns) == 0 {
		t.Fatal("no EventBridge rule on the inventory updater")
	}
	ev := stockAdjustedEvent(map[string]any{"adjustmentId": "a", "sku": "S", "delta": 1}, time.Now())
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := stack.MatchAny(patterns, raw); err != nil || !ok {
		t.Errorf("the rule does not match the demo's event %s (%v)", raw, err)
	}
}
