package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/functions/janitor/handler"
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

func TestMain(m *testing.M) { testenv.Main(policycheck.Run(m, "JanitorFunction", calls)) }

// capture is a Redriver that keeps what it was given.
type capture struct {
	mu     sync.Mutex
	orders []shop.Order
	err    error
}

func (c *capture) Redrive(_ context.Context, o shop.Order) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.orders = append(c.orders, o)
	return nil
}

func (c *capture) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, o := range c.orders {
		ids = append(ids, o.OrderID)
	}
	return ids
}

type fixture struct {
	db      *dynamodb.Client // the fixture's own: its calls are not the function's
	hdb     *dynamodb.Client // the handler's, recorded (policycheck)
	hsvc    *shop.Service    // the handler's, on hdb
	tables  shop.Tables
	svc     *shop.Service
	redrive *capture
	metrics *bytes.Buffer
	h       *handler.Handler
}

func newFixture(t *testing.T, opts ...handler.Option) *fixture {
	t.Helper()
	names := testenv.Tables(t, "LockTable", "OrdersTable", "InventoryTable")
	f := &fixture{
		db:      testenv.Client(t),
		tables:  shop.Tables{Locks: names["LockTable"], Orders: names["OrdersTable"], Inventory: names["InventoryTable"]},
		redrive: &capture{},
		metrics: &bytes.Buffer{},
	}
	var err error
	if f.svc, err = shop.NewService(f.db, f.tables, shop.WithOwner("janitor-test"), shop.WithLease(time.Second), shop.WithTakeoverSkew(0)); err != nil {
		t.Fatal(err)
	}
	f.hdb = calls.Client(f.db)
	if f.hsvc, err = shop.NewService(f.hdb, f.tables, shop.WithOwner("janitor-test"), shop.WithLease(time.Second), shop.WithTakeoverSkew(0)); err != nil {
		t.Fatal(err)
	}
	f.h = handler.New(f.hdb, f.tables.Locks, f.hsvc, f.redrive, append([]handler.Option{
		handler.WithLogger(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }),
	}, opts...)...)
	return f
}

var errCrash = errors.New("injected crash")

// crashOrder runs an order through a service in the legacy mode (the lock table's SKU
// locks, whose rows TTL removes) that dies at point, leaving its leases held.
func (f *fixture) crashOrder(t *testing.T, point string, o shop.Order) {
	t.Helper()
	f.crash(t, point, o, shop.WithLegacyWait())
}

// crashOrderOnStock runs an order through a service that dies at point, leaving its
// stock items (and order item) locked.
func (f *fixture) crashOrderOnStock(t *testing.T, point string, o shop.Order) {
	t.Helper()
	f.crash(t, point, o)
}

