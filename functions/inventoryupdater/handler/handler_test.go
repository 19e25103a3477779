package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/eventshape"
	"github.com/turnstile-locks/turnstile/internal/policycheck"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// calls records the DynamoDB calls of the handler under test; after the tests they are
// compared with the function's role in template.yaml (policycheck).
var calls = policycheck.NewRecorder()

func TestMain(m *testing.M) { testenv.Main(policycheck.Run(m, "InventoryUpdaterFunction", calls)) }

func loadEvent(t *testing.T, name string) events.EventBridgeEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

func withDetail(ev events.EventBridgeEvent, detail string) events.EventBridgeEvent {
	ev.Detail = json.RawMessage(detail)
	return ev
}

func TestHandle(t *testing.T) {
	names := testenv.Tables(t, "LockTable", "InventoryTable")
	// The function's environment has no orders table.
	tables := shop.Tables{Locks: names["LockTable"], Inventory: names["InventoryTable"]}
	db := testenv.Client(t)
	// The handler's calls are recorded (policycheck); the fixture's (seed, stock) are not.
	hsvc, err := shop.NewService(calls.Client(db), tables, shop.WithOwner("inventoryupdater-test"), shop.WithWaitBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := shop.NewService(db, tables, shop.WithOwner("inventoryupdater-fixture"), shop.WithWaitBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	var logs, metrics bytes.Buffer
	h := handler.New(hsvc, handler.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(&metrics, "test") }))
	if err := svc.SeedStock(context.Background(), "MUG-RED-350", 10); err != nil {
		t.Fatal(err)
	}
	good := loadEvent(t, "eventbridge-stock-adjusted.json") // +25
	negative := withDetail(good, `{"adjustmentId":"adj-neg","sku":"MUG-RED-350","delta":-36,"reason":"write-off"}`)
	drain := withDetail(good, `{"adjustmentId":"adj-drain","sku":"MUG-RED-350","delta":-35,"reason":"write-off"}`)
	wrongType := good
	wrongType.DetailType = "StockCounted"

	steps := []struct {
		name      string
		ev        events.EventBridgeEvent
		wantErr   error  // nil: success
		wantInErr string // the error names this
		avail     int
	}{
		{"applied", good, nil, "", 35},
		{"duplicate delivery", good, nil, "", 35},
		// A business rejection is recorded and succeeds: Lambda must not retry it.
		{"would go negative", negative, nil, "", 35},
		{"down to zero", drain, nil, "", 0},
		{"rejection redelivered", negative, nil, "", 0},
		{"malformed", loadEvent(t, "eventbridge-stock-adjusted-malformed.json"), shop.ErrInvalid, "detail.delta", 0},
		{"missing sku", withDetail(good, `{"adjustmentId":"adj-x","delta":1}`), shop.ErrInvalid, "detail.sku: is required", 0},
		{"wrong detail-type", wrongType, nil, `detail-type "StockCounted"`, 0},
	}
	for _, st := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := h.Handle(ctx, st.ev)
		cancel()
		switch {
		case st.wantInErr == "" && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.wantInErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantInErr)):
			t.Fatalf("%s: err = %v, want one naming %q", st.name, err, st.wantInErr)
		case st.wantErr != nil && !errors.Is(err, st.wantErr):
			t.Fatalf("%s: err = %v, want %v", st.name, err, st.wantErr)
		}
		a, r, err := svc.Stock(context.Background(), "MUG-RED-350")
		if err != nil {
			t.Fatal(err)
		}
		if a != st.avail || r != 0 {
			t.Fatalf("%s: stock = %d/%d, want %d available", st.name, a, r, st.avail)
		}
	}
	for _, want := range []string{`"AdjustmentsApplied":1`, `"AdjustmentsDuplicate":1`, `"AdjustmentsRejected":1`} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, metrics.String())
		}
	}
	if n := strings.Count(metrics.String(), `"AdjustmentsRejected":1`); n != 1 {
		t.Errorf("AdjustmentsRejected counted %d times, want once (the redelivery is a duplicate)", n)
	}
	if !strings.Contains(logs.String(), `"field":"detail.delta"`) {
		t.Errorf("malformed event not logged with its field:\n%s", logs.String())
	}

	// Contention: an order reservation holds the SKU.
	held := holdStock(t, db, tables.Inventory, "orderprocessor-x", "MUG-RED-350", 0)
	restock := withDetail(good, `{"adjustmentId":"adj-later","sku":"MUG-RED-350","delta":5,"reason":"restock"}`)
	if err := h.Handle(context.Background(), restock); !errors.Is(err, shop.ErrBusy) {
		t.Fatalf("under contention: %v, want ErrBusy", err)
	}
	_ = held.Release(context.Background())
	if err := h.Handle(context.Background(), restock); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

