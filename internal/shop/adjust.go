package shop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// ApplyAdjustment adds a.Delta to the available stock of a.SKU, once per adjustment id.
//
// It locks the SKU's stock item with the locking read (the lock order decisions take, so
// the two never interleave; the read is the stock), then writes one TransactWriteItems
// that also releases the item:
//   - if available+delta would be negative, the rejection is recorded — the marker
//     ADJ#<adjustmentId> with outcome REJECTED, the requested delta and the stock it saw
//     — and it returns an error matching ErrInsufficientStock naming the SKU, the stock
//     and the delta; the stock does not change. The rejection is permanent: retrying the
//     event gives the same answer without re-deciding it;
//   - otherwise the stock item is updated (conditioned on the result staying
//     non-negative) and the marker put (it expires after AdjustmentMarkerRetention).
//
// Both are conditioned on the stock lease (HeldCondition: a holder that lost it writes
// nothing) and the marker on its absence: a marker already there means the adjustment
// was decided before — a duplicate delivery. The transaction then writes nothing, the
// marker is read, and ApplyAdjustment returns applied=false and no error when it was
// applied, and an error matching ErrInsufficientStock when it was rejected (the first
// decision stands, even if stock arrived since). Reading the marker only then saves a
// read on every first delivery.
//
// Contention returns an error matching ErrBusy, a lost lease one matching
// lockcore.ErrLeaseLost; both are safe to retry. In the legacy mode (WithLegacyWait) it
// locks the SKU's lock-table row (Mutex) instead, as before.
func (s *Service) ApplyAdjustment(ctx context.Context, a Adjustment) (applied bool, err error) {
	if err := a.Validate(); err != nil {
		return false, err
	}
	if s.t.Inventory == "" {
		return false, errors.New("shop: no inventory table configured")
	}
	if !s.legacy {
		return s.applyAdjustment(ctx, a)
	}
	lease, wait, err := s.budget(ctx)
	if err != nil {
		return false, err
	}
	mu := s.skus
	what := fmt.Sprintf("adjustment %s of %s", a.AdjustmentID, a.SKU)
	lockCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	l, err := mu.Acquire(lockCtx, SKULockKey(a.SKU), waitPolicy(wait), lockcore.LeaseDuration(lease))
	if err != nil {
		if errors.Is(err, lockcore.ErrLockHeld) {
			return false, busy(what, err)
		}
		return false, fmt.Errorf("shop: %s: lock: %w", what, err)
	}
	if err := s.crashAt(CrashAdjustmentLocked); err != nil {
		return false, err
	}
	done := func() { s.release(ctx, what, l) }

	marker, st, err := s.readAdjustment(ctx, a)
	if err != nil {
		done()
		return false, fmt.Errorf("shop: %s: %w", what, err)
	}
	if marker != nil {
		done()
		return false, s.duplicateAdjustment(ctx, a, what, marker)
	}
	if st.available+int64(a.Delta) < 0 {
		err := s.recordRejection(ctx, a, what, st.available, mu, l)
		done()
		return false, err
	}

	token := l.Token()
	cond := lockcore.FenceCondition(attrFence, token)
	if a.Delta < 0 {
		cond = expression.And(cond, name(attrAvailable).GreaterThanEqual(value(-a.Delta)))
	}
	upd := expression.Set(name(attrAvailable), expression.Plus(expression.IfNotExists(name(attrAvailable), value(0)), value(a.Delta))).
		Set(name(attrReserved), expression.IfNotExists(name(attrReserved), value(0)))
	upd = lockcore.FenceUpdate(upd, attrFence, token)
	now := s.now()
	mk := markerKey(a.SKU, a.AdjustmentID)
	mk["adjustmentId"] = str(a.AdjustmentID)
	mk["delta"] = num(int64(a.Delta))
	mk[attrReason] = str(a.Reason)
	mk["appliedAt"] = num(now.UnixMilli())
	mk[attrExpiresAt] = num(now.Add(AdjustmentMarkerRetention).Unix())
	items := []types.TransactWriteItem{
		buildUpdate(s.t.Inventory, stockKey(a.SKU), upd, &cond),
		buildPut(s.t.Inventory, mk, expression.AttributeNotExists(name(attrPK))),
	}
	if s.legacy || a.Delta > 0 {
		// A restock is guarded by the lease itself (a ConditionCheck of the lock row).
		// The fence alone does not keep a holder that lost its lease from writing while
		// a newer holder that has not written the stock yet — it read it and is about to
		// record a rejection, which writes no stock — holds the lock: the stale restock
		// would land under it, and the rejection be recorded, for good, against stock
		// that was no longer true (found by an outside review). A write-off or a
		// reservation only lowers the stock, relative and conditioned on the result
		// staying non-negative: landing late it cannot make a newer holder's decision
		// wrong (a rejection stays right, an acceptance fails its condition and is
		// decided again), so those stay unguarded (see writeDecisions). The legacy mode,
		// the behaviour the demo compares against, guarded every adjustment.
		guard, err := mu.GuardCheck(l)
		if err != nil {
			done()
			return false, err
		}
		items = append(items, guard)
	}
	res, err := s.transact(ctx, items)
	done()
	switch {
	case err == nil:
		s.count(ctx, MetricAdjustmentsApplied)
		return true, nil
	case res.failed == 1:
		// The marker exists: an earlier, ambiguous attempt of ours applied it.
		s.count(ctx, MetricAdjustmentsDuplicate)
		return res.ambiguous, nil
	case res.failed >= 0:
		return false, fmt.Errorf("shop: %s: the lease was lost before the write (%w): %w", what, lockcore.ErrLeaseLost, err)
	}
	return false, fmt.Errorf("shop: %s: %w", what, err)
}