func (f *fixture) crash(t *testing.T, point string, o shop.Order, opts ...shop.Option) {
	t.Helper()
	dead, err := shop.NewService(f.db, f.tables, append([]shop.Option{shop.WithOwner("doomed-" + o.OrderID), shop.WithLease(time.Second),
		shop.WithCrashHook(func(p string) error {
			if p == point {
				return errCrash
			}
			return nil
		})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	// Seed with the default 10 s lease: a 1 s seeding lease can run out under load
	// (make test) before its release, leaving the SKU locked for the order below.
	seeder, err := shop.NewService(f.db, f.tables, shop.WithOwner("seeder-"+o.OrderID))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range o.Lines {
		if err := seeder.SeedStock(context.Background(), l.SKU, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dead.ProcessOrder(context.Background(), o); !errors.Is(err, errCrash) {
		t.Fatalf("ProcessOrder = %v, want the injected crash", err)
	}
}

// stockHolder returns the lease id holding a SKU's stock item ("" for none) and the
// order ids recorded on it.
func (f *fixture) stockHolder(t *testing.T, sku string) (string, []string) {
	t.Helper()
	out, err := f.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.tables.Inventory), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: shop.StockPKPrefix + sku}, "sk": &types.AttributeValueMemberS{Value: shop.StockSK}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for k, v := range out.Item {
		if s, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(k, shop.PendingAttrPrefix) && !strings.HasPrefix(s.Value, "=") {
			ids = append(ids, strings.TrimPrefix(k, shop.PendingAttrPrefix)) // plain order ids name their record
		}
	}
	by, _ := out.Item[lockcore.DefaultItemAttributes.LockedBy].(*types.AttributeValueMemberS)
	if by == nil {
		return "", ids
	}
	return by.Value, ids
}

// A crashed holder leaves its stock items locked — they carry no TTL — with its orders
// recorded on the first of them. The scheduled sweep finds the lock once its lease ended
// more than the minimum age ago, re-drives the recorded order (not decided), takes the
// lock over and releases it (without the record), so that the next sweep finds nothing;
// the re-driven message then decides the order.
func TestSweepFindsAnAbandonedStockLock(t *testing.T) {
	var found []handler.AbandonedLease
	var mu sync.Mutex
	f := newFixture(t)
	f.h = handler.New(f.hdb, f.tables.Locks, f.hsvc, f.redrive,
		handler.WithLogger(slog.New(slog.DiscardHandler)),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }),
		handler.WithMinAge(0), handler.WithStockSweep(f.hsvc),
		handler.WithFoundHook(func(l handler.AbandonedLease, via string) {
			mu.Lock()
			defer mu.Unlock()
			if via == "stock-sweep" {
				found = append(found, l)
			}
		}))
	f.crashOrderOnStock(t, shop.CrashStockLocked, crashed)
	lease, ids := f.stockHolder(t, "MUG-RED-350")
	if lease == "" || !slices.Equal(ids, []string{crashed.OrderID}) {
		t.Fatalf("MUG stock item after the crash: held by %q, records %v; want held, naming %s", lease, ids, crashed.OrderID)
	}
	ctx := context.Background()
	res, err := f.h.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.StockLocks != 0 {
		// The lease (1 s) has not ended yet: a live holder's lock is never swept.
		t.Fatalf("sweep within the lease = %+v, want no stock lock", res)
	}
	time.Sleep(1200 * time.Millisecond) // past the dead holder's lease
	// The scheduled event: both of the order's stock items are locked by the dead
	// holder; the order is recorded on the first (MUG-RED-350) and re-driven once.
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "scheduled-sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := f.h.Handle(ctx, raw); err != nil {
		t.Fatalf("scheduled sweep: %v", err)
	}
	t.Logf("sweep took %s", time.Since(start))
	if ids := f.redrive.ids(); !slices.Equal(ids, []string{crashed.OrderID}) || !slices.Equal(f.redrive.orders[0].Lines, crashed.Lines) {
		t.Fatalf("re-driven %+v, want %+v", f.redrive.orders, crashed)
	}
	mu.Lock()
	if len(found) != 2 || !slices.ContainsFunc(found, func(l handler.AbandonedLease) bool { return l.LeaseID == lease }) ||
		found[0].Owner != "doomed-"+crashed.OrderID || found[1].Owner != "doomed-"+crashed.OrderID {
		t.Errorf("found %+v, want the dead holder's two leases", found)
	}
	mu.Unlock()
	if !strings.Contains(f.metrics.String(), `"AbandonedLeases":[1,1]`) || !strings.Contains(f.metrics.String(), `"OrdersRedriven":1`) {
		t.Errorf("metrics:\n%s", f.metrics)
	}
	for _, sku := range []string{"MUG-RED-350", "TEE-BLK-M"} {
		if by, ids := f.stockHolder(t, sku); by != "" || len(ids) != 0 {
			t.Errorf("%s after the sweep: held by %q, records %v; want released, without records", sku, by, ids)
		}
	}
	// The next sweep finds nothing; the re-driven message decides the order (its order
	// item's dead lock is taken over by wall clock in this fixture).
	if res, err = f.h.Sweep(ctx); err != nil || res.StockLocks != 0 || res.Redriven != 0 {
		t.Errorf("second sweep = %+v, %v; want nothing", res, err)
	}
	start = time.Now()
	out, err := f.svc.ProcessOrder(ctx, f.redrive.orders[0])
	if err != nil || out.Status != shop.StatusReserved {
		t.Fatalf("re-driven order = %+v, %v; want RESERVED", out, err)
	}
	t.Logf("decided in %s", time.Since(start))
}

// lockRow reads a lock row as the stream's old image would show it.
func (f *fixture) lockRow(t *testing.T, key string) map[string]events.DynamoDBAttributeValue {
	t.Helper()
	out, err := f.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.tables.Locks), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}, "sk": &types.AttributeValueMemberS{Value: "lock"}},
	})
	if err != nil || out.Item == nil {
		t.Fatalf("lock row %s: %v (item %v)", key, err, out.Item)
	}
	return handler.StreamImage(out.Item)
}

