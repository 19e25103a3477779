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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/eventshape"
	"github.com/turnstile-locks/turnstile/internal/policycheck"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// calls records the DynamoDB calls of the handler under test; after the tests they are
// compared with the function's role in template.yaml (policycheck).
var calls = policycheck.NewRecorder()

func TestMain(m *testing.M) { testenv.Main(policycheck.Run(m, "OrderProcessorFunction", calls)) }

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	svc     *shop.Service
	h       *handler.Handler
	tables  shop.Tables
	logs    *syncBuffer
	metrics *syncBuffer
}

func newFixture(t *testing.T, opts ...shop.Option) *fixture {
	t.Helper()
	names := testenv.Tables(t, "LockTable", "OrdersTable", "InventoryTable")
	tables := shop.Tables{Locks: names["LockTable"], Orders: names["OrdersTable"], Inventory: names["InventoryTable"]}
	opts = append([]shop.Option{
		shop.WithOwner("orderprocessor-test"), shop.WithLease(time.Second), shop.WithWaitBudget(0),
	}, opts...)
	// The handler's service calls DynamoDB through the recorder; the fixture's own service
	// (seeding, inspecting) does not, its calls are not the function's.
	svc, err := shop.NewService(calls.Client(testenv.Client(t)), tables, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// Default lease (10s): a seeding lease lost under load would hold a SKU the handler needs.
	fixtureSvc, err := shop.NewService(testenv.Client(t), tables, shop.WithOwner("orderprocessor-fixture"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: fixtureSvc, tables: tables, logs: &syncBuffer{}, metrics: &syncBuffer{}}
	f.h = handler.New(svc,
		handler.WithLogger(slog.New(slog.NewJSONHandler(f.logs, nil))),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }))
	return f
}

