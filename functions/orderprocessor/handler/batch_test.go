package handler_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// visibility stands in for SQS (not DynamoDB): it keeps the ChangeMessageVisibility calls
// and records them for the policy check.
type visibility struct {
	mu    sync.Mutex
	calls []*sqs.ChangeMessageVisibilityInput

	slow            time.Duration // each call takes this long
	inflight, maxIn int
}

func (v *visibility) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	calls.Record("sqs:ChangeMessageVisibility", aws.ToString(in.QueueUrl))
	v.mu.Lock()
	v.calls = append(v.calls, in)
	v.inflight++
	v.maxIn = max(v.maxIn, v.inflight)
	slow := v.slow
	v.mu.Unlock()
	time.Sleep(slow)
	v.mu.Lock()
	v.inflight--
	v.mu.Unlock()
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func (v *visibility) got() []*sqs.ChangeMessageVisibilityInput {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]*sqs.ChangeMessageVisibilityInput(nil), v.calls...)
}

// ordersQueueURL is ORDERS_QUEUE_URL as the template resolves it locally (!Ref OrdersQueue).
func ordersQueueURL(t *testing.T) string {
	t.Helper()
	fn, err := stack.LookupFunction(testenv.Template(t), "OrderProcessorFunction")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := stack.Local{}.Values(testenv.Template(t))
	if err != nil {
		t.Fatal(err)
	}
	env, err := fn.ResolveEnvironment(vals)
	if err != nil {
		t.Fatal(err)
	}
	url := env["ORDERS_QUEUE_URL"]
	if url == "" || url != vals.Refs["OrdersQueue"] {
		t.Fatalf("ORDERS_QUEUE_URL = %q, want the OrdersQueue's URL %q", url, vals.Refs["OrdersQueue"])
	}
	calls.Name(url, "OrdersQueue")
	return url
}

// lockAttempts counts the locking reads of stock items (conditional UpdateItem returning
// ALL_NEW on the inventory table), by SKU, and the other reads of stock items, by SKU.
type lockAttempts struct {
	mu       sync.Mutex
	acquires map[string]int
	reads    map[string]int
}

func (a *lockAttempts) option(inventory string) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("lockAttempts",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					a.mu.Lock()
					switch x := in.Parameters.(type) {
					case *dynamodb.UpdateItemInput:
						if aws.ToString(x.TableName) == inventory && x.ReturnValues == types.ReturnValueAllNew && x.ConditionExpression != nil {
							if pk, ok := x.Key["pk"].(*types.AttributeValueMemberS); ok {
								a.acquires[strings.TrimPrefix(pk.Value, shop.StockPKPrefix)]++
							}
						}
					case *dynamodb.GetItemInput:
						if aws.ToString(x.TableName) == inventory {
							if pk, ok := x.Key["pk"].(*types.AttributeValueMemberS); ok {
								a.reads[strings.TrimPrefix(pk.Value, shop.StockPKPrefix)]++
							}
						}
					case *dynamodb.BatchGetItemInput:
						for _, k := range x.RequestItems[inventory].Keys {
							if pk, ok := k["pk"].(*types.AttributeValueMemberS); ok {
								a.reads[strings.TrimPrefix(pk.Value, shop.StockPKPrefix)]++
							}
						}
					}
					a.mu.Unlock()
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}

func orderMessage(i int, body string) events.SQSMessage {
	return events.SQSMessage{
		MessageId: fmt.Sprintf("m-%03d", i), ReceiptHandle: fmt.Sprintf("rh-%03d", i), Body: body,
		EventSource: "aws:sqs", Attributes: map[string]string{"ApproximateReceiveCount": "1"},
	}
}