// servedEntry returns the names of the served ticket's entries (w#<id>, d#<id>) of a
// Mutex row in lockcore's ticket format.
func servedEntry(t *testing.T, img map[string]events.DynamoDBAttributeValue) (w, d string) {
	t.Helper()
	if img["state"].String() != "fair" {
		t.Fatalf("lock row state = %s, want lockcore's ticket format", img["state"].String())
	}
	for k, v := range img {
		if id, ok := strings.CutPrefix(k, "w#"); ok && v.DataType() == events.DataTypeNumber && v.Number() == img["serving"].Number() {
			return k, "d#" + id
		}
	}
	t.Fatalf("lock row without a served ticket: %v", img)
	return "", ""
}

// streamEvent loads an event file of events/ and replaces its record's images with img.
func streamEvent(t *testing.T, file string, imgs ...map[string]events.DynamoDBAttributeValue) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", file))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(imgs) > 0 {
		tmpl := ev.Records[0]
		ev.Records = nil
		for i, img := range imgs {
			r := tmpl
			r.Change.OldImage = img
			r.Change.Keys = map[string]events.DynamoDBAttributeValue{"pk": img["pk"], "sk": img["sk"]}
			r.Change.SequenceNumber = tmpl.Change.SequenceNumber + string(rune('0'+i))
			ev.Records = append(ev.Records, r)
		}
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (f *fixture) handle(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := f.h.Handle(ctx, raw)
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	var seqs []string
	for _, fl := range resp.BatchItemFailures {
		seqs = append(seqs, fl.ItemIdentifier)
	}
	return seqs
}

var crashed = shop.Order{OrderID: "ord-1001", CustomerID: "cus-4711", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}, {SKU: "TEE-BLK-M", Qty: 1}}}

func TestAbandonedLeaseIsDetectedAndOrderRedriven(t *testing.T) {
	f := newFixture(t)
	f.crashOrder(t, shop.CrashStockLocked, crashed)
	img := f.lockRow(t, shop.SKULockKey("MUG-RED-350"))
	if _, d := servedEntry(t, img); img[d].DataType() != events.DataTypeBinary || string(img[d].Binary()) != crashed.OrderID {
		t.Fatalf("served ticket's data %v, want %s", img[d], crashed.OrderID)
	}

	// TTL removes the dead holder's row: the janitor reports it and re-drives the order.
	ttl := streamEvent(t, "dynamodb-ttl-remove.json", img)
	if failed := f.handle(t, ttl); len(failed) != 0 {
		t.Fatalf("failures: %v", failed)
	}
	if len(f.redrive.orders) != 1 || !slices.Equal(f.redrive.orders[0].Lines, crashed.Lines) ||
		f.redrive.orders[0].OrderID != crashed.OrderID || f.redrive.orders[0].CustomerID != crashed.CustomerID {
		t.Fatalf("re-driven = %+v, want %+v", f.redrive.orders, crashed)
	}
	for _, want := range []string{`"AbandonedLeases":1`, `"OrdersRedriven":1`} {
		if !strings.Contains(f.metrics.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, f.metrics)
		}
	}

	// The re-driven message completes the order (once the dead leases expired) ...
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := f.svc.ProcessOrder(context.Background(), f.redrive.orders[0])
		if err == nil {
			if out.Status != shop.StatusReserved {
				t.Fatalf("outcome %+v", out)
			}
			break
		}
		if !errors.Is(err, shop.ErrBusy) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// ... and a late or repeated TTL record of the same lease re-drives nothing.
	if failed := f.handle(t, ttl); len(failed) != 0 {
		t.Fatalf("failures: %v", failed)
	}
	if got := f.redrive.ids(); len(got) != 1 {
		t.Errorf("re-driven %v, want the order once", got)
	}
}