func (f *fixture) seed(t *testing.T, stock map[string]int) {
	t.Helper()
	for sku, n := range stock {
		if err := f.svc.SeedStock(context.Background(), sku, n); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) stock(t *testing.T, sku string) [2]int {
	t.Helper()
	a, r, err := f.svc.Stock(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	return [2]int{a, r}
}

func (f *fixture) status(t *testing.T, id string) shop.Status {
	t.Helper()
	st, _, err := f.svc.OrderStatus(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// loadEvent reads an event file of the repository's events/ directory.
func loadEvent(t *testing.T, name string) events.SQSEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

// invoke calls Handle the way Lambda does: with a deadline.
func (f *fixture) invoke(t *testing.T, ev events.SQSEvent) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := f.h.Handle(ctx, ev)
	if err != nil {
		t.Fatalf("Handle returned an error (the whole batch would be retried): %v", err)
	}
	// The response must marshal to the shape Lambda expects.
	b, _ := json.Marshal(resp)
	if !strings.HasPrefix(string(b), `{"batchItemFailures":[`) {
		t.Errorf("response JSON = %s", b)
	}
	var failed []string
	for _, fl := range resp.BatchItemFailures {
		failed = append(failed, fl.ItemIdentifier)
	}
	return failed
}

func messageID(ev events.SQSEvent, i int) string { return ev.Records[i].MessageId }

func TestSingleOrder(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})
	if failed := f.invoke(t, loadEvent(t, "sqs-order.json")); len(failed) != 0 {
		t.Fatalf("failures: %v\n%s", failed, f.logs)
	}
	if st := f.status(t, "ord-1001"); st != shop.StatusReserved {
		t.Errorf("status = %s", st)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{3, 2} {
		t.Errorf("MUG stock = %v", got)
	}
	for _, want := range []string{`"OrdersReserved":1`, `"LockWait":`, `"LockHold":`, `"Messages":1`} {
		if !strings.Contains(f.metrics.String(), want) {
			t.Errorf("EMF output lacks %s:\n%s", want, f.metrics)
		}
	}
}

func TestDuplicateDelivery(t *testing.T) {
	f := newFixture(t, shop.WithWaitBudget(2*time.Second))
	f.seed(t, map[string]int{"MUG-RED-350": 5, "BOOK-DDIA": 5})
	ev := loadEvent(t, "sqs-order-duplicate.json") // the same order twice in one batch
	if failed := f.invoke(t, ev); len(failed) != 0 {
		t.Fatalf("failures: %v\n%s", failed, f.logs)
	}
	// ... and again, as SQS may redeliver the whole batch.
	if failed := f.invoke(t, ev); len(failed) != 0 {
		t.Fatalf("failures: %v", failed)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{4, 1} {
		t.Errorf("MUG stock = %v, want reserved once", got)
	}
	if got := f.stock(t, "BOOK-DDIA"); got != [2]int{3, 2} {
		t.Errorf("BOOK stock = %v, want reserved once", got)
	}
	if n := strings.Count(f.metrics.String(), `"OrdersDuplicate":`); n != 2 {
		t.Errorf("duplicate metrics in %d documents, want 2:\n%s", n, f.metrics)
	}
}

func TestMalformedMessageInMixedBatch(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"TEE-BLK-M": 5, "MUG-RED-350": 5, "BOOK-DDIA": 5, "CAP-NVY-OS": 5})
	ev := loadEvent(t, "sqs-order-malformed.json")
	failed := f.invoke(t, ev)
	want := []string{messageID(ev, 1), messageID(ev, 2), messageID(ev, 3), messageID(ev, 4)}
	if !slices.Equal(failed, want) {
		t.Fatalf("failures = %v, want every message but the first (%v)", failed, want)
	}
	if st := f.status(t, "ord-4001"); st != shop.StatusReserved {
		t.Errorf("the valid order's status = %q", st)
	}
	// Nothing of the malformed ones was touched.
	for _, id := range []string{"ord-4003", "ord-4004", "ord-4005"} {
		if _, ok, _ := f.svc.OrderStatus(context.Background(), id); ok {
			t.Errorf("malformed order %s was stored", id)
		}
	}
	if got := f.stock(t, "CAP-NVY-OS"); got != [2]int{5, 0} {
		t.Errorf("CAP stock = %v", got)
	}
	// Each failure is logged at ERROR with its message id and field.
	logs := f.logs.String()
	for i, field := range map[int]string{1: `"field":"body"`, 2: `"field":"customerId"`, 3: `"field":"lines[0].qty"`, 4: `"field":"lines[1].qty"`} {
		line := lineWith(logs, messageID(ev, i))
		if !strings.Contains(line, `"level":"ERROR"`) || !strings.Contains(line, field) {
			t.Errorf("log of message %d = %s; want ERROR naming %s", i, line, field)
		}
	}
	if !strings.Contains(f.metrics.String(), `"MessagesMalformed":[1,1,1,1]`) {
		t.Errorf("metrics:\n%s", f.metrics)
	}
}

func lineWith(logs, s string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

func TestContentionReturnsOnlyContendedMessages(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"MUG-RED-350": 10, "TEE-BLK-M": 10, "BOOK-DDIA": 10, "CAP-NVY-OS": 10})
	held := holdStock(t, f, "another-invocation", "TEE-BLK-M", 0)
	ev := loadEvent(t, "sqs-order-batch.json")
	failed := f.invoke(t, ev)
	if !slices.Equal(failed, []string{messageID(ev, 1)}) {
		t.Fatalf("failures = %v, want only ord-2002 (TEE-BLK-M is held)\n%s", failed, f.logs)
	}
	if got := f.stock(t, "TEE-BLK-M"); got != [2]int{10, 0} {
		t.Errorf("TEE stock = %v", got)
	}
	if !strings.Contains(f.metrics.String(), `"LockContention":1`) {
		t.Errorf("metrics:\n%s", f.metrics)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// SQS redelivers the returned message.
	if failed := f.invoke(t, events.SQSEvent{Records: ev.Records[1:2]}); len(failed) != 0 {
		t.Fatalf("redelivery failed: %v", failed)
	}
	if st := f.status(t, "ord-2002"); st != shop.StatusReserved {
		t.Errorf("ord-2002 = %s", st)
	}
}

func TestOutOfStockRejectsWholeOrder(t *testing.T) {
	f := newFixture(t)
	// ord-2003 wants BOOK-DDIA x1 and MUG-RED-350 x4; only 3 mugs left after ord-2001.
	f.seed(t, map[string]int{"MUG-RED-350": 4, "TEE-BLK-M": 10, "BOOK-DDIA": 10, "CAP-NVY-OS": 10})
	if failed := f.invoke(t, loadEvent(t, "sqs-order-batch.json")); len(failed) != 0 {
		t.Fatalf("failures: %v", failed)
	}
	if st := f.status(t, "ord-2003"); st != shop.StatusRejected {
		t.Errorf("ord-2003 = %s, want REJECTED", st)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{3, 1} {
		t.Errorf("MUG stock = %v, want only ord-2001's unit reserved", got)
	}
	if got := f.stock(t, "BOOK-DDIA"); got != [2]int{9, 1} {
		t.Errorf("BOOK stock = %v, want only ord-2002's unit reserved (no partial reservation for ord-2003)", got)
	}
}

func TestDeadlineTooCloseReturnsMessages(t *testing.T) {
	f := newFixture(t)
	ev := loadEvent(t, "sqs-order.json")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	resp, err := f.h.Handle(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("resp = %+v, %v", resp, err)
	}
}

func readEventFile(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForeignOrEmptyEventFailsLoudly: an event that is not an SQS batch fails the
// invocation with an InvalidEventError naming what it got, logged once at ERROR —
// never an empty success, never an item failure without an identifier.
func TestForeignOrEmptyEventFailsLoudly(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name    string
		payload json.RawMessage
		got     string
	}{
		{"EventBridge event", readEventFile(t, "eventbridge-stock-adjusted.json"), `an EventBridge event (detail-type \"StockAdjusted\"`},
		{"stream batch", readEventFile(t, "dynamodb-ttl-remove.json"), "a DynamoDB stream batch of 1 record"},
		{"schedule", readEventFile(t, "scheduled-sweep.json"), "schedule event"},
		{"empty object", json.RawMessage(`{}`), "an empty event"},
		{"null", json.RawMessage(`null`), "an empty event"},
		{"no records", json.RawMessage(`{"Records":[]}`), "an empty event"},
		{"an order, not a batch", json.RawMessage(`{"orderId":"ord-1","customerId":"c","lines":[]}`), "unknown shape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := strings.Count(f.logs.String(), "\n")
			resp, err := f.h.HandleJSON(context.Background(), tt.payload)
			var ie *eventshape.InvalidEventError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "want an SQS batch") {
				t.Fatalf("err = %v (%T), want an *InvalidEventError", err, err)
			}
			if name := reflect.TypeOf(err).Elem().Name(); name != "InvalidEventError" {
				t.Errorf("errorType would be %q", name)
			}
			if len(resp.BatchItemFailures) != 0 {
				t.Errorf("item failures %+v", resp.BatchItemFailures)
			}
			lines := strings.Split(strings.TrimSpace(f.logs.String()), "\n")[before:]
			if len(lines) != 1 || !strings.Contains(lines[0], `"level":"ERROR"`) || !strings.Contains(lines[0], tt.got) {
				t.Errorf("want one ERROR line naming %q, got:\n%s", tt.got, strings.Join(lines, "\n"))
			}
		})
	}
	// The typed entry point (the demo's) refuses records that are not SQS messages: a
	// stream event decoded as an SQSEvent has records without a messageId.
	var ev events.SQSEvent
	if err := json.Unmarshal(readEventFile(t, "dynamodb-ttl-remove.json"), &ev); err != nil {
		t.Fatal(err)
	}
	if _, err := f.h.Handle(context.Background(), ev); err == nil || !strings.Contains(err.Error(), `record 0 is not an SQS message (messageId ""`) {
		t.Errorf("Handle(stream records) = %v", err)
	}
	// The event files as Lambda delivers them go through HandleJSON.
	f.seed(t, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})
	resp, err := f.h.HandleJSON(context.Background(), readEventFile(t, "sqs-order.json"))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("sqs-order.json: %+v, %v", resp, err)
	}
	if st := f.status(t, "ord-1001"); st != shop.StatusReserved {
		t.Errorf("ord-1001 = %s", st)
	}
}

