package shop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// ProcessOrder reserves stock for every line of o, all or nothing, and is idempotent: it
// is ProcessOrders of a batch of one (see there). An order already RESERVED or REJECTED
// is reported with Duplicate set. Contention returns an error matching ErrBusy and a
// lost lease one matching lockcore.ErrLeaseLost — in both cases nothing was decided and
// the order can be retried. An invalid order returns a *FieldError.
//
// In the legacy mode (WithLegacyWait) it is the order path as it was before, kept for
// the demo's comparison: the order item locked, every SKU locked with Mutex.AcquireAll
// on the lock table, the stock read, one transaction writing the decision with a
// GuardCheck of every SKU lease, and the SKU locks released.
func (s *Service) ProcessOrder(ctx context.Context, o Order) (Outcome, error) {
	if !s.legacy {
		if err := o.Validate(); err != nil {
			return Outcome{}, err
		}
		r := s.ProcessOrders(ctx, []Order{o})[0]
		return r.Outcome, r.Err
	}
	return s.processOrderLegacy(ctx, o)
}

// processOrderLegacy is the legacy mode's ProcessOrder.
func (s *Service) processOrderLegacy(ctx context.Context, o Order) (Outcome, error) {
	if err := o.Validate(); err != nil {
		return Outcome{}, err
	}
	if s.t.Inventory == "" || s.t.Orders == "" {
		return Outcome{}, errors.New("shop: ProcessOrder needs the orders and inventory tables")
	}
	out := Outcome{OrderID: o.OrderID}
	lease, wait, err := s.budget(ctx)
	if err != nil {
		return out, err
	}
	il, mu := s.orders, s.skus
	start := s.now()
	waitUntil := start.Add(wait)

	// 1. The order.
	orderCtx, stopOrderHB := context.WithCancel(ctx)
	defer stopOrderHB()
	ol, err := il.Acquire(orderCtx, orderKey(o.OrderID), waitPolicy(wait), lockcore.LeaseDuration(lease),
		s.pendingOrder(o))
	if err != nil {
		if errors.Is(err, lockcore.ErrLockHeld) {
			return out, busy("order "+o.OrderID, err)
		}
		return out, fmt.Errorf("shop: lock order %s: %w", o.OrderID, err)
	}
	order, dup, err := s.prepareOrder(ctx, il, ol, o)
	if err != nil || dup != nil {
		if dup != nil {
			out = *dup
		}
		return out, err
	}
	if err := s.crashAt(CrashOrderLocked); err != nil {
		return out, err // a dead holder: no release; the deferred cancel stops the heartbeat
	}

	// 2. The SKUs.
	keys := make([]string, len(order.Lines))
	for i, l := range order.Lines {
		keys[i] = SKULockKey(l.SKU)
	}
	skuCtx, stopSKUHB := context.WithCancel(ctx)
	defer stopSKUHB()
	ml, err := mu.AcquireAll(skuCtx, keys, waitPolicy(waitUntil.Sub(s.now())),
		lockcore.Data([]byte(o.OrderID)), lockcore.LeaseDuration(lease))
	if err != nil {
		s.release(ctx, "order "+o.OrderID, ol.Lease)
		if errors.Is(err, lockcore.ErrLockHeld) {
			return out, busy("order "+o.OrderID, err)
		}
		return out, fmt.Errorf("shop: order %s: lock stock: %w", o.OrderID, err)
	}
	releaseAll := func() {
		s.release(ctx, "stock of order "+o.OrderID, ml)
		s.release(ctx, "order "+o.OrderID, ol.Lease)
	}

	// 3. The stock.
	status, reason, err := s.decide(ctx, order)
	if err != nil {
		releaseAll()
		return out, err
	}
	if err := s.crashAt(CrashStockLocked); err != nil {
		return out, err
	}

	// 4. The decision, in one transaction.
	items, err := s.decisionItems(ol, ml, mu, order, status, reason)
	if err != nil {
		releaseAll()
		return out, err
	}
	stopOrderHB() // the transaction unlocks the order: its heartbeat must not race it
	res, err := s.transact(ctx, items)
	if err != nil && res.failed == 0 && s.landed(ctx, o.OrderID, ol, status) {
		err = nil // an earlier, ambiguous attempt of ours wrote it
	}
	if err != nil {
		releaseAll()
		if res.failed >= 0 {
			return out, fmt.Errorf("shop: order %s: a lease was lost before the decision was written (%w): %w",
				o.OrderID, lockcore.ErrLeaseLost, err)
		}
		return out, fmt.Errorf("shop: order %s: %w", o.OrderID, err)
	}

	// 5. Done.
	s.release(ctx, "stock of order "+o.OrderID, ml)
	if status == StatusReserved {
		s.count(ctx, MetricOrdersReserved)
	} else {
		s.count(ctx, MetricOrdersRejected)
	}
	out.Status, out.Reason = status, reason
	return out, nil
}