// recordRejection writes the REJECTED marker of an adjustment that would make the stock
// negative, guarded by the SKU lease l, and returns the rejection (matching
// ErrInsufficientStock), or the error that kept it from being recorded (retryable).
func (s *Service) recordRejection(ctx context.Context, a Adjustment, what string, available int64, mu *lockcore.Mutex, l *lockcore.Lease) error {
	now := s.now()
	mk := markerKey(a.SKU, a.AdjustmentID)
	mk["adjustmentId"] = str(a.AdjustmentID)
	mk[attrOutcome] = str(OutcomeRejected)
	mk[attrRequestedDelta] = num(int64(a.Delta)) // not "delta": nothing was applied
	mk[attrAvailable] = num(available)
	mk[attrReason] = str(a.Reason)
	mk["rejectedAt"] = num(now.UnixMilli())
	mk[attrExpiresAt] = num(now.Add(AdjustmentMarkerRetention).Unix())
	rejection := fmt.Errorf("%w: %s: %s has %d available, delta %d would leave %d",
		ErrInsufficientStock, what, a.SKU, available, a.Delta, available+int64(a.Delta))
	guard, err := mu.GuardCheck(l)
	if err != nil {
		return err
	}
	res, err := s.transact(ctx, []types.TransactWriteItem{
		buildPut(s.t.Inventory, mk, expression.AttributeNotExists(name(attrPK))),
		guard,
	})
	switch {
	case err == nil:
		s.count(ctx, MetricAdjustmentsRejected)
		return rejection
	case res.failed == 0:
		// The marker exists: an earlier, ambiguous attempt of ours recorded it — or, our
		// lease lost meanwhile (a paused invocation), another delivery of the adjustment
		// took the lock over and decided it, maybe applying it against stock that had
		// arrived since. The marker says which decision stands; reporting our rejection
		// regardless logged an applied adjustment as rejected (found by review).
		marker, err := s.foundMarker(ctx, a)
		if err != nil {
			return fmt.Errorf("shop: %s: %w", what, err)
		}
		if getS(marker, attrOutcome) != OutcomeRejected {
			s.count(ctx, MetricAdjustmentsDuplicate)
			return nil // applied by that delivery: for us a duplicate
		}
		s.count(ctx, MetricAdjustmentsRejected)
		return rejection
	case res.failed > 0:
		return fmt.Errorf("shop: %s: the lease was lost before the rejection was recorded (%w): %w", what, lockcore.ErrLeaseLost, err)
	}
	return fmt.Errorf("shop: %s: record rejection: %w", what, err)
}

// foundMarker reads the marker of an adjustment that a write found already there
// (strongly consistent).
func (s *Service) foundMarker(ctx context.Context, a Adjustment) (map[string]types.AttributeValue, error) {
	items, err := s.batchGet(ctx, s.t.Inventory, []map[string]types.AttributeValue{markerKey(a.SKU, a.AdjustmentID)}, true)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the marker a write found: %w", err)
	case len(items) == 0:
		return nil, errors.New("a write found the marker, a read did not")
	}
	return items[0], nil
}

