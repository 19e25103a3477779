package shop_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// decisionAudit watches the successful writes of every client it is installed on, at
// the DynamoDB boundary: each order decision written (an orders-table update setting a
// final status) and each reservation (an inventory update moving units from available to
// reserved, read from its values), and how many decisions each transaction carried.
type decisionAudit struct {
	orders string

	mu        sync.Mutex
	decisions map[string][]string // order id -> statuses written
	perTx     []int               // decisions per successful transaction
	txOrders  [][]string          // the orders each of those decided
}

func newDecisionAudit(orders string) *decisionAudit {
	return &decisionAudit{orders: orders, decisions: map[string][]string{}}
}

func (a *decisionAudit) client(db *dynamodb.Client) *dynamodb.Client {
	return dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("audit", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok && err == nil {
					a.observe(tx)
				}
				return out, md, err
			}), middleware.After)
		})
	})
}

func (a *decisionAudit) observe(tx *dynamodb.TransactWriteItemsInput) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	var ids []string
	for _, it := range tx.TransactItems {
		if it.Update == nil || aws.ToString(it.Update.TableName) != a.orders {
			continue
		}
		id := it.Update.Key["orderId"].(*types.AttributeValueMemberS).Value
		for _, v := range it.Update.ExpressionAttributeValues {
			if s, ok := v.(*types.AttributeValueMemberS); ok && (s.Value == "RESERVED" || s.Value == "REJECTED") {
				a.decisions[id] = append(a.decisions[id], s.Value)
				ids = append(ids, id)
				n++
			}
		}
	}
	if n > 0 {
		a.perTx = append(a.perTx, n)
		a.txOrders = append(a.txOrders, ids)
	}
}

