package demo

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// Two orders read the same stock version before either writes: the second write's
// version condition fails, it is counted as a conflict, read again and retried, and both
// orders are decided once with the stock moved twice. A copy of a decided order is a
// duplicate and writes nothing.
func TestOptimisticConflictIsRetried(t *testing.T) {
	names := testenv.Tables(t, "OrdersTable", "InventoryTable")
	orders, inventory := names["OrdersTable"], names["InventoryTable"]
	aud := newAudit(orders, inventory)
	m := &meter{audit: aud}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := ddblocal.NewClient(ctx, testenv.Endpoint(), m.option())
	if err != nil {
		t.Fatal(err)
	}
	seed := &naiveStore{db: testenv.Client(t), orders: orders, inventory: inventory}
	if err := seed.seed(ctx, "HOT", 5); err != nil {
		t.Fatal(err)
	}
	stats := &optimisticStats{}
	// Both first attempts wait here after their read until both have read.
	var reads sync.WaitGroup
	reads.Add(2)
	var mu sync.Mutex
	first := map[string]bool{}
	hook := func(id string) {
		mu.Lock()
		again := first[id]
		first[id] = true
		mu.Unlock()
		if !again {
			reads.Done()
			reads.Wait()
		}
	}
	store := func() *optimisticStore {
		return &optimisticStore{db: client, orders: orders, inventory: inventory, stats: stats,
			attempts: optimisticAttempts, backoff: time.Millisecond, backoffCap: 5 * time.Millisecond, beforeWrite: hook}
	}
	a := shop.Order{OrderID: "ord-a", CustomerID: "c", Lines: []shop.Line{{SKU: "HOT", Qty: 1}}}
	b := shop.Order{OrderID: "ord-b", CustomerID: "c", Lines: []shop.Line{{SKU: "HOT", Qty: 2}}}
	errs := make(chan error, 2)
	for _, o := range []shop.Order{a, b} {
		go func() { errs <- store().processOrder(ctx, o) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := store().processOrder(ctx, a); err != nil { // a redelivery
		t.Fatal(err)
	}
	st := stats.stats(2)
	// One of the two first writes loses (both may, if the engine cancels both for a
	// transaction conflict); every lost one is read again and retried.
	if st.Retries < 1 || st.Attempts != 3+st.Retries || st.Decided != 2 || st.Duplicates != 1 || st.Exhausted != 0 ||
		st.RetriesPerOrder != round2(float64(st.Retries)/2) {
		t.Errorf("stats = %+v; want 2 decided, at least 1 conflict retried, 1 duplicate, attempts = 3 + retries", st)
	}
	fs, err := readFinalState(ctx, testenv.Client(t), orders, inventory)
	if err != nil {
		t.Fatal(err)
	}
	if got := fs.stock["HOT"]; got != (stockRow{available: 2, reserved: 3, ver: 2}) {
		t.Errorf("stock = %+v, want available 2, reserved 3, ver 2", got)
	}
	if fs.status["ord-a"] != "RESERVED" || fs.status["ord-b"] != "RESERVED" {
		t.Errorf("statuses = %v", fs.status)
	}
	decisions, writes := aud.snapshot()
	if len(decisions["ord-a"]) != 1 || len(decisions["ord-b"]) != 1 || writes["HOT"] != 2 {
		t.Errorf("decisions %v, stock writes %v; want one each, 2 stock writes", decisions, writes)
	}
	if n, per, most := aud.decisionWriteStats(); n != 2 || per != 1 || most != 1 {
		t.Errorf("decision writes %d, %.2f orders each, at most %d; want 2 writes of one order", n, per, most)
	}
}

// TestOptimisticRun runs the optimistic run alone on a small workload with one hot SKU
// (every hot order wants it) at 8 concurrent invocations: it must be correct — every
// order decided exactly once, nothing oversold, stock conserved, no lost update — and
// its attempts must add up: each ended decided, duplicate or retried after a conflict.
func TestOptimisticRun(t *testing.T) {
	testenv.Client(t)
	var out bytes.Buffer
	cfg := Config{
		Orders: 40, Concurrency: 8, Seed: 3, Crashes: 0, HotSKUs: 1, Poison: -1,
		Endpoint: testenv.Endpoint(), Out: &out, MaxDuration: time.Minute, Optimistic: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d, err := newDemo(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.runOptimistic(ctx)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.timedOut {
		t.Fatal("the run did not settle")
	}
	o := res.out
	if len(o.violations) != 0 || o.lostUpdates != 0 {
		t.Errorf("violations %v, lost updates %d", o.violations, o.lostUpdates)
	}
	if o.final != 40 || o.doubleProcessed != 0 || o.oversoldUnits != 0 || o.residualUnits != 0 {
		t.Errorf("decided %d of 40, double processed %d, oversold %d, stock off by %d",
			o.final, o.doubleProcessed, o.oversoldUnits, o.residualUnits)
	}
	if o.rejected == 0 || o.reserved == 0 {
		t.Errorf("reserved %d, rejected %d: the hot SKU should sell out", o.reserved, o.rejected)
	}
	st := d.runStats(res, res.calls["optimistic"], res.capacity, 0)
	c := st.Conflicts
	if c == nil {
		t.Fatal("no conflict figures")
	}
	t.Logf("attempts %+v; %.1f calls, %.1f CU per order; %.2f orders per decision write", *c,
		st.CallsPerOrder, st.CapacityUnitsPerOrder, st.OrdersPerDecisionWrite)
	if c.Decided != 40 || c.Failed != 0 || c.Attempts != c.Decided+c.Duplicates+c.Retries {
		t.Errorf("attempts %+v: want 40 decided, none failed, and attempts = decided + duplicates + conflict retries", *c)
	}
	if c.RetriesPerOrder != round2(float64(c.Retries)/40) {
		t.Errorf("retries per order %v, want %d/40", c.RetriesPerOrder, c.Retries)
	}
	if st.OrdersPerDecisionWrite != 1 || st.DecisionWrites != 40 || st.HotSKU != nil {
		t.Errorf("decision writes %d, %.2f orders each; hot SKU %+v: want 40 writes of one order, no lock figures",
			st.DecisionWrites, st.OrdersPerDecisionWrite, st.HotSKU)
	}
}