// holdStock locks a SKU's stock item as an order decision would (lockcore's locking
// read on the inventory table; lease 0: lockcore's default).
func holdStock(t *testing.T, db *dynamodb.Client, inventory, owner, sku string, lease time.Duration) *lockcore.ItemLease {
	t.Helper()
	opts := []lockcore.Option{lockcore.WithOwner(owner)}
	if lease > 0 {
		opts = append(opts, lockcore.WithLease(lease))
	}
	il, err := lockcore.NewItemLocker(db, inventory, opts...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := il.Acquire(context.Background(), map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: shop.StockPKPrefix + sku},
		"sk": &types.AttributeValueMemberS{Value: shop.StockSK},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type fixture struct {
	svc    *shop.Service
	h      *handler.Handler
	logs   *bytes.Buffer
	tables shop.Tables
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	names := testenv.Tables(t, "LockTable", "InventoryTable")
	tables := shop.Tables{Locks: names["LockTable"], Inventory: names["InventoryTable"]}
	svc, err := shop.NewService(testenv.Client(t), tables, shop.WithOwner("inventoryupdater-test"), shop.WithWaitBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: svc, logs: &bytes.Buffer{}, tables: tables}
	f.h = handler.New(svc, handler.WithLogger(slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		handler.WithMetrics(nil))
	return f
}

// newLines returns the log lines written since the last call.
func (f *fixture) newLines() []string {
	s := strings.TrimSpace(f.logs.String())
	f.logs.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func readEventFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForeignOrEmptyEventFailsLoudly: an event that is not an EventBridge StockAdjusted
// event fails with an InvalidEventError naming what it got, logged once at ERROR.
func TestForeignOrEmptyEventFailsLoudly(t *testing.T) {
	f := newFixture(t)
	scheduled := readEventFile(t, "scheduled-sweep.json")
	tests := []struct {
		name    string
		payload []byte
		msg     string // the error message
	}{
		{"SQS batch", readEventFile(t, "sqs-order.json"), `inventoryupdater: got an SQS batch of 1 record; want an EventBridge event with detail-type "StockAdjusted"`},
		{"stream batch", readEventFile(t, "dynamodb-ttl-remove.json"), "inventoryupdater: got a DynamoDB stream batch of 1 record; want"},
		{"empty", []byte(`{}`), "inventoryupdater: got an empty event; want"},
		{"schedule", scheduled, `inventoryupdater: event 2f7e8a4b-ac3d-4e9f-8051-7c8d9e0f1a32: got an EventBridge event with detail-type "Scheduled Event"; want`},
		{"detail is a string", []byte(`{"id":"ev-1","detail-type":"StockAdjusted","source":"x","detail":"adj-1 +5"}`),
			"inventoryupdater: event ev-1: detail: must be a JSON object"},
		{"no event id", []byte(`{"detail-type":"StockAdjusted","source":"x","detail":{"adjustmentId":"a","sku":"A"}}`),
			"inventoryupdater: detail.delta: is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.newLines()
			err := f.h.HandleJSON(context.Background(), tt.payload)
			var ie *eventshape.InvalidEventError
			if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), tt.msg) {
				t.Fatalf("err = %v (%T), want an *InvalidEventError starting %q", err, err, tt.msg)
			}
			if name := reflect.TypeOf(err).Elem().Name(); name != "InvalidEventError" {
				t.Errorf("errorType would be %q", name)
			}
			for _, bad := range []string{"detail.must", "event : ", `"field":""`} {
				if strings.Contains(err.Error(), bad) || strings.Contains(f.logs.String(), bad) {
					t.Errorf("%q in %v / %s", bad, err, f.logs.String())
				}
			}
			lines := f.newLines()
			if len(lines) != 1 || !strings.Contains(lines[0], `"level":"ERROR"`) {
				t.Errorf("want the failure logged once at ERROR, got:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
	// The typed entry point (the demo's): an SQS batch decoded as an EventBridge event.
	var ev events.EventBridgeEvent
	_ = json.Unmarshal(readEventFile(t, "sqs-order.json"), &ev)
	if err := f.h.Handle(context.Background(), ev); err == nil || !strings.Contains(err.Error(), "not an EventBridge event") {
		t.Errorf("Handle(SQS batch) = %v", err)
	}
}

// TestRejectionIsRecordedNotRetried: "stock would go negative" is a permanent decision:
// Handle succeeds (no asynchronous retry, no DLQ), logs it once at WARN, and the
// rejection is recorded, so a redelivery after a restock does not apply it.
func TestRejectionIsRecordedNotRetried(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.svc.SeedStock(ctx, "MUG-RED-350", 3); err != nil {
		t.Fatal(err)
	}
	good := loadEvent(t, "eventbridge-stock-adjusted.json")
	writeOff := withDetail(good, `{"adjustmentId":"adj-wo","sku":"MUG-RED-350","delta":-5,"reason":"write-off"}`)
	f.newLines()
	if err := f.h.Handle(ctx, writeOff); err != nil {
		t.Fatalf("rejection returned %v: Lambda would retry it", err)
	}
	lines := f.newLines()
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"WARN"`) || !strings.Contains(lines[0], "would leave -2") {
		t.Errorf("want one WARN line, got:\n%s", strings.Join(lines, "\n"))
	}
	// The recorded decision stands after a restock.
	restock := withDetail(good, `{"adjustmentId":"adj-rs","sku":"MUG-RED-350","delta":10}`)
	if err := f.h.Handle(ctx, restock); err != nil {
		t.Fatal(err)
	}
	f.newLines()
	if err := f.h.Handle(ctx, writeOff); err != nil {
		t.Fatalf("redelivered rejection: %v", err)
	}
	if lines := f.newLines(); len(lines) != 1 || !strings.Contains(lines[0], "rejected before") {
		t.Errorf("redelivery log:\n%s", strings.Join(lines, "\n"))
	}
	if a, _, err := f.svc.Stock(ctx, "MUG-RED-350"); err != nil || a != 13 {
		t.Errorf("available = %d, %v; want 13 (3 + 10, the write-off stays rejected)", a, err)
	}
	// The service reports the rejection itself (the handler decides not to retry it).
	_, err := f.svc.ApplyAdjustment(ctx, shop.Adjustment{AdjustmentID: "adj-wo", SKU: "MUG-RED-350", Delta: -5})
	if !errors.Is(err, shop.ErrInsufficientStock) {
		t.Errorf("ApplyAdjustment = %v", err)
	}
}

// TestRetryableErrorsHaveMeaningfulTypes: contention fails with a LockContendedError
// (errorType "LockContendedError"; Lambda retries it), logged once at WARN.
func TestRetryableErrorsHaveMeaningfulTypes(t *testing.T) {
	f := newFixture(t)
	held := holdStock(t, testenv.Client(t), f.tables.Inventory, "orderprocessor-x", "MUG-RED-350", 0)
	defer func() { _ = held.Release(context.Background()) }()
	f.newLines()
	ev := withDetail(loadEvent(t, "eventbridge-stock-adjusted.json"), `{"adjustmentId":"adj-c","sku":"MUG-RED-350","delta":1}`)
	err := f.h.Handle(context.Background(), ev)
	var ce *handler.LockContendedError
	if !errors.As(err, &ce) || !errors.Is(err, shop.ErrBusy) || reflect.TypeOf(err).Elem().Name() != "LockContendedError" {
		t.Fatalf("err = %v (%T), want a *LockContendedError matching ErrBusy", err, err)
	}
	if !strings.HasPrefix(err.Error(), "inventoryupdater: event 0d5c6f2e-8a1b-4c7d-9e3f-5a6b7c8d9e10: ") {
		t.Errorf("message %q", err)
	}
	if lines := f.newLines(); len(lines) != 1 || !strings.Contains(lines[0], `"level":"WARN"`) {
		t.Errorf("want one WARN line, got:\n%s", strings.Join(lines, "\n"))
	}
}

// TestUnknownAdjustmentFieldsAreIgnored: forward compatibility for StockAdjusted details.
func TestUnknownAdjustmentFieldsAreIgnored(t *testing.T) {
	f := newFixture(t)
	ev := withDetail(loadEvent(t, "eventbridge-stock-adjusted.json"),
		`{"adjustmentId":"adj-fc","sku":"MUG-RED-350","delta":4,"warehouse":"FRA-1","batch":{"lot":7}}`)
	if err := f.h.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(f.logs.String(), `"ignoredFields":["batch","warehouse"]`); n != 1 {
		t.Errorf("ignored fields logged %d times:\n%s", n, f.logs.String())
	}
	if a, _, err := f.svc.Stock(context.Background(), "MUG-RED-350"); err != nil || a != 4 {
		t.Errorf("available = %d, %v", a, err)
	}
}
