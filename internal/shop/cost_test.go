package shop_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
	tx  func(items int) // told the item count of each TransactWriteItems
}

// onTransact sets f to be told the item count of every transaction; the result unsets it.
func (c *opCounter) onTransact(f func(items int)) func() {
	c.mu.Lock()
	c.tx = f
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.tx = nil
		c.mu.Unlock()
	}
}

func (c *opCounter) client(db *dynamodb.Client) *dynamodb.Client {
	return dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("count", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				op := awsmiddleware.GetOperationName(ctx)
				switch p := in.Parameters.(type) {
				case *dynamodb.UpdateItemInput:
					op += " " + *p.TableName
				case *dynamodb.GetItemInput:
					op += " " + *p.TableName
				case *dynamodb.PutItemInput:
					op += " " + *p.TableName
				}
				c.mu.Lock()
				if p, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok && c.tx != nil {
					c.tx(len(p.TransactItems))
				}
				c.ops[op]++
				c.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
		})
	})
}

// TestProcessOrdersUncontendedCost pins the request count of the batch path on free
// locks: ten orders on three SKUs cost one locking read per SKU (the lock and the stock
// in one call; the first also records the orders), one read of their order items
// (BatchGetItem: none decided before), and one transaction for all ten decisions, which
// also releases the stock items — 5 requests, 0.5 per order. A change that adds a round trip per order or per
// SKU fails here (cost is measured by counting requests, not by timing).
func TestProcessOrdersUncontendedCost(t *testing.T) {
	e := newEnv(t)
	c := &opCounter{ops: map[string]int{}}
	e.db = c.client(e.db)
	svc := e.service(t, "w1")
	seed(t, svc, map[string]int{"A": 100, "B": 100, "C": 100})
	c.mu.Lock()
	c.ops = map[string]int{}
	c.mu.Unlock()
	skus := []string{"A", "B", "C"}
	var orders []shop.Order
	for i := 0; i < 10; i++ {
		orders = append(orders, shop.Order{OrderID: fmt.Sprintf("o%d", i), CustomerID: "c",
			Lines: []shop.Line{{SKU: skus[i%3], Qty: 1}, {SKU: skus[(i+1)%3], Qty: 1}}})
	}
	for _, r := range svc.ProcessOrders(ctxT(t, 10*time.Second), orders) {
		if r.Err != nil || r.Outcome.Status != shop.StatusReserved {
			t.Fatalf("%s: %+v, %v", r.Outcome.OrderID, r.Outcome, r.Err)
		}
	}
	want := map[string]int{
		"BatchGetItem":                1, // the order items: none decided before
		"UpdateItem " + e.t.Inventory: 3, // the stock items' locking reads
		"TransactWriteItems":          1, // every decision, and the stock items' release
	}
	c.mu.Lock()
	got := maps.Clone(c.ops)
	c.mu.Unlock()
	for k, n := range got {
		if want[k] != n {
			t.Errorf("%s: %d requests, want %d", k, n, want[k])
		}
	}
	for k, n := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: no requests, want %d", k, n)
		}
	}
	wantStock(t, svc, "A", 100-7, 7)
	for i := range orders {
		wantStatus(t, svc, orders[i].OrderID, shop.StatusReserved)
	}
}

// TestApplyAdjustmentUncontendedCost pins the request count of an applied adjustment on
// a free lock: the stock item's locking read (the lock and the stock), and one
// transaction of two items (the stock, which it also releases, and the marker, whose
// absence is its condition: no read of it first) — 2 requests.
func TestApplyAdjustmentUncontendedCost(t *testing.T) {
	e := newEnv(t)
	c := &opCounter{ops: map[string]int{}}
	e.db = c.client(e.db)
	svc := e.service(t, "w1")
	seed(t, svc, map[string]int{"A": 10})
	c.mu.Lock()
	c.ops = map[string]int{}
	c.mu.Unlock()
	var items []int
	tx := c.onTransact(func(n int) { items = append(items, n) })
	defer tx()
	applied, err := svc.ApplyAdjustment(ctxT(t, 10*time.Second), shop.Adjustment{AdjustmentID: "adj-1", SKU: "A", Delta: -3, Reason: "count"})
	if err != nil || !applied {
		t.Fatalf("ApplyAdjustment = %v, %v", applied, err)
	}
	want := map[string]int{
		"UpdateItem " + e.t.Inventory: 1, // the locking read
		"TransactWriteItems":          1, // stock (and its release) and marker
	}
	c.mu.Lock()
	got := maps.Clone(c.ops)
	c.mu.Unlock()
	if !maps.Equal(got, want) {
		t.Errorf("requests %v, want %v", got, want)
	}
	if len(items) != 1 || items[0] != 2 {
		t.Errorf("transaction items %v, want one transaction of 2", items)
	}
	wantStock(t, svc, "A", 7, 0)
}

// TestLeaderReadsOnlyOrdersItDecides pins what a leader reads before deciding: the order
// items (an eventually consistent BatchGetItem, the guard against deciding twice) of the
// orders it will decide, never of one whose other stock item it could not take — that
// read would be paid again by whichever holder decides the order. Here X is held
// elsewhere, so the order that needs HOT and X is led (HOT is free) but never decided.
func TestLeaderReadsOnlyOrdersItDecides(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	read := map[string]int{} // order id -> eventually consistent reads of its item
	e.db = dynamodb.New(e.db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("keys", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if p, ok := in.Parameters.(*dynamodb.BatchGetItemInput); ok {
					mu.Lock()
					for _, ka := range p.RequestItems {
						if ka.ConsistentRead == nil || !*ka.ConsistentRead {
							for _, k := range ka.Keys {
								if v, ok := k["orderId"].(*types.AttributeValueMemberS); ok {
									read[v.Value]++
								}
							}
						}
					}
					mu.Unlock()
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
		})
	})
	svc := e.service(t, "leader")
	seed(t, svc, map[string]int{"HOT": 10, "X": 10})
	other, err := lockcore.NewItemLocker(e.db, e.t.Inventory, lockcore.WithOwner("other"), lockcore.WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	x, err := other.Acquire(ctxT(t, 5*time.Second), map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#X"}, "sk": &types.AttributeValueMemberS{Value: "STOCK"}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release(context.Background())

	res := svc.ProcessOrders(ctxT(t, 10*time.Second), []shop.Order{
		{OrderID: "needs-x", CustomerID: "c", Lines: []shop.Line{{SKU: "HOT", Qty: 1}, {SKU: "X", Qty: 1}}},
	})
	if !errors.Is(res[0].Err, shop.ErrBusy) {
		t.Fatalf("needs-x: %+v, %v; want ErrBusy (X is held elsewhere)", res[0].Outcome, res[0].Err)
	}
	res = svc.ProcessOrders(ctxT(t, 10*time.Second), []shop.Order{
		{OrderID: "hot-only", CustomerID: "c", Lines: []shop.Line{{SKU: "HOT", Qty: 1}}},
	})
	if res[0].Err != nil || res[0].Outcome.Status != shop.StatusReserved {
		t.Fatalf("hot-only: %+v, %v", res[0].Outcome, res[0].Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if read["needs-x"] != 0 {
		t.Errorf("needs-x's item read %d times before a decision no holder of HOT could make, want 0", read["needs-x"])
	}
	if read["hot-only"] != 1 {
		t.Errorf("hot-only's item read %d times before its decision, want 1", read["hot-only"])
	}
}
