package demo

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	janhandler "github.com/turnstile-locks/turnstile/functions/janitor/handler"
	"github.com/turnstile-locks/turnstile/internal/bench"
	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// meter counts the DynamoDB requests of one client (every attempt, as DynamoDB bills
// them), the capacity units the engine reports (ReturnConsumedCapacity TOTAL is set on
// every request that takes it; a conditional write refused by its condition is counted
// as the 1 WCU AWS bills, since the error carries no figure; a transaction as 2 WCU per
// item, see transactWCU), and feeds successful writes to an audit.
type meter struct {
	requests   atomic.Int64
	condFailed atomic.Int64
	txCanceled atomic.Int64
	capMilli   atomic.Int64
	audit      *audit

	opsMu  sync.Mutex
	ops    map[string]int64 // "Operation Table" -> requests (first attempts)
	opsCap map[string]int64 // "Operation Table" -> capacity units consumed, in thousandths
}

// countOp counts a request under "Operation Table" and returns that key.
func (m *meter) countOp(op string, params any) string {
	table := ""
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		table = deref(in.TableName)
	case *dynamodb.UpdateItemInput:
		table = deref(in.TableName)
		op += "/" + string(in.ReturnValues)
	case *dynamodb.PutItemInput:
		table = deref(in.TableName)
	case *dynamodb.DeleteItemInput:
		table = deref(in.TableName)
	}
	// demo-<run>-<LogicalId>-<suffix>: keep the logical id.
	if parts := strings.Split(table, "-"); len(parts) == 4 {
		table = parts[2]
	}
	key := strings.TrimSpace(op + " " + table)
	m.opsMu.Lock()
	defer m.opsMu.Unlock()
	if m.ops == nil {
		m.ops = map[string]int64{}
	}
	m.ops[key]++
	return key
}

// addCap adds capacity units (in thousandths) to the meter and to key's share.
func (m *meter) addCap(key string, milli int64) {
	m.capMilli.Add(milli)
	m.opsMu.Lock()
	defer m.opsMu.Unlock()
	if m.opsCap == nil {
		m.opsCap = map[string]int64{}
	}
	m.opsCap[key] += milli
}

// opCapacity returns the capacity units consumed by "Operation Table".
func (m *meter) opCapacity() map[string]float64 {
	m.opsMu.Lock()
	defer m.opsMu.Unlock()
	out := make(map[string]float64, len(m.opsCap))
	for k, v := range m.opsCap {
		out[k] = float64(v) / 1000
	}
	return out
}

func (m *meter) opCounts() map[string]int64 {
	m.opsMu.Lock()
	defer m.opsMu.Unlock()
	out := make(map[string]int64, len(m.ops))
	for k, v := range m.ops {
		out[k] = v
	}
	return out
}

func (m *meter) option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, m.install)
	}
}

