package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	ophandler "github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/ctxtime"
	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

// optimisticStore is the design a user would pick instead of locks: optimistic
// concurrency control. It keeps the same items as the naive code (orders with a status,
// stock records with available, reserved and a version ver, applied-adjustment markers)
// and takes no lock. Per order it reads the order and its stock records (strongly
// consistent, one BatchGetItem), decides, and writes the decision conditioned on what it
// read:
//
//   - a reservation is one TransactWriteItems: each stock record set to the figures
//     computed from the read and ver+1, conditioned on ver being the version read, and
//     the order item put with its status, conditioned on the order not being decided;
//   - a rejection changes no stock: one PutItem of the order item with the same
//     condition (the rejection holds for the stock as read, like any decision made at
//     that moment).
//
// When a stock condition fails (another order or an adjustment wrote the record since
// the read) or the transaction conflicts with a concurrent one, it reads again and
// retries, after a backoff with full jitter, at most attempts times per delivery; then
// the message goes back to SQS in batchItemFailures (with the visibility shortened as the
// real handler does for contention). When the order's condition fails it was decided by
// another copy: a duplicate, done. So no order is decided twice and no stock is sold
// twice; the price is the retries, and the orders that run out of them wait for a
// redelivery.
//
// It exists only to be measured beside the turnstile service and the naive code.
type optimisticStore struct {
	db        *dynamodb.Client
	orders    string
	inventory string
	crash     func(point string) error
	stats     *optimisticStats
	// attempts bounds the attempts per delivery; backoff and backoffCap bound the jittered
	// sleep before each retry (full jitter: uniform in [0, min(cap, backoff·2^(n-1)))).
	attempts            int
	backoff, backoffCap time.Duration
	// beforeWrite, when set, is called between an attempt's read and its write (tests).
	beforeWrite func(orderID string)
}

// Defaults of the optimistic code: 8 attempts per delivery, retried after up to 25, 50,
// 100, ... 400 ms.
const (
	optimisticAttempts   = 8
	optimisticBackoff    = 25 * time.Millisecond
	optimisticBackoffCap = 400 * time.Millisecond
)

// errConflicts: the order's writes kept losing to concurrent ones until the attempts ran
// out; nothing of it was written, and its message goes back to SQS.
var errConflicts = errors.New("optimistic: write conflicts, attempts exhausted")

// optimisticStats counts the optimistic run's attempts at orders.
type optimisticStats struct {
	attempts, conflicts, exhausted, decided, duplicates, failed atomic.Int64
}

func (o *optimisticStats) stats(orders int) *ConflictStats {
	st := &ConflictStats{
		Attempts: int(o.attempts.Load()), Retries: int(o.conflicts.Load()), Exhausted: int(o.exhausted.Load()),
		Decided: int(o.decided.Load()), Duplicates: int(o.duplicates.Load()), Failed: int(o.failed.Load()),
	}
	if orders > 0 {
		st.RetriesPerOrder = round2(float64(st.Retries) / float64(orders))
	}
	return st
}

type optStock struct {
	available, reserved, ver int64
	exists                   bool
}

func optStockKey(sku string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s("SKU#" + sku), "sk": s("STOCK")}
}

// read reads the order item (nil when absent) and the stock records of skus, strongly
// consistent, in one BatchGetItem (again for keys returned unprocessed).
func (st *optimisticStore) read(ctx context.Context, orderID string, skus []string) (map[string]types.AttributeValue, map[string]optStock, error) {
	req := map[string]types.KeysAndAttributes{}
	if orderID != "" {
		req[st.orders] = types.KeysAndAttributes{
			Keys: []map[string]types.AttributeValue{{"orderId": s(orderID)}}, ConsistentRead: aws.Bool(true),
		}
	}
	keys := make([]map[string]types.AttributeValue, len(skus))
	for i, sku := range skus {
		keys[i] = optStockKey(sku)
	}
	req[st.inventory] = types.KeysAndAttributes{Keys: keys, ConsistentRead: aws.Bool(true)}
	var order map[string]types.AttributeValue
	stock := make(map[string]optStock, len(skus))
	for attempt := 0; len(req) > 0; attempt++ {
		if attempt == 8 {
			return nil, nil, errors.New("optimistic: keys still unprocessed after 8 reads")
		}
		out, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, nil, err
		}
		if items := out.Responses[st.orders]; len(items) > 0 {
			order = items[0]
		}
		for _, it := range out.Responses[st.inventory] {
			stock[strings.TrimPrefix(sAttr(it, "pk"), "SKU#")] = optStock{
				available: nAttr(it, "available"), reserved: nAttr(it, "reserved"), ver: nAttr(it, "ver"), exists: true,
			}
		}
		req = out.UnprocessedKeys
	}
	return order, stock, nil
}

