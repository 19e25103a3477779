package bench

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Counters accumulates DynamoDB calls and capacity units. Capacity is kept in
// thousandths of a unit so that it can be added atomically.
type Counters struct {
	ops       [numOps]atomic.Int64 // calls by operation
	opFails   [numOps]atomic.Int64 // condition failures by operation
	slowNanos atomic.Int64         // the slowest call
	slow      atomic.Int64         // calls slower than SlowCall
	calls     atomic.Int64
	condFails atomic.Int64
	wcuMilli  atomic.Int64
	rcuMilli  atomic.Int64
}

// Operations, for the per-operation breakdown.
const (
	opGet = iota
	opQuery
	opPut
	opUpdate
	opDelete
	opTransact
	numOps
)

var opNames = [numOps]string{"GetItem", "Query", "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}

// ByOp returns the calls per operation ("UpdateItem": 12, "UpdateItem failed": 3, ...).
func (c *Counters) ByOp() map[string]int64 {
	m := map[string]int64{}
	for i := range numOps {
		if n := c.ops[i].Load(); n > 0 {
			m[opNames[i]] = n
		}
		if n := c.opFails[i].Load(); n > 0 {
			m[opNames[i]+" failed"] = n
		}
	}
	return m
}

// SlowCall is the latency above which a call counts as slow: far above any RTT the
// bench sets, it marks a stall of the engine, the proxy or the machine.
const SlowCall = 500 * time.Millisecond

func (c *Counters) observe(d time.Duration) {
	if d > SlowCall {
		c.slow.Add(1)
	}
	for {
		cur := c.slowNanos.Load()
		if int64(d) <= cur || c.slowNanos.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// Slowest returns the slowest call's latency and how many calls took longer than SlowCall.
func (c *Counters) Slowest() (time.Duration, int64) {
	return time.Duration(c.slowNanos.Load()), c.slow.Load()
}

// Usage is a snapshot of Counters.
type Usage struct {
	Calls     int64   // requests sent (SDK-level retries count once)
	CondFails int64   // conditional writes and transactions refused by their condition
	WCU       float64 // write capacity units
	RCU       float64 // read capacity units
}

// Snapshot reads the counters.
func (c *Counters) Snapshot() Usage {
	return Usage{
		Calls:     c.calls.Load(),
		CondFails: c.condFails.Load(),
		WCU:       float64(c.wcuMilli.Load()) / 1000,
		RCU:       float64(c.rcuMilli.Load()) / 1000,
	}
}

// Sub returns u − v.
func (u Usage) Sub(v Usage) Usage {
	return Usage{Calls: u.Calls - v.Calls, CondFails: u.CondFails - v.CondFails, WCU: u.WCU - v.WCU, RCU: u.RCU - v.RCU}
}

// LockCU is the on-demand price of the usage in write units: WCU + RCU/5 (a read
// request unit costs a fifth of a write request unit).
func (u Usage) LockCU() float64 { return u.WCU + u.RCU/5 }

func (c *Counters) add(wcu, rcu float64) {
	c.wcuMilli.Add(int64(math.Round(wcu * 1000)))
	c.rcuMilli.Add(int64(math.Round(rcu * 1000)))
}

// CountingDB wraps a lockcore.DynamoDB and counts calls and capacity units.
//
// Capacity follows the DynamoDB pricing rules and uses what the engine reports where it
// can (ReturnConsumedCapacity TOTAL is set on every request):
//   - a successful single-item write: the engine's figure (1 WCU per KB, at least 1);
//   - a write refused by its condition: 1 WCU (the service charges it; the engine's error
//     carries no figure);
//   - a transaction, successful or cancelled: 2 WCU per item and KB (see TransactWCU);
//   - a strongly consistent GetItem or Query: the engine's figure (1 RCU per 4 KB read, at
//     least 1); computed from the returned items if the engine does not say;
//   - failed calls that never reached a decision (network, throttling): 0.
type CountingDB struct {
	Next lockcore.DynamoDB
	C    *Counters
}

var _ lockcore.DynamoDB = (*CountingDB)(nil)

func isCondFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return true
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if r.Code != nil && *r.Code == "ConditionalCheckFailed" {
				return true
			}
		}
	}
	return false
}

func units(cc *types.ConsumedCapacity) (float64, bool) {
	if cc == nil || cc.CapacityUnits == nil {
		return 0, false
	}
	return *cc.CapacityUnits, true
}

// write accounts a single-item write.
func (d *CountingDB) write(op int, cc *types.ConsumedCapacity, err error) {
	d.C.calls.Add(1)
	d.C.ops[op].Add(1)
	switch {
	case err == nil:
		w, ok := units(cc)
		if !ok || w < 1 {
			w = 1
		}
		d.C.add(w, 0)
	case isCondFailed(err):
		d.C.condFails.Add(1)
		d.C.opFails[op].Add(1)
		d.C.add(1, 0)
	}
}