func (m *meter) install(stack *middleware.Stack) error {
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("demoMeter",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
			middleware.InitializeOutput, middleware.Metadata, error,
		) {
			askCapacity(in.Parameters)
			key := m.countOp(awsmiddleware.GetOperationName(ctx), in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			var ccf *types.ConditionalCheckFailedException
			var tce *types.TransactionCanceledException
			switch {
			case errors.As(err, &ccf):
				m.condFailed.Add(1)
				m.addCap(key, 1000)
			case errors.As(err, &tce):
				m.txCanceled.Add(1)
				m.addCap(key, int64(math.Round(transactWCU(in.Parameters, nil)*1000)))
			case err == nil:
				units := capacityOf(out.Result)
				switch p := in.Parameters.(type) {
				case *dynamodb.TransactWriteItemsInput:
					units = transactWCU(in.Parameters, out.Result)
				case *dynamodb.BatchGetItemInput:
					r, _ := out.Result.(*dynamodb.BatchGetItemOutput)
					units = max(units, batchGetRCU(p, r))
				}
				m.addCap(key, int64(math.Round(units*1000)))
				if m.audit != nil {
					m.audit.observe(awsmiddleware.GetOperationName(ctx), in.Parameters)
				}
			}
			return out, md, err
		}), middleware.After); err != nil {
		return err
	}
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("demoMeterAttempts",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
			middleware.FinalizeOutput, middleware.Metadata, error,
		) {
			m.requests.Add(1)
			if c, ok := ctx.Value(attemptCallsKey{}).(*atomic.Int64); ok {
				c.Add(1)
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// batchGetRCU is what AWS bills for a BatchGetItem at least: every key it processed
// (requested and not returned unprocessed) as a read of up to 4 KB — 1 RCU strongly
// consistent, 0.5 eventually — also when no item has that key. DynamoDB Local reports
// only the items it found (0 for a missing key; checked against the engine: 10 found
// and 5 missing keys, strongly consistent, report 10), so the demo, whose batch reads
// ask for orders not stored yet, would under-count without this floor.
func batchGetRCU(in *dynamodb.BatchGetItemInput, out *dynamodb.BatchGetItemOutput) float64 {
	total := 0.0
	for table, ka := range in.RequestItems {
		n := len(ka.Keys)
		if out != nil {
			n -= len(out.UnprocessedKeys[table].Keys)
		}
		per := 0.5
		if ka.ConsistentRead != nil && *ka.ConsistentRead {
			per = 1
		}
		total += float64(n) * per
	}
	return total
}

// transactWCU is bench.TransactWCU for a request's parameters and result (0 for other
// operations).
func transactWCU(params, result any) float64 {
	in, ok := params.(*dynamodb.TransactWriteItemsInput)
	if !ok {
		return 0
	}
	out, _ := result.(*dynamodb.TransactWriteItemsOutput)
	return bench.TransactWCU(len(in.TransactItems), out, nil)
}

func (m *meter) capacity() float64 { return float64(m.capMilli.Load()) / 1000 }

func askCapacity(params any) {
	total := types.ReturnConsumedCapacityTotal
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.PutItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.UpdateItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.DeleteItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.QueryInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.ScanInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.TransactWriteItemsInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.TransactGetItemsInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.BatchGetItemInput:
		in.ReturnConsumedCapacity = total
	}
}

func capacityOf(result any) float64 {
	one := func(c *types.ConsumedCapacity) float64 {
		if c == nil || c.CapacityUnits == nil {
			return 0
		}
		return *c.CapacityUnits
	}
	many := func(cs []types.ConsumedCapacity) float64 {
		t := 0.0
		for i := range cs {
			t += one(&cs[i])
		}
		return t
	}
	switch out := result.(type) {
	case *dynamodb.GetItemOutput:
		return one(out.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		return one(out.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		return one(out.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		return one(out.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		return one(out.ConsumedCapacity)
	case *dynamodb.ScanOutput:
		return one(out.ConsumedCapacity)
	case *dynamodb.TransactWriteItemsOutput:
		return many(out.ConsumedCapacity)
	case *dynamodb.TransactGetItemsOutput:
		return many(out.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		return many(out.ConsumedCapacity)
	}
	return 0
}

// audit watches the successful writes of one run at the DynamoDB boundary, whatever code
// made them: every write that gives an order item a final status (a decision) and every
// write to a stock record. It is how the demo measures double processing in both runs
// with the same yardstick.
type audit struct {
	orders, inventory string

	mu          sync.Mutex
	decisions   map[string][]string  // order id -> statuses written, in order
	decidedAt   map[string]time.Time // order id -> when its first decision was written
	stockWrites map[string]int       // SKU -> successful writes to its stock record
	// unseen are orders the service reports decided although no call that wrote the
	// decision succeeded: the write landed, but its response was lost (a timeout) and the
	// retry was refused; the service re-read the order to find its own decision there.
	unseen map[string]bool
	// decisionWrites are the successful requests that wrote at least one decision,
	// decisionsWritten the decisions in them, maxPerWrite the most in one.
	decisionWrites, decisionsWritten, maxPerWrite int
}

func newAudit(orders, inventory string) *audit {
	return &audit{
		orders: orders, inventory: inventory,
		decisions: map[string][]string{}, decidedAt: map[string]time.Time{}, stockWrites: map[string]int{}, unseen: map[string]bool{},
	}
}

func (a *audit) observe(op string, params any) {
	decisions := 0 // order decisions this write carried
	switch in := params.(type) {
	case *dynamodb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			switch {
			case it.Update != nil:
				decisions += a.write(deref(it.Update.TableName), it.Update.Key, it.Update.ExpressionAttributeValues, nil)
			case it.Put != nil:
				decisions += a.write(deref(it.Put.TableName), it.Put.Item, nil, it.Put.Item)
			}
		}
	case *dynamodb.UpdateItemInput:
		decisions += a.write(deref(in.TableName), in.Key, in.ExpressionAttributeValues, nil)
	case *dynamodb.PutItemInput:
		decisions += a.write(deref(in.TableName), in.Item, nil, in.Item)
	}
	if decisions > 0 {
		a.mu.Lock()
		a.decisionWrites++
		a.decisionsWritten += decisions
		a.maxPerWrite = max(a.maxPerWrite, decisions)
		a.mu.Unlock()
	}
	_ = op
}

// write records one successful item write and returns 1 if it wrote an order's decision.
func (a *audit) write(table string, key, values, item map[string]types.AttributeValue) int {
	switch table {
	case a.orders:
		id := sAttr(key, "orderId")
		status := ""
		if item != nil {
			status = sAttr(item, "status")
		}
		for _, v := range values {
			if s, ok := v.(*types.AttributeValueMemberS); ok && (s.Value == "RESERVED" || s.Value == "REJECTED") {
				status = s.Value
			}
		}
		if id != "" && (status == "RESERVED" || status == "REJECTED") {
			a.mu.Lock()
			a.decisions[id] = append(a.decisions[id], status)
			if _, ok := a.decidedAt[id]; !ok {
				a.decidedAt[id] = time.Now()
			}
			a.mu.Unlock()
			return 1
		}
	case a.inventory:
		if sAttr(key, "sk") != "STOCK" {
			return 0
		}
		sku := strings.TrimPrefix(sAttr(key, "pk"), "SKU#")
		a.mu.Lock()
		a.stockWrites[sku]++
		a.mu.Unlock()
	}
	return 0
}

// decisionWriteStats says how many orders each decision write covered: writes is the
// number of successful requests (a PutItem, an UpdateItem, a TransactWriteItems) that
// wrote at least one order's decision, perWrite the decisions they wrote divided by
// writes (0 for none), maxPerWrite the most in one request. The service decides a
// batch's group of orders in one transaction; the naive and optimistic code write one
// order per request.
func (a *audit) decisionWriteStats() (writes int, perWrite float64, maxPerWrite int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.decisionWrites == 0 {
		return 0, 0, 0
	}
	return a.decisionWrites, float64(a.decisionsWritten) / float64(a.decisionWrites), a.maxPerWrite
}

func (a *audit) snapshot() (decisions map[string][]string, stockWrites map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	decisions = make(map[string][]string, len(a.decisions))
	for k, v := range a.decisions {
		decisions[k] = append([]string(nil), v...)
	}
	stockWrites = make(map[string]int, len(a.stockWrites))
	for k, v := range a.stockWrites {
		stockWrites[k] = v
	}
	return decisions, stockWrites
}

// decided counts the orders decided so far.
func (a *audit) decided() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.decisions)
	for id := range a.unseen {
		if len(a.decisions[id]) == 0 {
			n++
		}
	}
	return n
}

func (a *audit) writes(orderID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.decisions[orderID])
}

// decidedUnseen records that the service decided orderID with a write the audit did not
// see succeed.
func (a *audit) decidedUnseen(orderID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unseen[orderID] = true
	if _, ok := a.decidedAt[orderID]; !ok {
		a.decidedAt[orderID] = time.Now()
	}
}

// decisionTimes returns when each order was first decided.
func (a *audit) decisionTimes() map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]time.Time, len(a.decidedAt))
	for k, v := range a.decidedAt {
		out[k] = v
	}
	return out
}