// Orders for two hot SKUs and a regular one, several copies of each (a producer's retry,
// a duplicate delivery) in batches of up to five, are decided by eight concurrent
// invocations of their own services; one in six invocations dies holding its stock locks
// (after its locking reads, before its decision: its orders and those of the waiters it
// read stay recorded on the items), one in six stalls past its lease there and writes
// afterwards (its decision transaction must be refused: the lease was lost). A batch that
// fails goes back to the queue, as SQS would redeliver it. In the end every order is
// decided exactly once (one decision write per order, whoever's transaction carried it),
// stock is conserved (initial = available + reserved, reserved = the RESERVED orders'
// units, nothing negative), no undecided order stays recorded, and some transaction
// decided orders of different invocations together (orders that were never in one
// batch: the combining across invocations; the service before it decided a batch's
// group under its own locks only).
func TestConcurrentDecidersWithCrashes(t *testing.T) {
	e := newEnv(t)
	audit := newDecisionAudit(e.t.Orders)
	e.db = audit.client(e.db)
	const (
		orderCount = 60
		workers    = 8
		initial    = 30
	)
	skus := []string{"HOT-A", "HOT-B", "REG-C"}
	seed(t, e.service(t, "seeder"), map[string]int{"HOT-A": initial, "HOT-B": initial, "REG-C": initial})
	rng := rand.New(rand.NewPCG(7, 11))
	var all []shop.Order
	for i := 0; i < orderCount; i++ {
		o := shop.Order{OrderID: fmt.Sprintf("c-%03d", i), CustomerID: "cust"}
		o.Lines = append(o.Lines, shop.Line{SKU: skus[rng.IntN(2)], Qty: 1 + rng.IntN(3)})
		if rng.IntN(3) == 0 {
			other := skus[1-slices.Index(skus, o.Lines[0].SKU)]
			if rng.IntN(2) == 0 {
				other = skus[2]
			}
			o.Lines = append(o.Lines, shop.Line{SKU: other, Qty: 1})
		}
		all = append(all, o)
	}
	// The queue: every order once, a third of them twice, in shuffled batches.
	queue := make(chan []shop.Order, 4*orderCount)
	var msgs []shop.Order
	for _, o := range all {
		msgs = append(msgs, o)
		if rng.IntN(3) == 0 {
			msgs = append(msgs, o)
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	for len(msgs) > 0 {
		n := min(1+rng.IntN(5), len(msgs))
		queue <- msgs[:n]
		msgs = msgs[n:]
	}
	var outstanding atomic.Int64
	outstanding.Store(int64(len(queue)))
	var batchesMu sync.Mutex
	var batches [][]shop.Order // every batch delivered, retries included

	var (
		wg                sync.WaitGroup
		crashes, stalls   atomic.Int32
		leaseLost, redone atomic.Int32
		invocation        atomic.Int32
	)
	deadline := time.Now().Add(90 * time.Second)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for outstanding.Load() > 0 && time.Now().Before(deadline) {
				var batch []shop.Order
				select {
				case batch = <-queue:
				case <-time.After(50 * time.Millisecond):
					continue
				}
				batchesMu.Lock()
				batches = append(batches, batch)
				batchesMu.Unlock()
				n := invocation.Add(1)
				opts := []shop.Option{shop.WithWaitBudget(3 * time.Second)}
				died := errors.New("died")
				// The roles by invocation number; a role whose invocation never held a
				// stock lock (its orders decided by others) passes to the next ones until
				// it has happened once, so that both always do.
				stall := n%6 == 4 || (n > 4 && stalls.Load() == 0)
				crash := !stall && (n%6 == 1 || crashes.Load() == 0)
				switch {
				case crash: // dies holding its stock locks
					opts = append(opts, shop.WithCrashHook(func(p string) error {
						if p == shop.CrashStockLocked {
							crashes.Add(1)
							return died
						}
						return nil
					}))
				case stall: // stalls past its lease holding them, then writes
					opts = append(opts, shop.WithLockOptions(lockcore.WithHeartbeat(0)), shop.WithCrashHook(func(p string) error {
						if p == shop.CrashStockLocked {
							stalls.Add(1)
							time.Sleep(1300 * time.Millisecond)
						}
						return nil
					}))
				}
				svc := e.service(t, "inv-"+strconv.Itoa(int(n)), opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				res := svc.ProcessOrders(ctx, batch)
				cancel()
				var again []shop.Order
				for i, r := range res {
					switch {
					case r.Err == nil:
						if !r.Outcome.Status.Final() {
							t.Errorf("%s: outcome %+v without an error", batch[i].OrderID, r.Outcome)
						}
					case errors.Is(r.Err, died):
						again = append(again, batch[i])
					case errors.Is(r.Err, lockcore.ErrLeaseLost):
						leaseLost.Add(1)
						again = append(again, batch[i])
					case errors.Is(r.Err, shop.ErrBusy):
						again = append(again, batch[i])
					default:
						t.Errorf("%s: %v", batch[i].OrderID, r.Err)
					}
				}
				if len(again) > 0 {
					// SQS redelivers the failed messages of the batch.
					redone.Add(int32(len(again)))
					queue <- again
				} else {
					outstanding.Add(-1)
				}
			}
		}()
	}
	wg.Wait()
	if n := outstanding.Load(); n > 0 {
		t.Fatalf("%d batches still undecided after %s", n, 90*time.Second)
	}
	t.Logf("%d invocations: %d crashed, %d stalled past their lease; %d orders retried (%d after a lost lease)",
		invocation.Load(), crashes.Load(), stalls.Load(), redone.Load(), leaseLost.Load())
	if crashes.Load() == 0 || stalls.Load() == 0 {
		t.Errorf("crashes %d, stalls %d: want both to happen", crashes.Load(), stalls.Load())
	}

	check := e.service(t, "check")
	audit.mu.Lock()
	decisions, perTx, txOrders := audit.decisions, slices.Clone(audit.perTx), slices.Clone(audit.txOrders)
	audit.mu.Unlock()
	reserved := map[string]int{}
	for _, o := range all {
		got := decisions[o.OrderID]
		if len(got) != 1 {
			t.Errorf("order %s decided %d times (%v), want once", o.OrderID, len(got), got)
		}
		st, ok, err := check.OrderStatus(ctxT(t, 5*time.Second), o.OrderID)
		if err != nil || !ok || !st.Final() || len(got) > 0 && string(st) != got[0] {
			t.Errorf("order %s: status %q (%v, %v), decision written %v", o.OrderID, st, ok, err, got)
		}
		if st == shop.StatusReserved {
			for _, l := range o.Lines {
				reserved[l.SKU] += l.Qty
			}
		}
	}
	for _, sku := range skus {
		a, r, err := check.Stock(ctxT(t, 5*time.Second), sku)
		if err != nil {
			t.Fatal(err)
		}
		if a < 0 || a+r != initial || r != reserved[sku] {
			t.Errorf("%s: available %d, reserved %d; want %d in all and %d reserved (the RESERVED orders')", sku, a, r, initial, reserved[sku])
		}
		// A record may outlive its order's decision on an item the deciding holder did
		// not hold (a retried message recorded on another group's home): the item's next
		// holder finds the order decided and marks it. An undecided order must not stay.
		for _, id := range recordedOn(t, e, sku) {
			if len(decisions[id]) == 0 {
				t.Errorf("%s: undecided order %s still recorded", sku, id)
			} else {
				t.Logf("%s: record of the decided order %s left for the item's next holder", sku, id)
			}
		}
	}
	inOneBatch := func(ids []string) bool {
		return slices.ContainsFunc(batches, func(b []shop.Order) bool {
			return !slices.ContainsFunc(ids, func(id string) bool {
				return !slices.ContainsFunc(b, func(o shop.Order) bool { return o.OrderID == id })
			})
		})
	}
	combined, across := 0, 0
	for i, n := range perTx {
		if n > 1 {
			combined++
		}
		if !inOneBatch(txOrders[i]) {
			across++
		}
	}
	t.Logf("%d decision transactions, %d of them deciding more than one order (most %d), %d of them orders of several invocations",
		len(perTx), combined, slices.Max(perTx), across)
	if across == 0 {
		t.Errorf("no transaction decided orders of different invocations together")
	}
}

// Orders of several invocations waiting for one hot SKU are decided by its holder in
// one transaction: the holder pauses under the lock (after its locking read), five other
// invocations record their orders on the stock item and wait; the holder's locking read
// saw none of them, so it decides its own order alone — and the next holder (one of the
// waiters, once the item is free) decides all five in its one transaction. Each waiter
// learns its outcome from the item (a decision marker) or its order item.
func TestWaitersAreDecidedTogether(t *testing.T) {
	e := newEnv(t)
	audit := newDecisionAudit(e.t.Orders)
	e.db = audit.client(e.db)
	seed(t, e.service(t, "seeder"), map[string]int{"HOT": 8})
	paused, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := e.service(t, "first", shop.WithWaitBudget(5*time.Second), shop.WithCrashHook(func(p string) error {
		if p == shop.CrashStockLocked {
			once.Do(func() {
				close(paused)
				<-proceed
			})
		}
		return nil
	}))
	done := make(chan shop.BatchResult, 6)
	go func() {
		done <- first.ProcessOrders(ctxT(t, 10*time.Second), []shop.Order{{OrderID: "w-0", CustomerID: "c", Lines: []shop.Line{{SKU: "HOT", Qty: 2}}}})[0]
	}()
	<-paused
	for i := 1; i <= 5; i++ {
		svc := e.service(t, fmt.Sprintf("waiter-%d", i), shop.WithWaitBudget(5*time.Second))
		o := shop.Order{OrderID: fmt.Sprintf("w-%d", i), CustomerID: "c", Lines: []shop.Line{{SKU: "HOT", Qty: 2}}}
		go func() { done <- svc.ProcessOrders(ctxT(t, 10*time.Second), []shop.Order{o})[0] }()
	}
	// Every waiter has recorded its order on the stock item.
	for until := time.Now().Add(5 * time.Second); len(recordedOn(t, e, "HOT")) < 6; {
		if time.Now().After(until) {
			t.Fatalf("recorded: %v, want the holder's and the 5 waiters' orders", recordedOn(t, e, "HOT"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(proceed)
	statuses := map[shop.Status]int{}
	for i := 0; i < 6; i++ {
		r := <-done
		if r.Err != nil || !r.Outcome.Status.Final() {
			t.Fatalf("%s = %+v, %v", r.Outcome.OrderID, r.Outcome, r.Err)
		}
		statuses[r.Outcome.Status]++
	}
	// 8 units, 2 per order: four reserved (the oldest records first), two rejected.
	if statuses[shop.StatusReserved] != 4 || statuses[shop.StatusRejected] != 2 {
		t.Errorf("outcomes %v, want 4 RESERVED and 2 REJECTED", statuses)
	}
	wantStock(t, e.service(t, "check"), "HOT", 0, 8)
	audit.mu.Lock()
	defer audit.mu.Unlock()
	if !slices.Equal(audit.perTx, []int{1, 5}) {
		t.Errorf("decisions per transaction %v, want [1 5]: the holder's own, then the five waiters' together", audit.perTx)
	}
}
