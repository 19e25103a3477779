package handler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/eventshape"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// Two different adjustments whose ids differ only in an unpaired UTF-16 surrogate escape
// decoded to the same id (encoding/json turns both into U+FFFD): the second was taken for
// a duplicate delivery of the first and its stock change silently dropped (found by
// review). Each must fail as an invalid event naming detail.adjustmentId, and the stock
// stay as it was.
func TestAdjustmentIDWithUnpairedSurrogateIsInvalid(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.svc.SeedStock(ctx, "MUG-RED-350", 10); err != nil {
		t.Fatal(err)
	}
	base := loadEvent(t, "eventbridge-stock-adjusted.json")
	for i, esc := range []string{`\ud800`, `\udc00`} {
		ev := withDetail(base, `{"adjustmentId":"adj-`+esc+`","sku":"MUG-RED-350","delta":5}`)
		err := f.h.Handle(ctx, ev)
		var ie *eventshape.InvalidEventError
		var fe *shop.FieldError
		if !errors.As(err, &ie) || !errors.As(err, &fe) || fe.Field != "detail.adjustmentId" {
			t.Errorf("event %d: err = %v; want an InvalidEventError naming detail.adjustmentId", i, err)
		}
	}
	if a, _, _ := f.svc.Stock(ctx, "MUG-RED-350"); a != 10 {
		t.Errorf("available = %d, want 10 (untouched)", a)
	}
}

// EventBridge delivers at least once: the same event twice at the same time applies its
// adjustment once, and both invocations succeed (the second as a duplicate, after
// waiting for the first's SKU lock).
func TestSameEventTwiceConcurrently(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.svc.SeedStock(ctx, "MUG-RED-350", 10); err != nil {
		t.Fatal(err)
	}
	ev := loadEvent(t, "eventbridge-stock-adjusted.json")
	// One execution environment per delivery: its own service and owner.
	hs := make([]*handler.Handler, 4)
	for i := range hs {
		svc, err := shop.NewService(testenv.Client(t), f.tables, shop.WithOwner(fmt.Sprintf("inventoryupdater-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = handler.New(svc, handler.WithLogger(slog.New(slog.DiscardHandler)), handler.WithMetrics(nil))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(hs))
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			errs[i] = h.Handle(ictx, ev)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("invocation %d: %v", i, err)
		}
	}
	if a, _, _ := f.svc.Stock(ctx, "MUG-RED-350"); a != 35 {
		t.Errorf("available = %d, want 35 (applied once)", a)
	}
}