// unseenCount counts the orders the service reported decided whose decision no
// successful call was seen to write. An order reported before the write was seen — a
// waiter that read its decision, written by another invocation's holder, before that
// holder's call returned — is not one.
func (a *audit) unseenCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for id := range a.unseen {
		if len(a.decisions[id]) == 0 {
			n++
		}
	}
	return n
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sAttr(it map[string]types.AttributeValue, k string) string {
	if v, ok := it[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// collector receives the metrics the handlers and the service emit (the figures their
// EMF documents would carry to CloudWatch) and keeps them for the report. It satisfies
// every handler package's Metrics interface.
type collector struct {
	mu      sync.Mutex
	sums    map[string]float64
	samples map[string][]float64
}

func newCollector() *collector {
	return &collector{sums: map[string]float64{}, samples: map[string][]float64{}}
}

// PutMetric records one value.
func (c *collector) PutMetric(name string, value float64, unit emf.Unit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sums[name] += value
	if unit == emf.Milliseconds {
		c.samples[name] = append(c.samples[name], value)
	}
}

// Flush is a no-op: the values were recorded as they came.
func (c *collector) Flush() error { return nil }

func (c *collector) sum(name string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sums[name]
}

func (c *collector) percentile(name string, p float64) float64 {
	c.mu.Lock()
	s := append([]float64(nil), c.samples[name]...)
	c.mu.Unlock()
	return percentile(s, p)
}

// percentile returns the p-th percentile (nearest rank) of s, 0 for no samples.
func percentile(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	sort.Float64s(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// takeoverDetector finds lease takeovers in the lock table's stream. The stream carries
// old images only, so a write is known for what it was by the next record of the same
// row: a MODIFY of a held lease followed by a record whose old image holds a different
// lease id was a takeover (a renewal keeps the lease id, a release leaves the row
// released).
type takeoverDetector struct {
	mu        sync.Mutex
	pending   map[string]string // row key -> lease id of a held lease last MODIFYed
	takeovers int
	// ttlLeases is called with the lease id of every held lease removed by TTL.
	ttlLeases func(leaseID string)
}

func newTakeoverDetector() *takeoverDetector {
	return &takeoverDetector{pending: map[string]string{}}
}

func (d *takeoverDetector) observe(rec map[string]any) {
	ch, _ := rec["dynamodb"].(map[string]any)
	keys, _ := json.Marshal(ch["Keys"])
	key := string(keys)
	old, _ := ch["OldImage"].(map[string]any)
	held, lease := heldIn(old)
	name, _ := rec["eventName"].(string)
	_, byService := rec["userIdentity"]

	d.mu.Lock()
	defer d.mu.Unlock()
	if prev, ok := d.pending[key]; ok && old != nil {
		// The write after the one that left a lease held replaced it: by another lease
		// (the previous Mutex format), or by skipping its ticket (the ticket format; a
		// release hands the lock on without skipping).
		if imgS(old, "state") == "held" && held && lease != prev ||
			imgS(old, "state") == "fair" && imgN(old, "skip") != "" && "ticket "+imgN(old, "skip") == prev {
			d.takeovers++
		}
		delete(d.pending, key)
	}
	switch name {
	case "MODIFY":
		if held && imgS(old, "state") == "fair" {
			d.pending[key] = "ticket " + imgN(old, "serving")
		} else if held {
			d.pending[key] = lease
		}
	case "REMOVE":
		delete(d.pending, key)
		if byService && held && d.ttlLeases != nil {
			d.ttlLeases(lease)
		}
	case "INSERT":
		delete(d.pending, key)
	}
}

func (d *takeoverDetector) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.takeovers
}

// heldIn decodes a stream image (as JSON) with the janitor's decoder: whether it records
// a held lease, and its lease id.
func heldIn(img map[string]any) (bool, string) {
	if img == nil {
		return false, ""
	}
	b, err := json.Marshal(img)
	if err != nil {
		return false, ""
	}
	var ev map[string]events.DynamoDBAttributeValue
	if json.Unmarshal(b, &ev) != nil {
		return false, ""
	}
	l, ok := janhandler.HeldLease(ev)
	return ok, l.LeaseID
}

func imgN(img map[string]any, k string) string {
	v, _ := img[k].(map[string]any)
	s, _ := v["N"].(string)
	return s
}

func imgS(img map[string]any, k string) string {
	v, _ := img[k].(map[string]any)
	s, _ := v["S"].(string)
	return s
}

// attemptCallsKey marks a context whose DynamoDB requests are counted for one attempt at
// an order (see countingProcessor).
type attemptCallsKey struct{}

// countingProcessor wraps the service the order processor's handler calls, to attribute
// DynamoDB requests to the outcome of each attempt at an order: the attempt that decided
// it, a duplicate delivery, an attempt that lost to contention and was retried, a crash.
type countingProcessor struct {
	svc   *shop.Service
	stats *attemptStats
	audit *audit
}

func (p countingProcessor) ProcessOrder(ctx context.Context, o shop.Order) (shop.Outcome, error) {
	var n atomic.Int64
	before := p.audit.writes(o.OrderID)
	out, err := p.svc.ProcessOrder(context.WithValue(ctx, attemptCallsKey{}, &n), o)
	if err == nil && !out.Duplicate && p.audit.writes(o.OrderID) == before {
		p.audit.decidedUnseen(o.OrderID)
	}
	kind := "other"
	switch {
	case err == nil && out.Duplicate:
		kind = "duplicate"
	case err == nil:
		kind = "decided"
	case errors.Is(err, errHolderDied):
		kind = "crashed"
	case errors.Is(err, shop.ErrBusy):
		kind = "contended"
	case errors.Is(err, lockcore.ErrLeaseLost):
		kind = "lease_lost"
	}
	p.stats.add(kind, n.Load())
	return out, err
}

type attemptStats struct {
	mu       sync.Mutex
	attempts map[string]int
	calls    map[string]int64
}

func newAttemptStats() *attemptStats {
	return &attemptStats{attempts: map[string]int{}, calls: map[string]int64{}}
}

func (a *attemptStats) add(kind string, calls int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attempts[kind]++
	a.calls[kind] += calls
}

func (a *attemptStats) snapshot() (attempts map[string]int, calls map[string]int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	attempts, calls = map[string]int{}, map[string]int64{}
	for k, v := range a.attempts {
		attempts[k] = v
	}
	for k, v := range a.calls {
		calls[k] = v
	}
	return attempts, calls
}

// ProcessOrders passes a batch to the service (the handler decides batches together when
// its processor can) and attributes the batch's DynamoDB requests evenly to its orders'
// attempts, the remainder of the division one each to the first ones, so that the
// attempts' calls add up to the batch's. (Even: a duplicate copy in a batch is charged
// its share of the batch's shared requests, the SKU locks and stock reads, too.)
func (p countingProcessor) ProcessOrders(ctx context.Context, orders []shop.Order) []shop.BatchResult {
	var n atomic.Int64
	before := make([]int, len(orders))
	for i, o := range orders {
		before[i] = p.audit.writes(o.OrderID)
	}
	res := p.svc.ProcessOrders(context.WithValue(ctx, attemptCallsKey{}, &n), orders)
	shares := splitCalls(n.Load(), len(res))
	for i, r := range res {
		out, err := r.Outcome, r.Err
		if err == nil && !out.Duplicate && p.audit.writes(orders[i].OrderID) == before[i] {
			p.audit.decidedUnseen(orders[i].OrderID)
		}
		p.stats.add(attemptKind(out, err), shares[i])
	}
	return res
}

// splitCalls divides n calls among k attempts as evenly as whole calls allow: the
// remainder one each to the first ones, so that the shares add up to n.
func splitCalls(n int64, k int) []int64 {
	out := make([]int64, k)
	if k == 0 {
		return out
	}
	share, rem := n/int64(k), n%int64(k)
	for i := range out {
		out[i] = share
		if int64(i) < rem {
			out[i]++
		}
	}
	return out
}

func attemptKind(out shop.Outcome, err error) string {
	switch {
	case err == nil && out.Duplicate:
		return "duplicate"
	case err == nil:
		return "decided"
	case errors.Is(err, errHolderDied):
		return "crashed"
	case errors.Is(err, shop.ErrBusy):
		return "contended"
	case errors.Is(err, lockcore.ErrLeaseLost):
		return "lease_lost"
	}
	return "other"
}

// holdTimes times the critical section of one SKU's lock: for every acquisition, the
// time from the acquisition to its release. Acquisitions are counted from lockcore's
// events (see shop.WithLockObserver) of key; releases come from lockcore's Released
// events (lockcore.LeaseEvent.Held: from the acquiring write's answer to the releasing
// write's, so the release's round trip is in it) for the legacy mode's lock-table SKU
// locks, and from the service's hold events (shop.WithHoldObserver: from the locking
// read's answer to the decision transaction's) for the stock items it locks. The demo
// installs it on the order processor's services for the run's hottest SKU.
type holdTimes struct {
	key string
	sku string

	mu       sync.Mutex
	acquired int
	lost     int
	held     []float64 // ms, one per clean release
}

func newHoldTimes(key, sku string) *holdTimes { return &holdTimes{key: key, sku: sku} }

// holdObserver returns the service hold observer that feeds h.
func (h *holdTimes) holdObserver() func(context.Context, shop.HoldEvent) {
	return func(_ context.Context, e shop.HoldEvent) {
		if e.SKU != h.sku {
			return
		}
		if e.Lost {
			h.mu.Lock()
			h.lost++
			h.mu.Unlock()
			return
		}
		h.add(e.Held)
	}
}

// observer returns the lock observer that feeds h.
func (h *holdTimes) observer() lockcore.Observer {
	return lockcore.Observer{
		Acquired: func(_ context.Context, e lockcore.AcquireEvent) {
			if e.Key == h.key {
				h.mu.Lock()
				h.acquired++
				h.mu.Unlock()
			}
		},
		Released: func(_ context.Context, e lockcore.LeaseEvent) {
			if e.Key == h.key {
				h.add(e.Held)
			}
		},
		LeaseLost: func(_ context.Context, e lockcore.LeaseEvent) {
			if e.Key == h.key {
				h.mu.Lock()
				h.lost++
				h.mu.Unlock()
			}
		},
	}
}

func (h *holdTimes) add(held time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, float64(held.Microseconds())/1000)
}

// stats summarises the holds: count, mean, p50, p99 and max (ms) of the released ones.
func (h *holdTimes) stats(sku string, orders int) *HoldStats {
	h.mu.Lock()
	held := append([]float64(nil), h.held...)
	st := &HoldStats{SKU: sku, Orders: orders, Acquisitions: h.acquired, Released: len(held), LeasesLost: h.lost}
	h.mu.Unlock()
	if len(held) == 0 {
		return st
	}
	sum := 0.0
	for _, v := range held {
		sum += v
	}
	st.MeanMs = round1(sum / float64(len(held)))
	st.P50Ms = round1(percentile(held, 50))
	st.P99Ms = round1(percentile(held, 99))
	st.MaxMs = round1(percentile(held, 100))
	return st
}