func TestStreamRecordsThatAreNotAbandonedLeases(t *testing.T) {
	f := newFixture(t)
	f.crashOrder(t, shop.CrashStockLocked, crashed)
	held := f.lockRow(t, shop.SKULockKey("MUG-RED-350"))
	released := f.lockRow(t, shop.SKULockKey("MUG-RED-350"))
	fence, _ := strconv.ParseInt(released["fence"].Number(), 10, 64)
	released["serving"] = events.NewNumberAttribute(strconv.FormatInt(fence+1, 10)) // nobody holds or waits
	keeper := f.lockRow(t, shop.SKULockKey("MUG-RED-350"))
	keeper["pk"] = events.NewStringAttribute("turnstile#fence#0001")

	for name, raw := range map[string]json.RawMessage{
		"user delete of a held row": streamEvent(t, "dynamodb-user-remove.json", held),
		"released row expiring":     streamEvent(t, "dynamodb-ttl-remove.json", released),
		"lockcore's own row":        streamEvent(t, "dynamodb-ttl-remove.json", keeper),
	} {
		if failed := f.handle(t, raw); len(failed) != 0 {
			t.Errorf("%s: failures %v", name, failed)
		}
	}
	if ids := f.redrive.ids(); len(ids) != 0 {
		t.Errorf("re-driven %v, want nothing", ids)
	}
}

// The event file is a TTL deletion of a held SKU lease whose data names ord-1001: as
// delivered, it re-drives that order once (it is still pending after the crash).
func TestEventFileAsDelivered(t *testing.T) {
	f := newFixture(t)
	f.crashOrder(t, shop.CrashStockLocked, crashed)
	if failed := f.handle(t, streamEvent(t, "dynamodb-ttl-remove.json")); len(failed) != 0 {
		t.Fatalf("failures %v", failed)
	}
	if ids := f.redrive.ids(); len(ids) != 1 || ids[0] != "ord-1001" {
		t.Errorf("re-driven %v, want [ord-1001]", ids)
	}
}

func TestFailedRecordIsReportedBySequenceNumber(t *testing.T) {
	f := newFixture(t)
	f.crashOrder(t, shop.CrashStockLocked, crashed)
	adjustmentLease := f.lockRow(t, shop.SKULockKey("MUG-RED-350"))
	_, d := servedEntry(t, adjustmentLease) // a lease without an order: nothing to re-drive
	delete(adjustmentLease, d)
	orderLease := f.lockRow(t, shop.SKULockKey("TEE-BLK-M"))
	bad := f.lockRow(t, shop.SKULockKey("TEE-BLK-M"))
	bad["pk"] = events.NewNumberAttribute("42")

	f.redrive.err = errors.New("SQS is down")
	raw := streamEvent(t, "dynamodb-ttl-remove.json", adjustmentLease, orderLease, bad)
	var ev events.DynamoDBEvent
	_ = json.Unmarshal(raw, &ev)
	if failed := f.handle(t, raw); !slices.Equal(failed, []string{ev.Records[1].Change.SequenceNumber}) {
		t.Fatalf("failures = %v, want only the record whose re-drive failed (%s)", failed, ev.Records[1].Change.SequenceNumber)
	}
	f.redrive.err = nil
	if failed := f.handle(t, raw); !slices.Equal(failed, []string{ev.Records[2].Change.SequenceNumber}) {
		t.Fatalf("failures = %v, want the malformed record", failed)
	}
	if ids := f.redrive.ids(); !slices.Equal(ids, []string{crashed.OrderID}) {
		t.Errorf("re-driven %v", ids)
	}
}

// TestUnrecognisedEvent: anything but a lock-table stream batch or a schedule's event —
// SQS records, another EventBridge event, an empty event — fails with an
// InvalidEventError naming what it got, logged once at ERROR; nothing is swept or skipped.
func TestUnrecognisedEvent(t *testing.T) {
	f := newFixture(t)
	var logs bytes.Buffer
	f.h = handler.New(f.db, f.tables.Locks, f.svc, f.redrive, handler.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		handler.WithMetrics(nil))
	sqsBatch, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "sqs-order.json"))
	if err != nil {
		t.Fatal(err)
	}
	adjusted, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "eventbridge-stock-adjusted.json"))
	if err != nil {
		t.Fatal(err)
	}
	for raw, got := range map[string]string{
		string(sqsBatch):                       "got an SQS batch of 1 record",
		string(adjusted):                       `got an EventBridge event (detail-type \"StockAdjusted\"`,
		`{"Records":[]}`:                       "got an empty event",
		`{}`:                                   "got an empty event",
		``:                                     "got an empty event",
		`{"hello":"world"}`:                    `got a JSON object of unknown shape (keys \"hello\")`,
		`[1,2]`:                                "got a JSON value that is not an object",
		`"x"`:                                  "got a JSON value that is not an object",
		`{"Records":[{"eventName":"REMOVE"}]}`: `eventSource \"\"`,
	} {
		logs.Reset()
		resp, err := f.h.Handle(context.Background(), json.RawMessage(raw))
		var ie *eventshape.InvalidEventError
		if !errors.As(err, &ie) || len(resp.BatchItemFailures) != 0 {
			t.Errorf("%.40s: %+v, %v; want an *InvalidEventError", raw, resp, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], `"level":"ERROR"`) || !strings.Contains(lines[0], got) {
			t.Errorf("%.40s: want one ERROR line naming %q, got:\n%s", raw, got, logs.String())
		}
	}
}