// read accounts a read of items (consistent: 1 RCU per 4 KB, eventually: half).
func (d *CountingDB) read(op int, cc *types.ConsumedCapacity, err error, consistent bool, items ...map[string]types.AttributeValue) {
	d.C.calls.Add(1)
	d.C.ops[op].Add(1)
	if err != nil {
		return
	}
	if r, ok := units(cc); ok {
		d.C.add(0, r)
		return
	}
	size := 0
	for _, it := range items {
		size += ItemSize(it)
	}
	r := math.Max(1, math.Ceil(float64(size)/4096))
	if !consistent {
		r /= 2
	}
	d.C.add(0, r)
}

func (d *CountingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	t0 := time.Now()
	out, err := d.Next.GetItem(ctx, &cp, optFns...)
	d.C.observe(time.Since(t0))
	if err != nil {
		d.read(opGet, nil, err, false)
		return out, err
	}
	d.read(opGet, out.ConsumedCapacity, nil, in.ConsistentRead != nil && *in.ConsistentRead, out.Item)
	return out, err
}

func (d *CountingDB) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	t0 := time.Now()
	out, err := d.Next.Query(ctx, &cp, optFns...)
	d.C.observe(time.Since(t0))
	if err != nil {
		d.read(opQuery, nil, err, false)
		return out, err
	}
	d.read(opQuery, out.ConsumedCapacity, nil, in.ConsistentRead != nil && *in.ConsistentRead, out.Items...)
	return out, err
}

func (d *CountingDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	t0 := time.Now()
	out, err := d.Next.PutItem(ctx, &cp, optFns...)
	d.C.observe(time.Since(t0))
	var cc *types.ConsumedCapacity
	if out != nil {
		cc = out.ConsumedCapacity
	}
	d.write(opPut, cc, err)
	return out, err
}

func (d *CountingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	t0 := time.Now()
	out, err := d.Next.UpdateItem(ctx, &cp, optFns...)
	d.C.observe(time.Since(t0))
	var cc *types.ConsumedCapacity
	if out != nil {
		cc = out.ConsumedCapacity
	}
	d.write(opUpdate, cc, err)
	return out, err
}

func (d *CountingDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	t0 := time.Now()
	out, err := d.Next.DeleteItem(ctx, &cp, optFns...)
	d.C.observe(time.Since(t0))
	var cc *types.ConsumedCapacity
	if out != nil {
		cc = out.ConsumedCapacity
	}
	d.write(opDelete, cc, err)
	return out, err
}

func (d *CountingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	cp := *in
	cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	t0 := time.Now()
	out, err := d.Next.TransactWriteItems(ctx, &cp, optFns...)
	d.C.observe(time.Since(t0))
	d.C.calls.Add(1)
	d.C.ops[opTransact].Add(1)
	wcu := TransactWCU(len(in.TransactItems), out, err)
	switch {
	case err == nil:
		d.C.add(wcu, 0)
	case isCondFailed(err):
		d.C.condFails.Add(1)
		d.C.opFails[opTransact].Add(1)
		d.C.add(wcu, 0)
	}
	return out, err
}

// ItemSize estimates an item's size as DynamoDB counts it: attribute name lengths plus
// value sizes (strings and binaries by length, numbers about one byte per two digits).
func ItemSize(it map[string]types.AttributeValue) int {
	n := 0
	for k, v := range it {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		return (len(x.Value)+1)/2 + 1
	case *types.AttributeValueMemberB:
		return len(x.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range x.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range x.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range x.Value {
			n += (len(e)+1)/2 + 1
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range x.Value {
			n += len(e)
		}
		return n
	}
	return 0
}

// TransactWCU is what a TransactWriteItems of n items costs, successful or cancelled
// (err): 2 WCU per item and KB (the prepare and the commit). DynamoDB reports that total;
// DynamoDB Local reports 2 per table whatever the number of items, and nothing for a
// cancelled transaction, so the cost is at least 2 per item (items under 1 KB, as lock
// rows and the demo's items are). The demo's meter uses it too.
func TransactWCU(n int, out *dynamodb.TransactWriteItemsOutput, err error) float64 {
	wcu := 2 * float64(n)
	if err == nil && out != nil {
		var reported float64
		for i := range out.ConsumedCapacity {
			if u, ok := units(&out.ConsumedCapacity[i]); ok {
				reported += u
			}
		}
		wcu = math.Max(wcu, reported)
	}
	return wcu
}
