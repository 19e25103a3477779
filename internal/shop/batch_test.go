package shop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// pausedBatch starts ProcessOrders of orders on a service whose heartbeats are off and
// which pauses once the stock is read (under every lock), past its 1 s leases. It
// returns a function that resumes it and returns its results.
func pausedBatch(t *testing.T, e *env, orders []shop.Order, stock map[string]int) func() []shop.BatchResult {
	t.Helper()
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
	seed(t, slow, stock)
	done := make(chan []shop.BatchResult, 1)
	go func() { done <- slow.ProcessOrders(context.Background(), orders) }()
	<-paused
	time.Sleep(1200 * time.Millisecond) // past the 1 s leases
	return func() []shop.BatchResult {
		close(proceed)
		return <-done
	}
}

// An order of a batch whose own lock was taken over while the batch held its SKUs fails
// alone: the batch's one decision transaction is refused on that order's item, and the
// other orders are decided again without it and written.
func TestBatchOrderLockLostFailsThatOrderAlone(t *testing.T) {
	e := newEnv(t)
	o1 := shop.Order{OrderID: "ord-1", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}}}
	o2 := shop.Order{OrderID: "ord-2", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 1}}}
	resume := pausedBatch(t, e, []shop.Order{o1, o2}, map[string]int{"MUG-RED-350": 5})

	// Someone else takes ord-2's expired lock over, and lets it go undecided.
	il, err := lockcore.NewItemLocker(e.db, e.t.Orders, lockcore.WithOwner("other"), lockcore.WithMinLease(time.Second), lockcore.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := il.Acquire(ctxT(t, 10*time.Second), map[string]types.AttributeValue{"orderId": &types.AttributeValueMemberS{Value: "ord-2"}},
		lockcore.WaitUpTo(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	res := resume()
	if res[0].Err != nil || res[0].Outcome.Status != shop.StatusReserved {
		t.Errorf("ord-1 = %+v, %v; want RESERVED", res[0].Outcome, res[0].Err)
	}
	if !errors.Is(res[1].Err, lockcore.ErrLeaseLost) {
		t.Errorf("ord-2 = %+v, %v; want ErrLeaseLost", res[1].Outcome, res[1].Err)
	}
	svc := e.service(t, "check")
	wantStock(t, svc, "MUG-RED-350", 3, 2)
	wantStatus(t, svc, "ord-1", shop.StatusReserved)
	wantStatus(t, svc, "ord-2", shop.StatusPending)
}

// A batch whose SKU lease was taken over and used while it was paused writes nothing:
// its decision transaction's fenced stock update is refused, every order of the group
// fails with ErrLeaseLost, and the stock shows the newer holder's reservation only.
func TestBatchSKULeaseLostWritesNothing(t *testing.T) {
	e := newEnv(t)
	o1 := shop.Order{OrderID: "ord-1", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}}}
	o2 := shop.Order{OrderID: "ord-2", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 1}, {SKU: "TEE-BLK-M", Qty: 1}}}
	resume := pausedBatch(t, e, []shop.Order{o1, o2}, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})

	live := e.service(t, "live")
	o3 := shop.Order{OrderID: "ord-3", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 4}}}
	if out, err := live.ProcessOrder(ctxT(t, 10*time.Second), o3); err != nil || out.Status != shop.StatusReserved {
		t.Fatalf("live = %+v, %v", out, err)
	}

	res := resume()
	for i, r := range res {
		if !errors.Is(r.Err, lockcore.ErrLeaseLost) {
			t.Errorf("order %d = %+v, %v; want ErrLeaseLost", i+1, r.Outcome, r.Err)
		}
	}
	wantStock(t, live, "MUG-RED-350", 1, 4)
	wantStock(t, live, "TEE-BLK-M", 5, 0)
	wantStatus(t, live, "ord-1", shop.StatusPending)
	wantStatus(t, live, "ord-2", shop.StatusPending)
}

// An order lock handed over by the fair queue: a batch that waited for the order (its
// other copy's holder let it go undecided) decides it, and the order item its decision
// transaction unlocked (serving left at its ticket, nobody queued) can be locked again by
// the same client, which found it busy lately — before the served() fix in lockcore that
// take gave up ("the item keeps changing under the take"). Heartbeats are off so that no
// renewal touches the item meanwhile. (lockcore's TestItemHeldConditionInCallersTransaction
// pins the decision's condition for a lease not yet claimed.)
func TestBatchDecidesHandedOverOrder(t *testing.T) {
	e := newEnv(t)
	il, err := lockcore.NewItemLocker(e.db, e.t.Orders, lockcore.WithOwner("other"), lockcore.WithMinLease(time.Second),
		lockcore.WithLease(2*time.Second), lockcore.WithHeartbeat(0))
	if err != nil {
		t.Fatal(err)
	}
	l, err := il.Acquire(ctxT(t, 10*time.Second), map[string]types.AttributeValue{"orderId": &types.AttributeValueMemberS{Value: "ord-1"}})
	if err != nil {
		t.Fatal(err)
	}
	svc := e.service(t, "batch", shop.WithWaitBudget(5*time.Second), shop.WithLockOptions(lockcore.WithHeartbeat(0)))
	seed(t, svc, map[string]int{"MUG-RED-350": 5})
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = l.Release(context.Background())
	}()
	o := shop.Order{OrderID: "ord-1", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}}}
	r := svc.ProcessOrders(ctxT(t, 10*time.Second), []shop.Order{o})[0]
	if r.Err != nil || r.Outcome.Status != shop.StatusReserved {
		t.Fatalf("ord-1 = %+v, %v; want RESERVED", r.Outcome, r.Err)
	}
	wantStock(t, svc, "MUG-RED-350", 3, 2)
	if out, err := svc.ProcessOrder(ctxT(t, 10*time.Second), o); err != nil || !out.Duplicate {
		t.Fatalf("ProcessOrder again = %+v, %v; want a duplicate", out, err)
	}
}