// versionCondition: the record is as read — its version unchanged, or still absent.
func versionCondition(sk optStock) expression.ConditionBuilder {
	if !sk.exists {
		return expression.AttributeNotExists(expression.Name("pk"))
	}
	return expression.Equal(expression.Name("ver"), expression.Value(sk.ver))
}

// undecided: the order item is absent or not RESERVED or REJECTED.
func undecided() expression.ConditionBuilder {
	status := expression.Name("status")
	return expression.AttributeNotExists(expression.Name("orderId")).Or(
		expression.Not(status.In(expression.Value(string(shop.StatusReserved)), expression.Value(string(shop.StatusRejected)))))
}

func mustBuild(b expression.Builder) expression.Expression {
	e, err := b.Build()
	if err != nil {
		panic(fmt.Sprintf("optimistic: building expression: %v", err)) // static expressions: a bug
	}
	return e
}

func (st *optimisticStore) orderItem(o shop.Order, status shop.Status, reason string) map[string]types.AttributeValue {
	lines := make([]types.AttributeValue, len(o.Lines))
	for i, l := range o.Lines {
		lines[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"sku": s(l.SKU), "qty": nv(int64(l.Qty))}}
	}
	item := map[string]types.AttributeValue{
		"orderId": s(o.OrderID), "customerId": s(o.CustomerID), "status": s(string(status)),
		"lines": &types.AttributeValueMemberL{Value: lines},
	}
	if reason != "" {
		item["reason"] = s(reason)
	}
	return item
}

// sleepBackoff sleeps before retry n (1, 2, ...): full jitter below min(cap, base·2^(n-1)).
func (st *optimisticStore) sleepBackoff(ctx context.Context, n int) error {
	d := st.backoff
	for i := 1; i < n && d < st.backoffCap; i++ {
		d *= 2
	}
	d = min(d, st.backoffCap)
	if d > 0 {
		d = time.Duration(rand.Int64N(int64(d)))
	}
	return ctxtime.Sleep(ctx, d)
}

// processOrder decides o (see optimisticStore). A nil error means decided, now or before.
func (st *optimisticStore) processOrder(ctx context.Context, o shop.Order) error {
	skus := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		skus[i] = l.SKU
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if err := st.sleepBackoff(ctx, attempt-1); err != nil {
				return err
			}
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < shop.MinRemaining {
			st.stats.exhausted.Add(1)
			return fmt.Errorf("optimistic: order %s: too little time left: %w", o.OrderID, errConflicts)
		}
		st.stats.attempts.Add(1)
		order, stock, err := st.read(ctx, o.OrderID, skus)
		if err != nil {
			st.stats.failed.Add(1)
			return err
		}
		if status := shop.Status(sAttr(order, "status")); status.Final() {
			st.stats.duplicates.Add(1)
			return nil
		}
		if st.crash != nil {
			if err := st.crash(shop.CrashStockLocked); err != nil {
				st.stats.failed.Add(1)
				return err
			}
		}
		if st.beforeWrite != nil {
			st.beforeWrite(o.OrderID)
		}
		var short []string
		for _, l := range o.Lines {
			if stock[l.SKU].available < int64(l.Qty) {
				short = append(short, l.SKU)
			}
		}
		conflict, dup, err := st.write(ctx, o, stock, short)
		switch {
		case err != nil:
			st.stats.failed.Add(1)
			return err
		case dup:
			st.stats.duplicates.Add(1)
			return nil
		case !conflict:
			st.stats.decided.Add(1)
			return nil
		}
		st.stats.conflicts.Add(1)
		if attempt >= st.attempts {
			st.stats.exhausted.Add(1)
			return fmt.Errorf("optimistic: order %s: %w after %d attempts", o.OrderID, errConflicts, attempt)
		}
	}
}

// write writes one attempt's decision. conflict: a stock record changed since the read,
// or the transaction conflicted with a concurrent one (retry); dup: the order was
// decided meanwhile.
func (st *optimisticStore) write(ctx context.Context, o shop.Order, stock map[string]optStock, short []string) (conflict, dup bool, err error) {
	if len(short) > 0 {
		e := mustBuild(expression.NewBuilder().WithCondition(undecided()))
		_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:           aws.String(st.orders),
			Item:                st.orderItem(o, shop.StatusRejected, "insufficient stock: "+strings.Join(short, ", ")),
			ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return false, true, nil
		}
		return false, false, err
	}
	items := make([]types.TransactWriteItem, 0, len(o.Lines)+1)
	for _, l := range o.Lines {
		sk := stock[l.SKU]
		e := mustBuild(expression.NewBuilder().WithCondition(versionCondition(sk)).WithUpdate(
			expression.Set(expression.Name("available"), expression.Value(sk.available-int64(l.Qty))).
				Set(expression.Name("reserved"), expression.Value(sk.reserved+int64(l.Qty))).
				Set(expression.Name("ver"), expression.Value(sk.ver+1))))
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(st.inventory), Key: optStockKey(l.SKU),
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		}})
	}
	e := mustBuild(expression.NewBuilder().WithCondition(undecided()))
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(st.orders), Item: st.orderItem(o, shop.StatusReserved, ""),
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}})
	_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return false, false, nil
	}
	return cancelled(err, len(items)-1)
}