// TestUnknownOrderFieldsAreIgnored: forward compatibility — a producer adding a field does
// not send its orders to the dead-letter queue; the fields are logged once at DEBUG.
func TestUnknownOrderFieldsAreIgnored(t *testing.T) {
	f := newFixture(t)
	var logs syncBuffer
	f.h = handler.New(f.svc, handler.WithLogger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		handler.WithMetrics(nil))
	f.seed(t, map[string]int{"MUG-RED-350": 5})
	ev := loadEvent(t, "sqs-order.json")
	ev.Records[0].Body = `{"orderId":"ord-fc1","customerId":"c","channel":"app","lines":[{"sku":"MUG-RED-350","qty":1,"giftWrap":true}]}`
	if failed := f.invoke(t, ev); len(failed) != 0 {
		t.Fatalf("failures %v:\n%s", failed, logs.String())
	}
	if st := f.status(t, "ord-fc1"); st != shop.StatusReserved {
		t.Errorf("ord-fc1 = %s", st)
	}
	if n := strings.Count(logs.String(), `"ignoredFields":["channel","lines[0].giftWrap"]`); n != 1 {
		t.Errorf("ignored fields logged %d times, want once at DEBUG:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"level":"DEBUG","msg":"order message has fields this version does not know; ignored"`) {
		t.Errorf("not at DEBUG:\n%s", logs.String())
	}
	// Still rejected: a wrong type next to an unknown field.
	ev.Records[0].Body = `{"orderId":"ord-fc2","customerId":"c","channel":"app","lines":[{"sku":"MUG-RED-350","qty":"1"}]}`
	if failed := f.invoke(t, ev); len(failed) != 1 {
		t.Fatalf("wrong type accepted")
	}
	if !strings.Contains(logs.String(), `"field":"lines[0].qty"`) {
		t.Errorf("wrong type not named:\n%s", logs.String())
	}
}