// pendingOrder stores a new order as PENDING with its customer and lines in the write
// that locks it (lockcore.SetIfAbsent: an order seen before keeps what it has), so that
// the janitor can re-drive it should its holder die, at no extra write.
func (s *Service) pendingOrder(o Order) lockcore.AcquireOption {
	now := num(s.now().UnixMilli())
	lines := make([]types.AttributeValue, len(o.Lines))
	for i, l := range o.Lines {
		lines[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			attrSKU: str(l.SKU), attrQty: num(int64(l.Qty)),
		}}
	}
	return lockcore.SetIfAbsent(map[string]types.AttributeValue{
		attrCustomerID: str(o.CustomerID),
		attrLines:      &types.AttributeValueMemberL{Value: lines},
		attrStatus:     str(string(StatusPending)),
		attrCreatedAt:  now,
		attrUpdatedAt:  now,
	})
}

// prepareOrder looks at the locked order item: a decided order is a duplicate (its lock
// is released and dup says what was decided); an order seen before keeps its stored
// content; a new one is stored as PENDING under the lease.
func (s *Service) prepareOrder(ctx context.Context, il *lockcore.ItemLocker, ol *lockcore.ItemLease, o Order) (order Order, dup *Outcome, err error) {
	rec := parseOrder(o.OrderID, ol.Item())
	if rec.Status.Final() {
		s.release(ctx, "order "+o.OrderID, ol.Lease)
		s.count(ctx, MetricOrdersDuplicate)
		return o, &Outcome{OrderID: o.OrderID, Status: rec.Status, Duplicate: true, Reason: rec.Reason}, nil
	}
	order = o
	if len(rec.Lines) > 0 {
		// Seen before by a holder that did not finish: the stored version wins.
		if rec.CustomerID != o.CustomerID || !slices.Equal(rec.Lines, o.Lines) {
			s.log.WarnContext(ctx, "order redelivered with different content; keeping the first version",
				"orderId", o.OrderID)
		}
		order.CustomerID, order.Lines = rec.CustomerID, rec.Lines
	} else {
		now := s.now().UnixMilli()
		upd := expression.Set(name(attrCustomerID), value(o.CustomerID)).
			Set(name(attrLines), value(linesList(o.Lines))).
			Set(name(attrStatus), value(string(StatusPending))).
			Set(name(attrCreatedAt), value(now)).
			Set(name(attrUpdatedAt), value(now))
		if _, err := il.Update(ctx, ol, upd, nil); err != nil {
			s.release(ctx, "order "+o.OrderID, ol.Lease)
			return o, nil, s.writeErr(ctx, "order "+o.OrderID+": store as pending", err)
		}
	}
	return order, nil, nil
}

// decide reads the stock of every line (under the SKU locks): RESERVED if all are
// available, else REJECTED with the lines that are short.
func (s *Service) decide(ctx context.Context, order Order) (Status, string, error) {
	var short []string
	for _, l := range order.Lines {
		st, err := s.readStock(ctx, l.SKU)
		if err != nil {
			return "", "", err
		}
		if st.available < int64(l.Qty) {
			short = append(short, fmt.Sprintf("%s (requested %d, available %d)", l.SKU, l.Qty, st.available))
		}
	}
	if len(short) > 0 {
		return StatusRejected, "insufficient stock: " + strings.Join(short, "; "), nil
	}
	return StatusReserved, "", nil
}

// decisionItems is the decision's transaction: the order's final state (which unlocks
// it), the stock reservations when RESERVED, and a guard of every SKU lease. Past 49
// lines the transaction has no room for all guards; the stock updates' fence conditions
// then stand in for the missing ones.
func (s *Service) decisionItems(ol *lockcore.ItemLease, ml *lockcore.MultiLease, mu *lockcore.Mutex, order Order, status Status, reason string) ([]types.TransactWriteItem, error) {
	items := []types.TransactWriteItem{s.finalOrderItem(ol, order, status, reason)}
	if status == StatusReserved {
		for _, l := range order.Lines {
			items = append(items, s.reserveItem(l, ml.Token(SKULockKey(l.SKU))))
		}
	}
	for _, l := range ml.Leases() {
		if len(items) == maxTransactItems {
			break
		}
		guard, err := mu.GuardCheck(l)
		if err != nil {
			return nil, err
		}
		items = append(items, guard)
	}
	return items, nil
}