// cancelled classifies a failed transaction whose item last is the order's (or a
// marker's) put: its condition failed — decided before (dup); another item's condition
// failed or a concurrent transaction conflicted — retry (conflict); anything else is an
// error.
func cancelled(err error, last int) (conflict, dup bool, _ error) {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		var tc *types.TransactionConflictException
		if errors.As(err, &tc) {
			return true, false, nil
		}
		return false, false, err
	}
	for i, r := range tce.CancellationReasons {
		code := aws.ToString(r.Code)
		switch {
		case i == last && code == "ConditionalCheckFailed":
			return false, true, nil
		case code == "ConditionalCheckFailed" || code == "TransactionConflict":
			conflict = true
		}
	}
	if conflict {
		return true, false, nil
	}
	return false, false, err // throttling, validation, ...: not a conflict
}

// applyAdjustment: read the marker and the stock; if the marker exists the adjustment
// was applied (or rejected) before. Else write the stock and the marker in one
// transaction conditioned on the stock's version and the marker's absence, retried on
// conflict like an order; an adjustment that would make stock negative is recorded as
// rejected (a marker with outcome REJECTED, as the service records it) and not applied.
func (st *optimisticStore) applyAdjustment(ctx context.Context, a shop.Adjustment) error {
	mk := map[string]types.AttributeValue{"pk": s("SKU#" + a.SKU), "sk": s("ADJ#" + a.AdjustmentID)}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if err := st.sleepBackoff(ctx, attempt-1); err != nil {
				return err
			}
		}
		out, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			st.inventory: {Keys: []map[string]types.AttributeValue{mk, optStockKey(a.SKU)}, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			return err
		}
		if len(out.UnprocessedKeys) > 0 { // throttled: read again
			if attempt >= st.attempts {
				return fmt.Errorf("optimistic: adjustment %s: keys still unprocessed after %d reads", a.AdjustmentID, attempt)
			}
			continue
		}
		var sk optStock
		for _, it := range out.Responses[st.inventory] {
			if sAttr(it, "sk") != "STOCK" {
				return nil // the marker: decided before
			}
			sk = optStock{available: nAttr(it, "available"), reserved: nAttr(it, "reserved"), ver: nAttr(it, "ver"), exists: true}
		}
		marker := map[string]types.AttributeValue{
			"pk": mk["pk"], "sk": mk["sk"], "adjustmentId": s(a.AdjustmentID), "delta": nv(int64(a.Delta)),
		}
		absent := mustBuild(expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))))
		if sk.available+int64(a.Delta) < 0 {
			marker["outcome"] = s(shop.OutcomeRejected)
			_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(st.inventory), Item: marker,
				ConditionExpression: absent.Condition(), ExpressionAttributeNames: absent.Names(),
			})
			var ccf *types.ConditionalCheckFailedException
			if errors.As(err, &ccf) {
				return nil
			}
			return err
		}
		e := mustBuild(expression.NewBuilder().WithCondition(versionCondition(sk)).WithUpdate(
			expression.Set(expression.Name("available"), expression.Value(sk.available+int64(a.Delta))).
				Set(expression.Name("reserved"), expression.Value(sk.reserved)).
				Set(expression.Name("ver"), expression.Value(sk.ver+1))))
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName: aws.String(st.inventory), Key: optStockKey(a.SKU),
				UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
				ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
			}},
			{Put: &types.Put{
				TableName: aws.String(st.inventory), Item: marker,
				ConditionExpression: absent.Condition(), ExpressionAttributeNames: absent.Names(),
			}},
		}})
		if err == nil {
			return nil
		}
		conflict, dup, err := cancelled(err, 1)
		switch {
		case err != nil:
			return err
		case dup:
			return nil
		case conflict && attempt >= st.attempts:
			return fmt.Errorf("optimistic: adjustment %s: %w after %d attempts", a.AdjustmentID, errConflicts, attempt)
		}
	}
}

// optimisticOrderHandler has the order processor's handler shape: the orders of a batch
// one by one, like the naive handler; an order still conflicting after its attempts goes
// back to SQS in batchItemFailures with its visibility shortened as the real handler
// shortens a contended message's (ophandler.RetryDelay); a malformed one comes back soon
// on its way to the dead-letter queue.
type optimisticOrderHandler struct {
	st              *optimisticStore
	q               *queue
	retryBase, rCap time.Duration
}