// A batch's orders that share SKUs are decided under one acquisition of each SKU: five
// orders of a hot SKU lock its stock item once — the locking read, which is also the
// only read of its stock — and each is decided (the last one rejected: the stock runs
// out in the middle of the batch).
func TestBatchAcquiresEachSKUOnce(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"HOT-1": 7, "MUG-RED-350": 10, "CAP-NVY-OS": 10})
	att := &lockAttempts{acquires: map[string]int{}, reads: map[string]int{}}
	svc, err := shop.NewService(calls.Client(testenv.Client(t), att.option(f.tables.Inventory)), f.tables,
		shop.WithOwner("orderprocessor-batch"), shop.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f.h = handler.New(svc, handler.WithLogger(slog.New(slog.NewJSONHandler(f.logs, nil))), handler.WithMetrics(nil))
	var ev events.SQSEvent
	bodies := []string{
		`{"orderId":"b-1","customerId":"c","lines":[{"sku":"HOT-1","qty":2}]}`,
		`{"orderId":"b-2","customerId":"c","lines":[{"sku":"HOT-1","qty":2},{"sku":"MUG-RED-350","qty":1}]}`,
		`{"orderId":"b-3","customerId":"c","lines":[{"sku":"HOT-1","qty":2}]}`,
		`{"orderId":"b-4","customerId":"c","lines":[{"sku":"CAP-NVY-OS","qty":1}]}`,
		`{"orderId":"b-5","customerId":"c","lines":[{"sku":"HOT-1","qty":2},{"sku":"MUG-RED-350","qty":1}]}`,
		`{"orderId":"b-6","customerId":"c","lines":[{"sku":"HOT-1","qty":1}]}`,
	}
	for i, b := range bodies {
		ev.Records = append(ev.Records, orderMessage(i, b))
	}
	if failed := f.invoke(t, ev); len(failed) != 0 {
		t.Fatalf("failures: %v\n%s", failed, f.logs)
	}
	for _, sku := range []string{"HOT-1", "MUG-RED-350", "CAP-NVY-OS"} {
		if n := att.acquires[sku]; n != 1 {
			t.Errorf("%s acquired %d times, want once for the batch", sku, n)
		}
		if n := att.reads[sku]; n != 0 {
			t.Errorf("stock of %s read %d times besides its locking read, want none", sku, n)
		}
	}
	for id, want := range map[string]shop.Status{"b-1": shop.StatusReserved, "b-2": shop.StatusReserved, "b-3": shop.StatusReserved,
		"b-4": shop.StatusReserved, "b-5": shop.StatusRejected, "b-6": shop.StatusReserved} {
		if st := f.status(t, id); st != want {
			t.Errorf("%s = %s, want %s", id, st, want)
		}
	}
	if got := f.stock(t, "HOT-1"); got != [2]int{0, 7} {
		t.Errorf("HOT-1 stock = %v, want 0 available, 7 reserved", got)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{9, 1} {
		t.Errorf("MUG stock = %v, want only b-2's unit reserved (b-5 rejected as a whole)", got)
	}
}

// An order is decided exactly once under redelivery: the same batch (with a message twice
// in it) delivered to two concurrent invocations and then again reserves once.
func TestRedeliveredBatchDecidedOnce(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"HOT-1": 20, "MUG-RED-350": 20})
	svc, err := shop.NewService(calls.Client(testenv.Client(t)), f.tables, shop.WithOwner("orderprocessor-a"), shop.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	svc2, err := shop.NewService(calls.Client(testenv.Client(t)), f.tables, shop.WithOwner("orderprocessor-b"), shop.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(f.logs, nil))
	h1 := handler.New(svc, handler.WithLogger(logger), handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }))
	h2 := handler.New(svc2, handler.WithLogger(logger), handler.WithMetrics(nil))
	var ev events.SQSEvent
	for i, b := range []string{
		`{"orderId":"r-1","customerId":"c","lines":[{"sku":"HOT-1","qty":2},{"sku":"MUG-RED-350","qty":1}]}`,
		`{"orderId":"r-2","customerId":"c","lines":[{"sku":"HOT-1","qty":3}]}`,
		`{"orderId":"r-1","customerId":"c","lines":[{"sku":"HOT-1","qty":2},{"sku":"MUG-RED-350","qty":1}]}`,
	} {
		ev.Records = append(ev.Records, orderMessage(i, b))
	}
	var wg sync.WaitGroup
	for _, h := range []*handler.Handler{h1, h2} {
		wg.Add(1)
		go func(h *handler.Handler) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := h.Handle(ctx, ev)
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Errorf("Handle = %+v, %v\n%s", resp, err, f.logs)
			}
		}(h)
	}
	wg.Wait()
	if failed := f.invoke(t, ev); len(failed) != 0 {
		t.Fatalf("third delivery: failures %v", failed)
	}
	if got := f.stock(t, "HOT-1"); got != [2]int{15, 5} {
		t.Errorf("HOT-1 stock = %v, want each order reserved once (15, 5)", got)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{19, 1} {
		t.Errorf("MUG stock = %v, want r-1 reserved once", got)
	}
	if !strings.Contains(f.metrics.String(), `"OrdersDuplicate"`) {
		t.Errorf("the batch's second copy of r-1 is not reported as a duplicate:\n%s", f.metrics)
	}
}

