package handler_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// freezer is a DynamoDB client that freezes its writes (heartbeats included) after its
// first UpdateItem — the locking read of the adjustment's stock item, which is the read of
// its stock — until thawed: a Lambda environment paused between deciding and writing.
type freezer struct {
	*dynamodb.Client
	armed  atomic.Bool
	read   chan struct{} // closed after the first read
	thawed chan struct{}
	once   sync.Once
}

func (f *freezer) wait() {
	if f.armed.Load() {
		<-f.thawed
	}
}

func (f *freezer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.wait()
	out, err := f.Client.UpdateItem(ctx, in, opts...)
	f.once.Do(func() { f.armed.Store(true); close(f.read) })
	return out, err
}

func (f *freezer) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.wait()
	return f.Client.TransactWriteItems(ctx, in, opts...)
}

// A write-off that would make the stock negative is decided REJECTED by an invocation
// that then pauses (its lease runs out) before it records the rejection. Meanwhile a
// restock lands and a redelivery of the same event applies the write-off. The paused
// invocation's rejection write then finds the marker — the redelivery's APPLIED one —
// and its lease lost; it reported the adjustment rejected all the same (WARN
// "adjustment rejected", AdjustmentsRejected), taking another's decision for an earlier
// attempt of its own (found by review). It must report what the marker says: applied,
// a duplicate.
func TestPausedRejectionFindsTheAdjustmentApplied(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.svc.SeedStock(ctx, "MUG-RED-350", 3); err != nil {
		t.Fatal(err)
	}
	fz := &freezer{Client: testenv.Client(t), read: make(chan struct{}), thawed: make(chan struct{})}
	paused, err := shop.NewService(fz, f.tables, shop.WithOwner("inventoryupdater-paused"), shop.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	hp := handler.New(paused, handler.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))), handler.WithMetrics(nil))
	others, err := shop.NewService(testenv.Client(t), f.tables, shop.WithOwner("inventoryupdater-live"), shop.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ho := handler.New(others, handler.WithLogger(slog.New(slog.DiscardHandler)), handler.WithMetrics(nil))

	base := loadEvent(t, "eventbridge-stock-adjusted.json")
	writeOff := withDetail(base, `{"adjustmentId":"adj-wo-paused","sku":"MUG-RED-350","delta":-5}`)
	restock := withDetail(base, `{"adjustmentId":"adj-rs-paused","sku":"MUG-RED-350","delta":10}`)
	done := make(chan error, 1)
	go func() {
		ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done <- hp.Handle(ictx, writeOff)
	}()
	<-fz.read // it saw 3 available: a rejection; now it is paused
	// Both wait for the paused lease to be taken over (a lease unchanged for its length).
	for _, ev := range []events.EventBridgeEvent{restock, writeOff} {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := ho.Handle(ictx, ev)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	close(fz.thawed)
	if err := <-done; err != nil {
		t.Errorf("paused invocation: %v", err)
	}
	if a, _, _ := f.svc.Stock(ctx, "MUG-RED-350"); a != 8 {
		t.Errorf("available = %d, want 8 (3 + 10 - 5)", a)
	}
	if strings.Contains(logs.String(), "adjustment rejected") || !strings.Contains(logs.String(), "adjustment already applied") {
		t.Errorf("the paused invocation must report the adjustment applied (a duplicate), not rejected:\n%s", logs.String())
	}
}