func (h optimisticOrderHandler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	for _, m := range ev.Records {
		o, err := shop.DecodeOrder([]byte(m.Body))
		malformed := err != nil
		if err == nil {
			err = h.st.processOrder(ctx, o)
		}
		if err == nil {
			continue
		}
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		if h.q == nil || !malformed && !errors.Is(err, errConflicts) {
			continue // back after the visibility timeout
		}
		delay := h.retryBase
		if !malformed {
			n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			delay = ophandler.RetryDelay(max(n, 1), h.retryBase, h.rCap, rand.Int64N)
		}
		_, _ = h.q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(h.q.url()), ReceiptHandle: aws.String(m.ReceiptHandle),
			VisibilityTimeout: int32(delay / time.Second),
		})
	}
	return resp, nil
}

// optimisticAdjustmentHandler has the inventory updater's handler shape.
type optimisticAdjustmentHandler struct{ st *optimisticStore }

func (h optimisticAdjustmentHandler) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	if ev.DetailType != "StockAdjusted" {
		return errors.New("optimistic: unexpected detail-type")
	}
	a, err := shop.DecodeAdjustment(ev.Detail)
	if err != nil {
		return err
	}
	return h.st.applyAdjustment(ctx, a)
}

// runOptimistic runs the workload through the optimistic code (optimisticStore) on fresh
// tables, with the same harness, queue, crashes and metering as the naive run.
func (d *demo) runOptimistic(ctx context.Context) (*runResult, error) {
	set := d.set
	ts, cleanup, err := d.createTables(ctx, "optimistic")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	orders, inventory := ts.names["OrdersTable"], ts.names["InventoryTable"]
	aud := newAudit(orders, inventory)
	m := &meter{audit: aud}
	client, err := ddblocal.NewClient(ctx, d.cfg.Endpoint, m.option())
	if err != nil {
		return nil, err
	}
	seed := &naiveStore{db: d.db, orders: orders, inventory: inventory} // ver 0, uncounted
	for _, sku := range d.w.skus() {
		if err := seed.seed(ctx, sku, d.w.initial[sku]); err != nil {
			return nil, fmt.Errorf("seed %s: %w", sku, err)
		}
	}
	stats := &optimisticStats{}
	store := func() *optimisticStore {
		return &optimisticStore{
			db: client, orders: orders, inventory: inventory, stats: stats,
			attempts: optimisticAttempts, backoff: optimisticBackoff, backoffCap: optimisticBackoffCap,
		}
	}
	d.prog.say("")
	d.prog.say("optimistic: the same workload without locks: version-conditioned writes, retried on conflict (internal/demo/optimistic.go)")
	q := newQueue("optimistic-demo-orders", region, set.visibility, set.maxReceive)
	crashes := newCrashPlan(d.cfg.Crashes)
	mapping := &sqsMapping{
		q: q, function: "OptimisticOrderProcessor", concurrency: d.cfg.Concurrency, batchSize: 10,
		window: set.batchWindow, timeout: set.invokeTimeout,
		newEnv: func(doomed bool) environment {
			var died atomic.Bool
			st := store()
			if doomed {
				st.crash = func(point string) error {
					if point == shop.CrashStockLocked && died.CompareAndSwap(false, true) {
						return errHolderDied
					}
					return nil
				}
			}
			return environment{h: optimisticOrderHandler{st: st, q: q, retryBase: set.retryBase, rCap: set.retryCap}, crashed: died.Load}
		},
	}
	mapping.doomed = func(_ environment, died bool, _ string) {
		if died {
			crashes.crashed(nil, false)
		} else {
			crashes.survived()
		}
	}
	inv := &asyncInvoker{
		function: "OptimisticInventoryUpdater", concurrency: 4, retries: set.asyncRetries,
		retryDelay: set.asyncDelay, timeout: set.invokeTimeout,
		newHandler: func() eventHandler { return optimisticAdjustmentHandler{store()} },
	}
	res, err := d.drive(ctx, "optimistic", q, mapping, inv, aud, nil, func() (string, bool) {
		happened, _, _, _ := crashes.state()
		return fmt.Sprintf("crashes %d/%d · conflict retries %d", happened, d.cfg.Crashes, stats.conflicts.Load()), true
	})
	if err != nil {
		return nil, err
	}
	res.crashes, res.opt = crashes, stats
	res.calls = map[string]int64{"optimistic": m.requests.Load()}
	res.capacity = m.capacity()
	res.ops, res.opsCap = map[string]int64{}, map[string]float64{}
	for k, v := range m.opCounts() {
		res.ops["optimistic "+k] = v
	}
	for k, v := range m.opCapacity() {
		res.opsCap["optimistic "+k] = v
	}
	fs, err := readFinalState(ctx, d.db, orders, inventory)
	if err != nil {
		return nil, err
	}
	res.out = measure(d.w, fs, aud, true)
	return res, nil
}