// holdStock locks a SKU's stock item as another invocation would (lockcore's locking
// read on the inventory table; lease 0: lockcore's default).
func holdStock(t *testing.T, f *fixture, owner, sku string, lease time.Duration) *lockcore.ItemLease {
	t.Helper()
	opts := []lockcore.Option{lockcore.WithOwner(owner)}
	if lease > 0 {
		opts = append(opts, lockcore.WithLease(lease))
	}
	il, err := lockcore.NewItemLocker(testenv.Client(t), f.tables.Inventory, opts...)
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

// deadlineFixture is a handler whose service waits as deployed: until the safety margin
// before the invocation's deadline.
func deadlineFixture(t *testing.T, f *fixture, vis *visibility) {
	t.Helper()
	svc, err := shop.NewService(calls.Client(testenv.Client(t)), f.tables, shop.WithOwner("orderprocessor-deadline"), shop.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f.h = handler.New(svc, handler.WithLogger(slog.New(slog.NewJSONHandler(f.logs, nil))),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }),
		handler.WithVisibility(vis, ordersQueueURL(t)))
}

// Contention is waited out within the invocation: a SKU held for a second by someone else
// delays the order, it does not return it.
func TestContentionIsWaitedOutWithinTheDeadline(t *testing.T) {
	f := newFixture(t)
	vis := &visibility{}
	deadlineFixture(t, f, vis)
	f.seed(t, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})
	held := holdStock(t, f, "another-invocation", "TEE-BLK-M", 0)
	time.AfterFunc(time.Second, func() { _ = held.Release(context.Background()) })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	resp, err := f.h.Handle(ctx, loadEvent(t, "sqs-order.json"))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v\n%s", resp, err, f.logs)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("decided after %s, before the holder released", waited)
	}
	if st := f.status(t, "ord-1001"); st != shop.StatusReserved {
		t.Errorf("status = %s", st)
	}
	if n := len(vis.got()); n != 0 {
		t.Errorf("%d visibility changes for a decided order", n)
	}
}

// When the locks stay held until the invocation's time runs out, the message is returned
// a safety margin before the deadline, with its visibility shortened to a few seconds.
func TestContentionReturnShortensVisibility(t *testing.T) {
	f := newFixture(t)
	vis := &visibility{}
	deadlineFixture(t, f, vis)
	f.seed(t, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})
	held := holdStock(t, f, "another-invocation", "TEE-BLK-M", 10*time.Second)
	defer func() { _ = held.Release(context.Background()) }()
	ev := loadEvent(t, "sqs-order.json")
	ev.Records[0].Attributes["ApproximateReceiveCount"] = "2"
	const timeout = 3 * time.Second
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := f.h.Handle(ctx, ev)
	took := time.Since(start)
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	if took < timeout/2 || took >= timeout {
		t.Errorf("returned after %s; want a wait of most of the %s invocation, ending before its deadline", took, timeout)
	}
	got := vis.got()
	if len(got) != 1 {
		t.Fatalf("%d visibility changes, want 1", len(got))
	}
	c := got[0]
	// Second receive: 2 x 2s, jittered down to at most half: 2..4 s.
	if aws.ToString(c.ReceiptHandle) != ev.Records[0].ReceiptHandle || c.VisibilityTimeout < 2 || c.VisibilityTimeout > 4 ||
		aws.ToString(c.QueueUrl) != ordersQueueURL(t) {
		t.Errorf("ChangeMessageVisibility(%s, %s, %ds); want the message's receipt handle on the orders queue, 2..4 s",
			aws.ToString(c.QueueUrl), aws.ToString(c.ReceiptHandle), c.VisibilityTimeout)
	}
	if !strings.Contains(f.metrics.String(), `"MessagesContended":1`) || !strings.Contains(f.metrics.String(), `"VisibilityChanged":1`) {
		t.Errorf("metrics:\n%s", f.metrics)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{5, 0} {
		t.Errorf("MUG stock = %v: a returned order wrote something", got)
	}
}