// SeedStock sets the available stock of sku (keeping what is reserved), under the SKU's
// lock. It is meant for setting up demos and tests.
func (s *Service) SeedStock(ctx context.Context, sku string, available int) error {
	if err := ValidSKU(sku); err != nil {
		return fieldErr("sku", "%s", err.Error())
	}
	if available < 0 {
		return fieldErr("available", "must not be negative, got %d", available)
	}
	if s.t.Inventory == "" {
		return errors.New("shop: no inventory table configured")
	}
	if !s.legacy {
		return s.seedStock(ctx, sku, available)
	}
	lease, wait, err := s.budget(ctx)
	if err != nil {
		return err
	}
	mu := s.skus
	lockCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	l, err := mu.Acquire(lockCtx, SKULockKey(sku), waitPolicy(max(wait, 5*time.Second)), lockcore.LeaseDuration(lease))
	if err != nil {
		if errors.Is(err, lockcore.ErrLockHeld) {
			return busy("seed "+sku, err)
		}
		return fmt.Errorf("shop: seed %s: lock: %w", sku, err)
	}
	defer s.release(ctx, "seed "+sku, l)
	cond := lockcore.FenceCondition(attrFence, l.Token())
	upd := expression.Set(name(attrAvailable), value(available)).
		Set(name(attrReserved), expression.IfNotExists(name(attrReserved), value(0)))
	upd = lockcore.FenceUpdate(upd, attrFence, l.Token())
	guard, err := mu.GuardCheck(l)
	if err != nil {
		return err
	}
	if _, err := s.transact(ctx, []types.TransactWriteItem{
		buildUpdate(s.t.Inventory, stockKey(sku), upd, &cond), guard,
	}); err != nil {
		return fmt.Errorf("shop: seed %s: %w", sku, err)
	}
	return nil
}

// readAdjustment reads an adjustment's marker (nil when there is none) and its SKU's
// stock record in one strongly consistent BatchGetItem (see batchGet).
func (s *Service) readAdjustment(ctx context.Context, a Adjustment) (marker map[string]types.AttributeValue, st stockRecord, err error) {
	if s.legacy {
		// Two reads, as the behaviour the demo compares against made them.
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.t.Inventory), Key: markerKey(a.SKU, a.AdjustmentID), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return nil, stockRecord{}, fmt.Errorf("read marker: %w", err)
		}
		if out.Item != nil {
			return out.Item, stockRecord{}, nil
		}
		st, err := s.readStock(ctx, a.SKU)
		return nil, st, err
	}
	items, err := s.batchGet(ctx, s.t.Inventory, []map[string]types.AttributeValue{markerKey(a.SKU, a.AdjustmentID), stockKey(a.SKU)}, true)
	if err != nil {
		return nil, stockRecord{}, fmt.Errorf("read marker and stock: %w", err)
	}
	for _, it := range items {
		switch getS(it, attrSK) {
		case StockSK:
			st.exists = true
			st.available, _ = getN(it, attrAvailable)
			st.reserved, _ = getN(it, attrReserved)
		default:
			marker = it
		}
	}
	return marker, st, nil
}

