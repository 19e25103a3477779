package shop_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

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

// An order of a batch decided elsewhere while the batch held its stock (a paused holder;
// here written straight to its item) is left out: the batch's decision transaction is
// refused on that order's item (conditioned on the order not being decided), and the
// other orders are decided again without it and written. The late copy is reported as a
// duplicate with the decision that stands.
func TestBatchOrderDecidedElsewhereIsLeftOut(t *testing.T) {
	e := newEnv(t)
	o1 := shop.Order{OrderID: "ord-1", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}}}
	o2 := shop.Order{OrderID: "ord-2", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 1}}}
	resume := pausedBatch(t, e, []shop.Order{o1, o2}, map[string]int{"MUG-RED-350": 5})

	if _, err := e.db.PutItem(ctxT(t, 5*time.Second), &dynamodb.PutItemInput{TableName: aws.String(e.t.Orders), Item: map[string]types.AttributeValue{
		"orderId": &types.AttributeValueMemberS{Value: "ord-2"}, "customerId": &types.AttributeValueMemberS{Value: "c"},
		"status": &types.AttributeValueMemberS{Value: "REJECTED"}, "reason": &types.AttributeValueMemberS{Value: "decided elsewhere"},
	}}); err != nil {
		t.Fatal(err)
	}

	res := resume()
	if res[0].Err != nil || res[0].Outcome.Status != shop.StatusReserved || res[0].Outcome.Duplicate {
		t.Errorf("ord-1 = %+v, %v; want RESERVED", res[0].Outcome, res[0].Err)
	}
	if res[1].Err != nil || res[1].Outcome.Status != shop.StatusRejected || !res[1].Outcome.Duplicate {
		t.Errorf("ord-2 = %+v, %v; want the REJECTED decided elsewhere, as a duplicate", res[1].Outcome, res[1].Err)
	}
	svc := e.service(t, "check")
	wantStock(t, svc, "MUG-RED-350", 3, 2)
	wantStatus(t, svc, "ord-1", shop.StatusReserved)
	wantStatus(t, svc, "ord-2", shop.StatusRejected)
	if ids := recordedOn(t, e, "MUG-RED-350"); len(ids) != 0 {
		t.Errorf("records left on the stock item: %v", ids)
	}
}

// A batch whose stock lease was taken over while it was paused writes nothing: its
// decision transaction is refused (conditioned on the lease). The invocation that took
// the lock over found the paused batch's orders recorded on the stock item and decided
// those it holds the stock of, oldest first (ord-1, then its own ord-3, which the rest of
// the stock no longer covers): the paused batch reports ord-1 as decided (a duplicate,
// with the decision that stands). ord-2 also needs TEE-BLK-M, which the paused batch
// still held: it fails with ErrLeaseLost and stays recorded for a later holder.
func TestBatchStockLeaseLostWritesNothing(t *testing.T) {
	e := newEnv(t)
	o1 := shop.Order{OrderID: "ord-1", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}}}
	o2 := shop.Order{OrderID: "ord-2", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 1}, {SKU: "TEE-BLK-M", Qty: 1}}}
	resume := pausedBatch(t, e, []shop.Order{o1, o2}, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})

	live := e.service(t, "live", shop.WithLockOptions(lockcore.WithHeartbeat(0)))
	o3 := shop.Order{OrderID: "ord-3", CustomerID: "c", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 4}}}
	if out, err := live.ProcessOrder(ctxT(t, 10*time.Second), o3); err != nil || out.Status != shop.StatusRejected {
		t.Fatalf("live = %+v, %v; want REJECTED (ord-1, recorded first, took 2 of 5)", out, err)
	}

	res := resume()
	if res[0].Err != nil || res[0].Outcome.Status != shop.StatusReserved || !res[0].Outcome.Duplicate {
		t.Errorf("ord-1 = %+v, %v; want RESERVED by the live invocation, a duplicate", res[0].Outcome, res[0].Err)
	}
	if !errors.Is(res[1].Err, lockcore.ErrLeaseLost) {
		t.Errorf("ord-2 = %+v, %v; want ErrLeaseLost", res[1].Outcome, res[1].Err)
	}
	wantStock(t, live, "MUG-RED-350", 3, 2)
	wantStock(t, live, "TEE-BLK-M", 5, 0)
	wantStatus(t, live, "ord-1", shop.StatusReserved)
	wantUndecided(t, live, "ord-2")
	wantStatus(t, live, "ord-3", shop.StatusRejected)
	if ids := recordedOn(t, e, "MUG-RED-350"); len(ids) != 1 || ids[0] != "ord-2" {
		t.Errorf("records on MUG-RED-350: %v, want ord-2's", ids)
	}
}

// recordedOn returns the ids of the orders recorded on a SKU's stock item (not the
// decision markers that replace the records of decided orders).
func recordedOn(t *testing.T, e *env, sku string) []string {
	t.Helper()
	out, err := e.db.GetItem(ctxT(t, 5*time.Second), &dynamodb.GetItemInput{
		TableName: aws.String(e.t.Inventory), Key: stockKey(sku), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for k, v := range out.Item {
		if id, ok := strings.CutPrefix(k, shop.PendingAttrPrefix); ok && !strings.HasPrefix(v.(*types.AttributeValueMemberS).Value, "=") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