func linesList(lines []Line) []map[string]any {
	l := make([]map[string]any, len(lines))
	for i, ln := range lines {
		l[i] = map[string]any{attrSKU: ln.SKU, attrQty: ln.Qty}
	}
	return l
}

// finalOrderItem writes the order's decision and unlocks it, conditioned on the lease.
func (s *Service) finalOrderItem(ol *lockcore.ItemLease, o Order, st Status, reason string) types.TransactWriteItem {
	a := lockcore.DefaultItemAttributes
	now := s.now().UnixMilli()
	// Not hand-built from the holder attributes: a lease that waited for the order holds
	// it by its ticket until its first write, and such a condition refused the decision
	// of every holder that had waited for its order lock and not written since
	// (ErrLeaseLost, and the message retried).
	cond := ol.HeldCondition()
	upd := expression.Set(name(attrStatus), value(string(st))).
		Set(name(attrCustomerID), value(o.CustomerID)).
		Set(name(attrLines), value(linesList(o.Lines))).
		Set(name(attrUpdatedAt), value(now)).
		Set(name(attrCreatedAt), expression.IfNotExists(name(attrCreatedAt), value(now))).
		Remove(name(a.LockedBy)).Remove(name(a.Owner)).Remove(name(a.Until)).Remove(name(a.LockTime))
	if reason != "" {
		upd = upd.Set(name(attrReason), value(reason))
	} else {
		upd = upd.Remove(name(attrReason))
	}
	return buildUpdate(s.t.Orders, orderKey(o.OrderID), upd, &cond)
}

// reserveItem moves qty units of a SKU from available to reserved, conditioned on enough
// being available and on the SKU lock's fencing token.
func (s *Service) reserveItem(l Line, token lockcore.Fence) types.TransactWriteItem {
	cond := expression.And(
		name(attrAvailable).GreaterThanEqual(value(l.Qty)),
		lockcore.FenceCondition(attrFence, token))
	upd := expression.Set(name(attrAvailable), expression.Minus(name(attrAvailable), value(l.Qty))).
		Set(name(attrReserved), expression.Plus(expression.IfNotExists(name(attrReserved), value(0)), value(l.Qty)))
	upd = lockcore.FenceUpdate(upd, attrFence, token)
	return buildUpdate(s.t.Inventory, stockKey(l.SKU), upd, &cond)
}

// landed reports whether the order item shows the decision written by this lease: after
// an ambiguous attempt the retry's condition fails because the first attempt unlocked
// the item.
func (s *Service) landed(ctx context.Context, orderID string, ol *lockcore.ItemLease, st Status) bool {
	rctx, cancel := cleanupCtx(ctx)
	defer cancel()
	got, err := s.db.GetItem(rctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.Orders), Key: orderKey(orderID), ConsistentRead: aws.Bool(true),
	})
	if err != nil || got.Item == nil {
		return false
	}
	it := got.Item
	a := lockcore.DefaultItemAttributes
	// The decision unlocked the item and left its serving ticket at ours; waiters queued
	// meanwhile have raised the fence (the ticket counter) past our ticket.
	fence, _ := getN(it, a.Fence)
	serving, _ := getN(it, a.Serving)
	ours := fence == ol.Ticket() || serving == ol.Ticket()
	return getS(it, attrStatus) == string(st) && getS(it, a.LockedBy) == "" && ours
}

// releaser is a *lockcore.Lease or *lockcore.MultiLease.
type releaser interface {
	Release(ctx context.Context) error
}

// release gives a lease up (best effort, even after ctx ended) and logs a failure.
func (s *Service) release(ctx context.Context, what string, l releaser) {
	rctx, cancel := cleanupCtx(ctx)
	defer cancel()
	if err := l.Release(rctx); err != nil {
		s.log.WarnContext(ctx, "release failed", "lock", what, "error", err)
	}
}

// writeErr wraps a failed guarded write (a lost lease is counted by the lock observer).
func (s *Service) writeErr(_ context.Context, what string, err error) error {
	return fmt.Errorf("shop: %s: %w", what, err)
}
