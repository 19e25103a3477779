package handler_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// The inventory updater waits for a contended SKU within its invocation (deadline-derived
// wait) instead of failing after a second, and fails for an asynchronous retry only when
// the lock stays held until the safety margin before its deadline.
func TestContentionWaitsWithinTheDeadline(t *testing.T) {
	names := testenv.Tables(t, "LockTable", "InventoryTable")
	tables := shop.Tables{Locks: names["LockTable"], Inventory: names["InventoryTable"]}
	db := testenv.Client(t)
	hsvc, err := shop.NewService(calls.Client(db), tables, shop.WithOwner("inventoryupdater-wait"), shop.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := shop.NewService(db, tables, shop.WithOwner("inventoryupdater-fixture"))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.SeedStock(context.Background(), "MUG-RED-350", 10); err != nil {
		t.Fatal(err)
	}
	h := handler.New(hsvc, handler.WithLogger(slog.New(slog.DiscardHandler)), handler.WithMetrics(nil))
	// Held for 1.5 s (longer than the old 1 s budget): waited out.
	held := holdStock(t, db, tables.Inventory, "another-invocation", "MUG-RED-350", 10*time.Second)
	time.AfterFunc(1500*time.Millisecond, func() { _ = held.Release(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := h.Handle(ctx, loadEvent(t, "eventbridge-stock-adjusted.json")); err != nil {
		t.Fatalf("Handle = %v", err)
	}
	if waited := time.Since(start); waited < 1400*time.Millisecond {
		t.Errorf("applied after %s, before the holder released", waited)
	}
	if a, _, _ := svc.Stock(context.Background(), "MUG-RED-350"); a != 35 {
		t.Errorf("available = %d, want 35", a)
	}

	// Held for good: fails a safety margin before the deadline, for a retry.
	held = holdStock(t, db, tables.Inventory, "another-invocation", "MUG-RED-350", 10*time.Second)
	defer func() { _ = held.Release(context.Background()) }()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	start = time.Now()
	err = h.Handle(ctx2, withDetail(loadEvent(t, "eventbridge-stock-adjusted.json"), `{"adjustmentId":"adj-wait-2","sku":"MUG-RED-350","delta":1}`))
	var lc *handler.LockContendedError
	if !errors.As(err, &lc) || !errors.Is(err, shop.ErrBusy) {
		t.Fatalf("Handle = %v, want a LockContendedError", err)
	}
	if took := time.Since(start); took < time.Second || took >= 2*time.Second {
		t.Errorf("gave up after %s; want most of the 2s invocation, before its deadline", took)
	}
}
