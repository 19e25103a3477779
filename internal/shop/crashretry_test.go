package shop_test

import (
	"errors"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

// A batch that dies holding its order locks (a Lambda timeout or crash) leaves every one
// of its orders locked by a holder that will never renew. When the batch's messages come
// back together, the retry must take over each lock by observing it unchanged for a full
// order lease (observation takeover, the default). ProcessOrders waited for the order
// locks one after the other, in id order, so the observations did not overlap: each
// invocation took over one abandoned order lock (the order lease is three quarters of
// the wait) and returned every other order as busy. Deployed (30 s timeout, 20 s order
// lease), a crashed batch of ten orders was decided one order per receive, and the orders
// past the fifth reached the dead-letter queue (maxReceiveCount 5) although they are valid
// and their stock is free.
//
// The retry now watches the later order locks whose holder is past its lease end while
// it waits for the first, and decides all three orders in one invocation.
func TestCrashedBatchRetryTakesOverEveryOrderLock(t *testing.T) {
	e := newEnv(t)
	seed(t, e.service(t, "seed"), map[string]int{"A": 5, "B": 5, "C": 5})
	orders := []shop.Order{
		{OrderID: "c-1", CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}},
		{OrderID: "c-2", CustomerID: "c", Lines: []shop.Line{{SKU: "B", Qty: 1}}},
		{OrderID: "c-3", CustomerID: "c", Lines: []shop.Line{{SKU: "C", Qty: 1}}},
	}
	// Observation takeover (the deployed default), 1 s SKU leases; the order leases
	// follow the 6 s "invocation": three quarters of its 5.4 s wait.
	svc := func(owner string, opts ...shop.Option) *shop.Service {
		s, err := shop.NewService(e.db, e.t, append([]shop.Option{shop.WithOwner(owner), shop.WithLease(time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dead := svc("dead", shop.WithCrashHook(func(p string) error {
		if p == shop.CrashOrderLocked {
			return errors.New("killed")
		}
		return nil
	}))
	_ = dead.ProcessOrders(ctxT(t, 6*time.Second), orders)
	// The messages come back after the queue's visibility timeout, which is longer than
	// the function's timeout and so than the order lease: the dead holder's lease ends
	// have passed.
	time.Sleep(4200 * time.Millisecond)

	res := svc("retry").ProcessOrders(ctxT(t, 6*time.Second), orders)
	for i, r := range res {
		if r.Err != nil || r.Outcome.Status != shop.StatusReserved {
			t.Errorf("%s = %+v, %v; want RESERVED in the first retry", orders[i].OrderID, r.Outcome, r.Err)
		}
	}
}
