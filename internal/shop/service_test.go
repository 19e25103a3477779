package shop_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's engine client and fresh tables.
type env struct {
	db *dynamodb.Client
	t  shop.Tables
}

func newEnv(t *testing.T) *env {
	t.Helper()
	names := testenv.Tables(t, "LockTable", "OrdersTable", "InventoryTable")
	return &env{db: testenv.Client(t), t: shop.Tables{
		Locks: names["LockTable"], Orders: names["OrdersTable"], Inventory: names["InventoryTable"],
	}}
}

// service returns a Service with test-friendly timing: 1s leases, immediate takeover.
func (e *env) service(t *testing.T, owner string, opts ...shop.Option) *shop.Service {
	t.Helper()
	svc, err := shop.NewService(e.db, e.t, append([]shop.Option{
		shop.WithOwner(owner),
		shop.WithLease(time.Second),
		shop.WithTakeoverSkew(0),
		shop.WithWaitBudget(200 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func seed(t *testing.T, svc *shop.Service, stock map[string]int) {
	t.Helper()
	for sku, n := range stock {
		if err := svc.SeedStock(ctxT(t, 10*time.Second), sku, n); err != nil {
			t.Fatalf("seed %s: %v", sku, err)
		}
	}
}

func wantStock(t *testing.T, svc *shop.Service, sku string, avail, reserved int) {
	t.Helper()
	a, r, err := svc.Stock(ctxT(t, 5*time.Second), sku)
	if err != nil {
		t.Fatal(err)
	}
	if a != avail || r != reserved {
		t.Errorf("stock of %s = available %d, reserved %d; want %d, %d", sku, a, r, avail, reserved)
	}
}

func wantStatus(t *testing.T, svc *shop.Service, id string, want shop.Status) {
	t.Helper()
	st, ok, err := svc.OrderStatus(ctxT(t, 5*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if !ok || st != want {
		t.Errorf("order %s: status %q (exists %v), want %q", id, st, ok, want)
	}
}

// holdStockItem locks a SKU's stock item as another client would (lockcore's locking
// read on the inventory table).
func holdStockItem(t *testing.T, e *env, owner, sku string) *lockcore.ItemLease {
	t.Helper()
	il, err := lockcore.NewItemLocker(e.db, e.t.Inventory, lockcore.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	l, err := il.Acquire(ctxT(t, 5*time.Second), stockKey(sku))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func stockKey(sku string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: shop.StockPKPrefix + sku},
		"sk": &types.AttributeValueMemberS{Value: shop.StockSK},
	}
}

// stockHolder returns the lease id that holds a SKU's stock item ("" when none).
func stockHolder(t *testing.T, e *env, sku string) string {
	t.Helper()
	out, err := e.db.GetItem(ctxT(t, 5*time.Second), &dynamodb.GetItemInput{
		TableName: aws.String(e.t.Inventory), Key: stockKey(sku), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := out.Item[lockcore.DefaultItemAttributes.LockedBy].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

// wantUndecided checks that an order has no decision (no order item, or a PENDING one).
func wantUndecided(t *testing.T, svc *shop.Service, id string) {
	t.Helper()
	st, ok, err := svc.OrderStatus(ctxT(t, 5*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if ok && st.Final() {
		t.Errorf("order %s: status %q, want undecided", id, st)
	}
}

// recorder is a MetricsSink that keeps every value.
type recorder struct {
	mu sync.Mutex
	m  map[string][]float64
}

func (r *recorder) PutMetric(name string, v float64, _ emf.Unit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string][]float64{}
	}
	r.m[name] = append(r.m[name], v)
}

func (r *recorder) n(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m[name])
}

func TestProcessOrderReservesOnceAndIsIdempotent(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	svc := e.service(t, "svc-a", shop.WithMetrics(rec))
	seed(t, svc, map[string]int{"MUG-RED-350": 10, "TEE-BLK-M": 3})
	o := shop.Order{OrderID: "ord-1001", CustomerID: "cus-4711", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}, {SKU: "TEE-BLK-M", Qty: 3}}}

	out, err := svc.ProcessOrder(ctxT(t, 10*time.Second), o)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != shop.StatusReserved || out.Duplicate || out.Reason != "" {
		t.Fatalf("outcome = %+v, want RESERVED", out)
	}
	for i := 0; i < 3; i++ { // redeliveries
		out, err = svc.ProcessOrder(ctxT(t, 10*time.Second), o)
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != shop.StatusReserved || !out.Duplicate {
			t.Fatalf("redelivery %d: outcome = %+v, want a RESERVED duplicate", i, out)
		}
	}
	wantStock(t, svc, "MUG-RED-350", 8, 2)
	wantStock(t, svc, "TEE-BLK-M", 0, 3)
	wantStatus(t, svc, "ord-1001", shop.StatusReserved)
	got, st, ok, err := svc.Order(ctxT(t, 5*time.Second), "ord-1001")
	if err != nil || !ok || st != shop.StatusReserved || got.CustomerID != "cus-4711" || len(got.Lines) != 2 {
		t.Errorf("Order = %+v, %s, %v, %v", got, st, ok, err)
	}
	// LockWait is reported per acquisition, through lockcore's observer: 2 seeds and the
	// order's 2 stock items, then those of each redelivery, which takes the free stock
	// items and finds the order decided in the read of its order item that precedes any
	// decision.
	if rec.n(shop.MetricOrdersReserved) != 1 || rec.n(shop.MetricOrdersDuplicate) != 3 || rec.n(shop.MetricLockWait) != 10 ||
		rec.n(shop.MetricLockHold) == 0 || rec.n(shop.MetricLeaseLost) != 0 {
		t.Errorf("metrics = %v", rec.m)
	}
}

// WithLockObserver adds to the service's own lock observer: the lock metrics still flow,
// and the added observer sees every acquisition of a SKU's stock item; the hold observer
// sees the critical section the order's decision transaction ended.
func TestWithLockObserverAddsToTheMetrics(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	key := "pk=SKU#MUG-RED-350,sk=STOCK" // lockcore's label of the stock item's key
	var mu sync.Mutex
	var acquired int
	var held []time.Duration
	var holds []shop.HoldEvent
	obs := lockcore.Observer{
		Acquired: func(_ context.Context, ev lockcore.AcquireEvent) {
			if ev.Key == key {
				mu.Lock()
				acquired++
				mu.Unlock()
			}
		},
		Released: func(_ context.Context, ev lockcore.LeaseEvent) {
			if ev.Key == key {
				mu.Lock()
				held = append(held, ev.Held)
				mu.Unlock()
			}
		},
	}
	svc := e.service(t, "svc-a", shop.WithMetrics(rec), shop.WithLockObserver(obs),
		shop.WithHoldObserver(func(_ context.Context, ev shop.HoldEvent) {
			mu.Lock()
			holds = append(holds, ev)
			mu.Unlock()
		}))
	seed(t, svc, map[string]int{"MUG-RED-350": 10})
	o := shop.Order{OrderID: "ord-obs", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 1}}}
	if _, err := svc.ProcessOrder(ctxT(t, 10*time.Second), o); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The seed and the order each took the stock item once; the seed released it with
	// lockcore (UpdateAndRelease), the order with its decision transaction.
	if acquired != 2 || len(held) != 1 || held[0] <= 0 {
		t.Errorf("added observer: %d acquisitions, holds %v; want 2 and 1", acquired, held)
	}
	if len(holds) != 1 || holds[0].SKU != "MUG-RED-350" || holds[0].Orders != 1 || holds[0].Held <= 0 || holds[0].Lost {
		t.Errorf("hold observer: %+v; want the order's critical section on MUG-RED-350", holds)
	}
	// The service's own: the seed's stock lock and the order's.
	if rec.n(shop.MetricLockWait) != 2 || rec.n(shop.MetricLockHold) < 2 {
		t.Errorf("metrics = %v; want 2 LockWait and the holds", rec.m)
	}
}

func TestProcessOrderRejectsWithoutPartialReservation(t *testing.T) {
	e := newEnv(t)
	svc := e.service(t, "svc-a")
	seed(t, svc, map[string]int{"BOOK-DDIA": 10, "MUG-RED-350": 1})
	o := shop.Order{OrderID: "ord-2003", CustomerID: "cus-0007", Lines: []shop.Line{{SKU: "BOOK-DDIA", Qty: 1}, {SKU: "MUG-RED-350", Qty: 4}, {SKU: "NO-SUCH-SKU", Qty: 1}}}
	out, err := svc.ProcessOrder(ctxT(t, 10*time.Second), o)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != shop.StatusRejected || !strings.Contains(out.Reason, "MUG-RED-350 (requested 4, available 1)") ||
		!strings.Contains(out.Reason, "NO-SUCH-SKU") || strings.Contains(out.Reason, "BOOK-DDIA") {
		t.Fatalf("outcome = %+v", out)
	}
	wantStock(t, svc, "BOOK-DDIA", 10, 0)
	wantStock(t, svc, "MUG-RED-350", 1, 0)
	wantStatus(t, svc, "ord-2003", shop.StatusRejected)

	// A rejection is final too: restocking does not revive the order.
	seed(t, svc, map[string]int{"MUG-RED-350": 100, "NO-SUCH-SKU": 5})
	out, err = svc.ProcessOrder(ctxT(t, 10*time.Second), o)
	if err != nil || !out.Duplicate || out.Status != shop.StatusRejected || out.Reason == "" {
		t.Fatalf("redelivery = %+v, %v", out, err)
	}
	wantStock(t, svc, "MUG-RED-350", 100, 0)
}

func TestProcessOrderContentionIsBusy(t *testing.T) {
	e := newEnv(t)
	svc := e.service(t, "svc-a", shop.WithWaitBudget(0))
	seed(t, svc, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})
	held := holdStockItem(t, e, "someone-else", "TEE-BLK-M")
	o := shop.Order{OrderID: "ord-busy", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 1}, {SKU: "TEE-BLK-M", Qty: 1}}}
	_, err := svc.ProcessOrder(ctxT(t, 10*time.Second), o)
	if !errors.Is(err, shop.ErrBusy) || !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
	wantUndecided(t, svc, "ord-busy")
	wantStock(t, svc, "MUG-RED-350", 5, 0)
	// Nothing of the order stays locked: the MUG stock item was released, the order too.
	if by := stockHolder(t, e, "MUG-RED-350"); by != "" {
		t.Fatalf("MUG stock item after busy: held by %q", by)
	}
	if err := held.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	out, err := svc.ProcessOrder(ctxT(t, 10*time.Second), o)
	if err != nil || out.Status != shop.StatusReserved || out.Duplicate {
		t.Fatalf("retry = %+v, %v", out, err)
	}
	wantStock(t, svc, "TEE-BLK-M", 4, 1)
}

func TestCrashedHolderIsTakenOver(t *testing.T) {
	for _, point := range []string{shop.CrashOrderLocked, shop.CrashStockLocked} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			crash := errors.New("injected crash")
			dead := e.service(t, "dead", shop.WithCrashHook(func(p string) error {
				if p == point {
					return crash
				}
				return nil
			}))
			seed(t, dead, map[string]int{"MUG-RED-350": 5})
			o := shop.Order{OrderID: "ord-crash", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}}}
			if _, err := dead.ProcessOrder(ctxT(t, 10*time.Second), o); !errors.Is(err, crash) {
				t.Fatalf("err = %v, want the injected crash", err)
			}
			if point == shop.CrashStockLocked {
				// The dead holder's stock item stays locked, and names its order.
				ab, err := e.service(t, "sweep").AbandonedStock(ctxT(t, 5*time.Second), -time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if len(ab) != 1 || ab[0].SKU != "MUG-RED-350" || ab[0].Owner != "dead" || len(ab[0].Orders) != 1 ||
					!reflect.DeepEqual(ab[0].Orders[0], o) {
					t.Fatalf("stock item after crash = %+v, want locked by dead, naming %+v", ab, o)
				}
			}
			wantUndecided(t, dead, "ord-crash")

			// A live instance retries until the dead holder's leases expire.
			live := e.service(t, "live")
			deadline := time.Now().Add(10 * time.Second)
			for {
				out, err := live.ProcessOrder(ctxT(t, 10*time.Second), o)
				if err == nil {
					if out.Status != shop.StatusReserved || out.Duplicate {
						t.Fatalf("outcome = %+v", out)
					}
					break
				}
				if !errors.Is(err, shop.ErrBusy) || time.Now().After(deadline) {
					t.Fatalf("err = %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			wantStock(t, live, "MUG-RED-350", 3, 2)
		})
	}
}

func TestConcurrentOrdersConserveStock(t *testing.T) {
	e := newEnv(t)
	const (
		workers = 6
		orders  = 40
		initial = 25
	)
	skus := []string{"HOT-1", "HOT-2", "WARM-3"}
	seed(t, e.service(t, "seeder"), map[string]int{"HOT-1": initial, "HOT-2": initial, "WARM-3": initial})
	var next, busyCount atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	reserved := map[string]int{}
	outcomes := map[string]shop.Status{}
	for w := 0; w < workers; w++ {
		svc := e.service(t, fmt.Sprintf("worker-%d", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= orders {
					return
				}
				// Both hot SKUs in both orders (deadlock bait), the warm one sometimes.
				o := shop.Order{OrderID: fmt.Sprintf("ord-%03d", i), CustomerID: "c", Lines: []shop.Line{
					{SKU: skus[i%2], Qty: 1 + i%3}, {SKU: skus[1-i%2], Qty: 1},
				}}
				if i%3 == 0 {
					o.Lines = append(o.Lines, shop.Line{SKU: skus[2], Qty: 2})
				}
				for attempt := 0; ; attempt++ {
					out, err := svc.ProcessOrder(context.Background(), o)
					if errors.Is(err, shop.ErrBusy) && attempt < 200 {
						busyCount.Add(1)
						time.Sleep(time.Duration(5+i%7) * time.Millisecond)
						continue
					}
					if err != nil {
						t.Errorf("order %s: %v", o.OrderID, err)
						return
					}
					mu.Lock()
					if prev, dup := outcomes[o.OrderID]; dup {
						t.Errorf("order %s decided twice (%s, %s)", o.OrderID, prev, out.Status)
					}
					outcomes[o.OrderID] = out.Status
					if out.Status == shop.StatusReserved {
						for _, l := range o.Lines {
							reserved[l.SKU] += l.Qty
						}
					}
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	check := e.service(t, "checker")
	for _, sku := range skus {
		a, r, err := check.Stock(context.Background(), sku)
		if err != nil {
			t.Fatal(err)
		}
		if a < 0 || a+r != initial || r != reserved[sku] {
			t.Errorf("%s: available %d + reserved %d, want %d total and %d reserved", sku, a, r, initial, reserved[sku])
		}
	}
	if len(outcomes) != orders {
		t.Errorf("%d orders decided, want %d", len(outcomes), orders)
	}
	t.Logf("contention retries: %d", busyCount.Load())
}

func TestApplyAdjustment(t *testing.T) {
	e := newEnv(t)
	svc := e.service(t, "svc-a")
	ctx := ctxT(t, 20*time.Second)
	seed(t, svc, map[string]int{"MUG-RED-350": 5})
	steps := []struct {
		a           shop.Adjustment
		wantApplied bool
		wantErr     error
		avail       int
	}{
		{shop.Adjustment{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: 25, Reason: "restock"}, true, nil, 30},
		{shop.Adjustment{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: 25, Reason: "restock"}, false, nil, 30},
		{shop.Adjustment{AdjustmentID: "adj-2", SKU: "MUG-RED-350", Delta: -31, Reason: "breakage"}, false, shop.ErrInsufficientStock, 30},
		{shop.Adjustment{AdjustmentID: "adj-3", SKU: "MUG-RED-350", Delta: -30, Reason: "recall"}, true, nil, 0},
		{shop.Adjustment{AdjustmentID: "adj-3", SKU: "MUG-RED-350", Delta: -30, Reason: "recall"}, false, nil, 0},
		{shop.Adjustment{AdjustmentID: "adj-4", SKU: "NEW-SKU", Delta: 7}, true, nil, -1},
		{shop.Adjustment{AdjustmentID: "adj-5", SKU: "OTHER-SKU", Delta: -1}, false, shop.ErrInsufficientStock, -1},
		{shop.Adjustment{AdjustmentID: "", SKU: "MUG-RED-350", Delta: 1}, false, shop.ErrInvalid, 0},
	}
	for i, st := range steps {
		applied, err := svc.ApplyAdjustment(ctx, st.a)
		if applied != st.wantApplied || !errors.Is(err, st.wantErr) || (st.wantErr == nil) != (err == nil) {
			t.Fatalf("step %d %+v: applied %v, err %v; want %v, %v", i, st.a, applied, err, st.wantApplied, st.wantErr)
		}
		if st.avail >= 0 {
			wantStock(t, svc, "MUG-RED-350", st.avail, 0)
		}
	}
	wantStock(t, svc, "NEW-SKU", 7, 0)
	wantStock(t, svc, "OTHER-SKU", 0, 0)
}

func TestAdjustmentWaitsForOrderLock(t *testing.T) {
	e := newEnv(t)
	svc := e.service(t, "svc-a", shop.WithWaitBudget(0))
	seed(t, svc, map[string]int{"MUG-RED-350": 5})
	held := holdStockItem(t, e, "order-processor", "MUG-RED-350")
	_, err := svc.ApplyAdjustment(ctxT(t, 5*time.Second), shop.Adjustment{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: -5})
	if !errors.Is(err, shop.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
	_ = held.Release(ctxT(t, 5*time.Second))
	if applied, err := svc.ApplyAdjustment(ctxT(t, 5*time.Second), shop.Adjustment{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: -5}); !applied || err != nil {
		t.Fatalf("retry: %v, %v", applied, err)
	}
	wantStock(t, svc, "MUG-RED-350", 0, 0)
}

func TestDeadlineTooCloseIsBusy(t *testing.T) {
	e := newEnv(t)
	svc := e.service(t, "svc-a")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := svc.ProcessOrder(ctx, shop.Order{OrderID: "o", CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}})
	if !errors.Is(err, shop.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
}

// A holder paused past its leases (GC, a frozen Lambda) is taken over; when it wakes up
// its transaction is refused and nothing is reserved twice. The order was decided by the
// invocation that took the lock over (it found the order recorded on the stock item):
// the paused one reports that decision, as a duplicate.
func TestPausedHolderCannotWrite(t *testing.T) {
	e := newEnv(t)
	paused, proceed := make(chan struct{}), make(chan struct{})
	slow := e.service(t, "slow",
		shop.WithLockOptions(lockcore.WithHeartbeat(0)), // its heartbeats stop with it
		shop.WithCrashHook(func(p string) error {
			if p == shop.CrashStockLocked {
				close(paused)
				<-proceed
			}
			return nil
		}))
	seed(t, slow, map[string]int{"MUG-RED-350": 5})
	o := shop.Order{OrderID: "ord-paused", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}}}
	type result struct {
		out shop.Outcome
		err error
	}
	slowErr := make(chan result, 1)
	go func() {
		out, err := slow.ProcessOrder(context.Background(), o)
		slowErr <- result{out, err}
	}()
	<-paused
	time.Sleep(1200 * time.Millisecond) // past the 1s lease

	live := e.service(t, "live")
	t0 := time.Now()
	out, err := live.ProcessOrder(ctxT(t, 10*time.Second), o)
	t.Logf("live took %s", time.Since(t0))
	if err != nil || out.Status != shop.StatusReserved || out.Duplicate {
		t.Fatalf("live = %+v, %v", out, err)
	}
	close(proceed)
	t0 = time.Now()
	defer func() { t.Logf("slow took %s after resuming", time.Since(t0)) }()
	if r := <-slowErr; r.err != nil || !r.out.Duplicate || r.out.Status != shop.StatusReserved {
		t.Fatalf("paused holder: %+v, %v; want the RESERVED decided by live, a duplicate", r.out, r.err)
	}
	wantStock(t, live, "MUG-RED-350", 3, 2)
	wantStatus(t, live, "ord-paused", shop.StatusReserved)
}

// An adjustment id decided before with another delta keeps its first decision, and the
// mismatch is logged (a producer reusing ids), as an order redelivered with other
// content is.
func TestAdjustmentIDReusedWithAnotherDeltaIsLogged(t *testing.T) {
	e := newEnv(t)
	var logs strings.Builder
	var mu sync.Mutex
	svc := e.service(t, "svc-a", shop.WithLogger(slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))))
	ctx := ctxT(t, 20*time.Second)
	seed(t, svc, map[string]int{"MUG-RED-350": 5})
	for _, a := range []shop.Adjustment{
		{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: 3},
		{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: 3},
		{AdjustmentID: "adj-2", SKU: "MUG-RED-350", Delta: -50},
		{AdjustmentID: "adj-2", SKU: "MUG-RED-350", Delta: -50},
	} {
		_, _ = svc.ApplyAdjustment(ctx, a)
	}
	mu.Lock()
	if strings.Contains(logs.String(), "different delta") {
		t.Fatalf("same deltas logged as different:\n%s", logs.String())
	}
	mu.Unlock()
	for _, a := range []shop.Adjustment{
		{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: 9},
		{AdjustmentID: "adj-2", SKU: "MUG-RED-350", Delta: -51},
	} {
		if applied, _ := svc.ApplyAdjustment(ctx, a); applied {
			t.Fatalf("%+v applied again", a)
		}
	}
	wantStock(t, svc, "MUG-RED-350", 8, 0)
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "adjustment redelivered with a different delta"); n != 2 {
		t.Fatalf("%d warnings, want 2:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