// applyAdjustment is ApplyAdjustment on the stock item's lock (see there).
func (s *Service) applyAdjustment(ctx context.Context, a Adjustment) (bool, error) {
	lease, wait, err := s.budget(ctx)
	if err != nil {
		return false, err
	}
	what := fmt.Sprintf("adjustment %s of %s", a.AdjustmentID, a.SKU)
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	h, err := s.holdStock(hbCtx, a.SKU, waitPolicy(wait), lease, nil)
	if err != nil {
		if errors.Is(err, lockcore.ErrLockHeld) {
			return false, busy(what, err)
		}
		return false, fmt.Errorf("shop: %s: lock: %w", what, err)
	}
	if err := s.crashAt(CrashAdjustmentLocked); err != nil {
		return false, err // a dead holder: no release
	}
	holds := map[string]*stockHold{a.SKU: h}
	released := false
	defer func() {
		if !released {
			s.releaseHolds(ctx, holds)
		}
	}()

	now := s.now()
	mk := markerKey(a.SKU, a.AdjustmentID)
	mk["adjustmentId"] = str(a.AdjustmentID)
	mk[attrReason] = str(a.Reason)
	mk[attrExpiresAt] = num(now.Add(AdjustmentMarkerRetention).Unix())
	// The lease that wrote it: after an ambiguous attempt, a marker that names our lease
	// is our own write, not another delivery's.
	mk[attrMarkerLease] = str(h.lease.ID())
	rejected := h.avail+int64(a.Delta) < 0
	var stockItem types.TransactWriteItem
	if rejected {
		mk[attrOutcome] = str(OutcomeRejected)
		mk[attrRequestedDelta] = num(int64(a.Delta)) // not "delta": nothing was applied
		mk[attrAvailable] = num(h.avail)
		mk["rejectedAt"] = num(now.UnixMilli())
		stockItem, _ = s.stockUpdate(h, 0, nil, nil, true)
	} else {
		mk["delta"] = num(int64(a.Delta))
		mk["appliedAt"] = num(now.UnixMilli())
		cond := h.lease.HeldCondition()
		if a.Delta < 0 {
			cond = expression.And(cond, name(attrAvailable).GreaterThanEqual(value(-a.Delta)))
		}
		upd := expression.Set(name(attrAvailable), expression.Plus(expression.IfNotExists(name(attrAvailable), value(0)), value(a.Delta))).
			Set(name(attrReserved), expression.IfNotExists(name(attrReserved), value(0)))
		stockItem = buildUpdate(s.t.Inventory, stockKey(a.SKU), h.lease.ReleaseUpdate(upd), &cond)
	}
	stopHB() // the transaction releases the item: no renewal may race it
	res, err := s.transact(ctx, []types.TransactWriteItem{
		buildPut(s.t.Inventory, mk, expression.AttributeNotExists(name(attrPK))),
		stockItem,
	})
	rejection := fmt.Errorf("%w: %s: %s has %d available, delta %d would leave %d",
		ErrInsufficientStock, what, a.SKU, h.avail, a.Delta, h.avail+int64(a.Delta))
	switch {
	case err == nil:
		released = true
		s.held(ctx, holds, 0, false)
		if rejected {
			s.count(ctx, MetricAdjustmentsRejected)
			return false, rejection
		}
		s.count(ctx, MetricAdjustmentsApplied)
		return true, nil
	case res.failed == 0:
		// The marker exists: decided before (a duplicate delivery), or by an earlier,
		// ambiguous attempt of ours, which also released the item. The marker says which
		// decision stands.
		marker, rerr := s.foundMarker(ctx, a)
		if rerr != nil {
			return false, fmt.Errorf("shop: %s: %w", what, rerr)
		}
		if getS(marker, attrMarkerLease) == h.lease.ID() {
			released = true
			s.held(ctx, holds, 0, false)
			if rejected {
				s.count(ctx, MetricAdjustmentsRejected)
				return false, rejection
			}
			s.count(ctx, MetricAdjustmentsApplied)
			return true, nil
		}
		return false, s.duplicateAdjustment(ctx, a, what, marker)
	case res.failed > 0:
		s.held(ctx, holds, 0, true)
		return false, fmt.Errorf("shop: %s: the lease was lost before the write (%w): %w", what, lockcore.ErrLeaseLost, err)
	}
	return false, fmt.Errorf("shop: %s: %w", what, err)
}

// duplicateAdjustment answers a delivery of an adjustment decided before, from its
// marker: nil when it was applied, an error matching ErrInsufficientStock when it was
// rejected.
func (s *Service) duplicateAdjustment(ctx context.Context, a Adjustment, what string, marker map[string]types.AttributeValue) error {
	s.count(ctx, MetricAdjustmentsDuplicate)
	recorded, ok := getN(marker, "delta")
	if getS(marker, attrOutcome) == OutcomeRejected {
		recorded, ok = getN(marker, attrRequestedDelta)
	}
	if ok && recorded != int64(a.Delta) {
		// The id was decided before with another delta: a producer reusing ids. The first
		// decision stands (as for an order redelivered with other content).
		s.log.WarnContext(ctx, "adjustment redelivered with a different delta; keeping the first decision",
			"adjustmentId", a.AdjustmentID, "sku", a.SKU, "delta", a.Delta, "recordedDelta", recorded)
	}
	if getS(marker, attrOutcome) == OutcomeRejected {
		seen, _ := getN(marker, attrAvailable)
		return fmt.Errorf("%w: %s: rejected before (%s had %d available, delta %d); the decision stands",
			ErrInsufficientStock, what, a.SKU, seen, a.Delta)
	}
	return nil
}

// seedStock is SeedStock on the stock item's lock: one locking read and one
// UpdateAndRelease.
func (s *Service) seedStock(ctx context.Context, sku string, available int) error {
	lease, wait, err := s.budget(ctx)
	if err != nil {
		return err
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	h, err := s.holdStock(hbCtx, sku, waitPolicy(max(wait, 5*time.Second)), lease, nil)
	if err != nil {
		if errors.Is(err, lockcore.ErrLockHeld) {
			return busy("seed "+sku, err)
		}
		return fmt.Errorf("shop: seed %s: lock: %w", sku, err)
	}
	upd := expression.Set(name(attrAvailable), value(available)).
		Set(name(attrReserved), expression.IfNotExists(name(attrReserved), value(0)))
	if _, err := h.lease.UpdateAndRelease(ctx, upd, expression.ConditionBuilder{}); err != nil {
		s.release(ctx, "seed "+sku, h.lease)
		return fmt.Errorf("shop: seed %s: %w", sku, err)
	}
	return nil
}