// TestSweepFailureIsTyped: a failed sweep returns a SweepError (errorType "SweepError").
func TestSweepFailureIsTyped(t *testing.T) {
	f := newFixture(t)
	h := handler.New(f.db, "no-such-table-"+strings.ToLower(t.Name()), f.svc, f.redrive,
		handler.WithLogger(slog.New(slog.DiscardHandler)), handler.WithMetrics(nil))
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "scheduled-sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Handle(context.Background(), raw)
	var se *handler.SweepError
	if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), "janitor: sweep: ") {
		t.Fatalf("err = %v (%T), want a *SweepError", err, err)
	}
}

// scanHook runs after the first Scan returns: the place to change rows between the
// sweep's scan and its deletes.
type scanHook struct {
	*dynamodb.Client
	once  sync.Once
	after func()
}

func (s *scanHook) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := s.Client.Scan(ctx, in, opts...)
	s.once.Do(s.after)
	return out, err
}

func TestSweepNeverDeletesARenewedLease(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// An abandoned lease of a crashed order.
	dead := shop.Order{OrderID: "ord-dead", CustomerID: "c", Lines: []shop.Line{{SKU: "DEAD-SKU", Qty: 1}}}
	f.crashOrder(t, shop.CrashStockLocked, dead)
	// A released row and a live lease.
	mu, err := lockcore.NewMutex(f.db, f.tables.Locks, lockcore.WithOwner("live-holder"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := mu.Acquire(ctx, "sku#RELEASED")
	if err != nil {
		t.Fatal(err)
	}
	if err := rel.Release(ctx); err != nil {
		t.Fatal(err)
	}
	live, err := mu.Acquire(ctx, "sku#LIVE")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Release(ctx) }()
	// Rows the sweep must never touch, however old.
	for _, k := range [][2]string{{"turnstile#fence#0007", "epoch"}, {"queue-key", "lock#counter"}} {
		if _, err := f.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.tables.Locks), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: k[0]}, "sk": &types.AttributeValueMemberS{Value: k[1]},
			"expiresAt": &types.AttributeValueMemberN{Value: "1"},
		}}); err != nil {
			t.Fatal(err)
		}
	}

	// Two days on, every row looks long expired; between the scan and the deletes the
	// live holder renews its lease.
	db := &scanHook{Client: f.hdb, after: func() {
		if err := live.Renew(ctx); err != nil {
			t.Errorf("renew: %v", err)
		}
	}}
	j := handler.New(db, f.tables.Locks, f.hsvc, f.redrive,
		handler.WithLogger(slog.New(slog.DiscardHandler)),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }),
		handler.WithClock(func() time.Time { return time.Now().Add(48 * time.Hour) }),
		handler.WithMinAge(time.Hour))
	res, err := j.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 2 || res.Skipped != 1 || res.Abandoned != 1 || res.Redriven != 1 {
		t.Errorf("sweep = %+v, want 2 deleted (dead, released), 1 skipped (live), 1 abandoned and re-driven", res)
	}
	if ids := f.redrive.ids(); !slices.Equal(ids, []string{"ord-dead"}) {
		t.Errorf("re-driven %v", ids)
	}
	info, err := mu.Get(ctx, "sku#LIVE")
	if err != nil || !info.Held || info.Holder.LeaseID != live.ID() {
		t.Errorf("live lease after sweep: %+v, %v", info, err)
	}
	if err := live.Renew(ctx); err != nil {
		t.Errorf("live lease cannot renew after the sweep: %v", err)
	}
	for _, k := range [][2]string{{"turnstile#fence#0007", "epoch"}, {"queue-key", "lock#counter"}} {
		out, err := f.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.tables.Locks), Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: k[0]}, "sk": &types.AttributeValueMemberS{Value: k[1]},
		}})
		if err != nil || out.Item == nil {
			t.Errorf("sweep deleted %v (%v)", k, err)
		}
	}

	// The scheduled event runs the sweep with the real clock: no row has been expired
	// for an hour, so the live lease stays.
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "scheduled-sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.h.Handle(ctx, raw); err != nil {
		t.Fatalf("scheduled sweep: %v", err)
	}
	if info, err := mu.Get(ctx, "sku#LIVE"); err != nil || !info.Held {
		t.Errorf("live lease after the scheduled sweep: %+v, %v", info, err)
	}
}