// A malformed message is returned with a short visibility too (it is on its way to the
// dead-letter queue); a transient failure keeps the visibility timeout.
func TestPoisonReturnShortensVisibility(t *testing.T) {
	f := newFixture(t)
	vis := &visibility{}
	deadlineFixture(t, f, vis)
	ev := events.SQSEvent{Records: []events.SQSMessage{orderMessage(1, `{"orderId":"p-1","customerId":"c","lines":[{"sku":"X","qty":0}]}`)}}
	if failed := f.invoke(t, ev); len(failed) != 1 {
		t.Fatalf("failures = %v", failed)
	}
	if got := vis.got(); len(got) != 1 || got[0].VisibilityTimeout < 1 || got[0].VisibilityTimeout > 2 {
		t.Fatalf("visibility changes %+v, want one of 1..2 s", got)
	}
}

// The returned messages' visibility changes are made concurrently: made one after the
// other after the batch's wait, ten slow calls could outlast the safety margin left for
// them and the invocation its deadline (found by review).
func TestVisibilityChangesAreConcurrent(t *testing.T) {
	f := newFixture(t)
	vis := &visibility{slow: 200 * time.Millisecond}
	deadlineFixture(t, f, vis)
	var recs []events.SQSMessage
	for i := range 5 {
		recs = append(recs, orderMessage(i+1, fmt.Sprintf(`{"orderId":"p-%d","customerId":"c","lines":[{"sku":"X","qty":0}]}`, i)))
	}
	if failed := f.invoke(t, events.SQSEvent{Records: recs}); len(failed) != 5 {
		t.Fatalf("failures = %v", failed)
	}
	if got := len(vis.got()); got != 5 {
		t.Fatalf("%d visibility changes, want 5", got)
	}
	if vis.maxIn < 2 {
		t.Errorf("at most %d visibility change in flight at once: made one after the other", vis.maxIn)
	}
	if !strings.Contains(f.metrics.String(), `"VisibilityChanged":[1,1,1,1,1]`) {
		t.Errorf("metrics:\n%s", f.metrics)
	}
}

func TestRetryDelay(t *testing.T) {
	none := func(int64) int64 { return 0 }
	all := func(n int64) int64 { return n - 1 }
	for _, tt := range []struct {
		receive  int
		jit      func(int64) int64
		min, max time.Duration
	}{
		{1, none, time.Second, time.Second},
		{1, all, 2 * time.Second, 2 * time.Second},
		{2, all, 4 * time.Second, 4 * time.Second},
		{4, none, 8 * time.Second, 8 * time.Second},
		{4, all, 16 * time.Second, 16 * time.Second},
		{9, all, 30 * time.Second, 30 * time.Second},
		{0, none, time.Second, time.Second},
	} {
		got := handler.RetryDelay(tt.receive, handler.DefaultRetryBase, handler.DefaultRetryCap, tt.jit)
		if got < tt.min || got > tt.max {
			t.Errorf("RetryDelay(%d) = %s, want %s..%s", tt.receive, got, tt.min, tt.max)
		}
	}
}