// The sweep deletes an abandoned lease's row only once the lease's work is resumed: the
// deletion is no TTL deletion, so no stream record will name the lease again, and a
// re-drive that failed (SQS throttled or down) must be tried again by the next sweep.
// The order's own message may be gone (its receives used up, moved to the DLQ): the
// janitor's re-drive is then the only way the order is ever decided.
func TestSweepKeepsAnAbandonedLeaseWhoseReDriveFailed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dead := shop.Order{OrderID: "ord-sweep-dead", CustomerID: "c", Lines: []shop.Line{{SKU: "SWEEP-SKU", Qty: 1}}}
	f.crashOrder(t, shop.CrashStockLocked, dead)
	j := handler.New(f.hdb, f.tables.Locks, f.hsvc, f.redrive,
		handler.WithLogger(slog.New(slog.DiscardHandler)),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }),
		handler.WithClock(func() time.Time { return time.Now().Add(48 * time.Hour) }),
		handler.WithMinAge(time.Hour))

	f.redrive.err = errors.New("SQS is down")
	res, err := j.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 0 {
		t.Fatalf("first sweep = %+v, want nothing re-driven (SQS is down)", res)
	}

	f.redrive.err = nil
	res, err = j.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids := f.redrive.ids(); !slices.Equal(ids, []string{dead.OrderID}) {
		t.Fatalf("after SQS recovered the sweep re-drove %v (sweep %+v), want [%s]: the abandoned lease's order was lost",
			ids, res, dead.OrderID)
	}
	if res.Deleted != 1 || res.Abandoned != 1 || res.Redriven != 1 {
		t.Errorf("second sweep = %+v, want the abandoned row deleted and its order re-driven", res)
	}
}

// failFirst is a Redriver that fails its first call (SQS throttled) and then sends.
type failFirst struct {
	capture
	calls int
}

func (f *failFirst) Redrive(ctx context.Context, o shop.Order) error {
	f.calls++
	if f.calls == 1 {
		return errors.New("SQS throttled")
	}
	return f.capture.Redrive(ctx, o)
}

// A stream record whose re-drive failed is retried by Lambda: the abandoned lease it
// reports is one lease, counted once (AbandonedLeases is what the demo and the alarm
// compare with the TTL deletions of held leases), not once per attempt.
func TestRetriedRecordCountsItsAbandonedLeaseOnce(t *testing.T) {
	f := newFixture(t)
	f.crashOrder(t, shop.CrashStockLocked, crashed)
	rd := &failFirst{}
	f.h = handler.New(f.hdb, f.tables.Locks, f.hsvc, rd,
		handler.WithLogger(slog.New(slog.DiscardHandler)),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }))
	ttl := streamEvent(t, "dynamodb-ttl-remove.json", f.lockRow(t, shop.SKULockKey("MUG-RED-350")))
	if failed := f.handle(t, ttl); len(failed) != 1 {
		t.Fatalf("first attempt: failures %v, want the record (its re-drive failed)", failed)
	}
	if failed := f.handle(t, ttl); len(failed) != 0 { // Lambda's retry of the record
		t.Fatalf("retry: failures %v", failed)
	}
	if ids := rd.ids(); !slices.Equal(ids, []string{crashed.OrderID}) {
		t.Fatalf("re-driven %v", ids)
	}
	if n := strings.Count(f.metrics.String(), `"AbandonedLeases":1`); n != 1 {
		t.Errorf("one abandoned lease counted %d times:\n%s", n, f.metrics)
	}
}
