package shop

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Stock items are locked with lockcore's locking read (an ItemLocker on the inventory
// table): the UpdateItem that takes the lock returns the item, so the lock and the stock
// read are one call, and the decision transaction releases the lock by removing its
// holder attributes under the lease's HeldCondition (docs/using-lockcore.md), so the
// release is no call of its own either.
//
// Orders waiting for a stock item are recorded on it, one top-level attribute per order
// ("po#" + a digest of the order id; see pendingAttr): the holder of the item reads them
// with its locking read, and a holder that dies leaves them there for the next holder
// and for the janitor's sweep (AbandonedStock), which re-drives them.

// PendingAttrPrefix starts the name of a stock item attribute that records an order
// waiting for (or decided under) the item's lock.
const PendingAttrPrefix = "po#"

// pendingAttr is the attribute that records an order on a stock item: the prefix and the
// order id when it is short and plain (at most 64 characters of [A-Za-z0-9_:-]), else
// "~" and 16 characters of the id's SHA-256 (with the id in the value). Order ids may
// hold '.', '[' or ']', which an attribute name passed to lockcore.SetIfAbsent may not,
// and may be 256 bytes long; every record's name stays short, because the item's size
// is what each write of it costs.
func pendingAttr(orderID string) string {
	if plainID(orderID) {
		return PendingAttrPrefix + orderID
	}
	sum := sha256.Sum256([]byte(orderID))
	return PendingAttrPrefix + "~" + base64.RawURLEncoding.EncodeToString(sum[:12])
}

func plainID(id string) bool {
	if id == "" || len(id) > 64 || id[0] == '~' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':') {
			return false
		}
	}
	return true
}

// pendingEntry is an order recorded on a stock item.
type pendingEntry struct {
	Order
	At   time.Time // when it was recorded
	attr string    // its attribute on the item
	sku  string    // the item's SKU
}

// encodeEntry is the value of an order's record on sku's stock item:
// "<ms, base 36>\n<lines>\n<customerId>", and "\n<orderId>" when the attribute's name
// does not hold the id; lines as "sku*qty|sku*qty", the item's own SKU written as "".
// Neither ids nor SKUs hold control characters, and SKUs neither '*' nor '|'. Short,
// because the item's size is what each of its writes costs.
func encodeEntry(sku string, o Order, at time.Time) types.AttributeValue {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(at.UnixMilli(), 36))
	b.WriteByte('\n')
	for i, l := range o.Lines {
		if i > 0 {
			b.WriteByte('|')
		}
		if l.SKU != sku {
			b.WriteString(l.SKU)
		}
		b.WriteByte('*')
		b.WriteString(strconv.Itoa(l.Qty))
	}
	b.WriteByte('\n')
	b.WriteString(o.CustomerID)
	if !plainID(o.OrderID) {
		b.WriteByte('\n')
		b.WriteString(o.OrderID)
	}
	return str(b.String())
}

// decodeEntry parses the record attr of sku's stock item; ok is false for a value that
// is not one (or an order that would not validate).
func decodeEntry(sku, attr string, v types.AttributeValue) (pendingEntry, bool) {
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return pendingEntry{}, false
	}
	parts := strings.SplitN(s.Value, "\n", 4)
	if len(parts) < 3 {
		return pendingEntry{}, false
	}
	ms, err := strconv.ParseInt(parts[0], 36, 64)
	if err != nil {
		return pendingEntry{}, false
	}
	id := strings.TrimPrefix(attr, PendingAttrPrefix)
	if len(parts) == 4 {
		id = parts[3]
	}
	e := pendingEntry{Order: Order{OrderID: id, CustomerID: parts[2]}, At: time.UnixMilli(ms), attr: attr, sku: sku}
	for _, f := range strings.Split(parts[1], "|") {
		ls, q, ok := strings.Cut(f, "*")
		n, err := strconv.Atoi(q)
		if !ok || err != nil {
			return pendingEntry{}, false
		}
		if ls == "" {
			ls = sku
		}
		e.Lines = append(e.Lines, Line{SKU: ls, Qty: n})
	}
	if e.Validate() != nil || pendingAttr(e.OrderID) != attr {
		return pendingEntry{}, false
	}
	return e, true
}

// A decided order's record is replaced by a marker of its decision ("=R" reserved, "=J"
// rejected) in the decision transaction, and the marker removed by the next holder's: a
// waiter that reads the item meanwhile learns its order's outcome without reading the
// order item, and a copy of the order recorded again (a late duplicate) finds it decided
// (its record is written only where there is none).
const (
	markerReserved = "=R"
	markerRejected = "=J"
)

func decisionMarker(st Status) string {
	if st == StatusReserved {
		return markerReserved
	}
	return markerRejected
}

// markerStatus returns the decision a record attribute's value marks ("" when it is
// not a marker).
func markerStatus(v types.AttributeValue) Status {
	s, _ := v.(*types.AttributeValueMemberS)
	switch {
	case s == nil:
		return ""
	case s.Value == markerReserved:
		return StatusReserved
	case s.Value == markerRejected:
		return StatusRejected
	}
	return ""
}

// markers returns the decision markers on a stock item (attribute names).
func markers(it map[string]types.AttributeValue) []string {
	var out []string
	for k, v := range it {
		if strings.HasPrefix(k, PendingAttrPrefix) && markerStatus(v) != "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// pendingEntries returns the orders recorded on sku's stock item, oldest first (then by
// id); decision markers are not records.
func pendingEntries(sku string, it map[string]types.AttributeValue) []pendingEntry {
	var out []pendingEntry
	for k, v := range it {
		if !strings.HasPrefix(k, PendingAttrPrefix) || markerStatus(v) != "" {
			continue
		}
		if e, ok := decodeEntry(sku, k, v); ok {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b pendingEntry) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.OrderID, b.OrderID)
	})
	return out
}

// recordAttrs are the SetIfAbsent / publish attributes that record orders on sku's stock
// item.
func (s *Service) recordAttrs(sku string, orders []Order) map[string]types.AttributeValue {
	now := s.now()
	attrs := make(map[string]types.AttributeValue, len(orders))
	for _, o := range orders {
		attrs[pendingAttr(o.OrderID)] = encodeEntry(sku, o, now)
	}
	return attrs
}

// stockHold is one held stock item: its lease and what the locking read returned.
type stockHold struct {
	sku     string
	lease   *lockcore.ItemLease
	avail   int64
	entries []pendingEntry // orders recorded on the item when it was read
	markers []string       // decision markers on it then (removed by the first write)
	since   time.Time
}

// probeKey marks the context of a take that does not wait (a probe: the item found held
// is an answer, not contention; see lockObserver).
type probeKey struct{}

// stockLockKey is the key a stock item is locked by: its own.
func stockLockKey(sku string) map[string]types.AttributeValue { return stockKey(sku) }

// holdStock takes the lock of a stock item with the locking read, waiting as wait says;
// record (optional) are orders to record on the item in the same write when it is free
// (lockcore.SetIfAbsent; a lock handed over by the queue writes them with the lease's
// first renewal); more are further acquire options (lockcore.Seen).
func (s *Service) holdStock(ctx context.Context, sku string, wait lockcore.WaitPolicy, lease time.Duration, record []Order, more ...lockcore.AcquireOption) (*stockHold, error) {
	opts := append([]lockcore.AcquireOption{wait, lockcore.LeaseDuration(lease)}, more...)
	if len(record) > 0 {
		opts = append(opts, lockcore.SetIfAbsent(s.recordAttrs(sku, record)))
	}
	l, err := s.stock.Acquire(ctx, stockLockKey(sku), opts...)
	if err != nil {
		return nil, err
	}
	h := &stockHold{sku: sku, lease: l, since: s.now()}
	h.avail, _ = getN(l.Item(), attrAvailable)
	h.entries = pendingEntries(sku, l.Item())
	h.markers = markers(l.Item())
	return h, nil
}

// probeStock is holdStock without waiting, as a probe: finding the item held is an
// answer (the caller records its orders, or decides without it), not contention, and is
// not counted as such (MetricContention).
func (s *Service) probeStock(ctx context.Context, sku string, lease time.Duration, record []Order) (*stockHold, error) {
	return s.holdStock(context.WithValue(ctx, probeKey{}, true), sku, lockcore.NoWait(), lease, record)
}

// releaseHolds releases stock holds with lockcore's own release (concurrently), for
// paths that write nothing.
func (s *Service) releaseHolds(ctx context.Context, holds map[string]*stockHold) {
	var wg sync.WaitGroup
	for _, h := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.release(ctx, "stock of "+h.sku, h.lease)
		}()
	}
	wg.Wait()
}

// stockUpdate is the transaction item that writes a held stock item: units moved from
// available to reserved (conditioned on enough being available), the attributes remove
// removed, the records of mark replaced by decision markers, and with release the lock's
// holder attributes removed —
// the release, in the caller's transaction. Every form is conditioned on the lease
// (HeldCondition), so a holder that lost it writes nothing. ok is false when there is
// nothing to write.
func (s *Service) stockUpdate(h *stockHold, units int64, remove []string, mark map[string]string, release bool) (types.TransactWriteItem, bool) {
	cond := h.lease.HeldCondition()
	var upd expression.UpdateBuilder
	any := false
	if units > 0 {
		cond = expression.And(cond, name(attrAvailable).GreaterThanEqual(value(units)))
		upd = upd.Set(name(attrAvailable), expression.Minus(name(attrAvailable), value(units))).
			Set(name(attrReserved), expression.Plus(expression.IfNotExists(name(attrReserved), value(0)), value(units)))
		any = true
	}
	for _, a := range remove {
		upd = upd.Remove(name(a))
		any = true
	}
	for _, a := range slices.Sorted(maps.Keys(mark)) {
		upd = upd.Set(name(a), value(mark[a]))
		any = true
	}
	if release {
		upd = h.lease.ReleaseUpdate(upd)
		any = true
	}
	if !any {
		return types.TransactWriteItem{}, false
	}
	return buildUpdate(s.t.Inventory, stockKey(h.sku), upd, &cond), true
}

// held reports the critical sections of holds released by a write that decided orders
// (lost: the write was refused).
func (s *Service) held(ctx context.Context, holds map[string]*stockHold, orders int, lost bool) {
	now := s.now()
	for _, h := range holds {
		d := now.Sub(h.since)
		if !lost {
			s.millis(ctx, MetricLockHold, d)
		}
		for _, f := range s.holdObs {
			f(ctx, HoldEvent{SKU: h.sku, Held: d, Orders: orders, Lost: lost})
		}
	}
}

// AbandonedStock is a stock item whose lock a holder abandoned: its lease ended more
// than the sweep's minimum age ago and nobody took the lock since.
type AbandonedStock struct {
	SKU     string
	Owner   string    // owner name of the dead holder
	LeaseID string    // its lease id (or the handoff marker "~N" of a ticket never claimed)
	Until   time.Time // its recorded lease end
	// Orders are the orders recorded on the item: the holder's own and those that waited
	// for it. Some may be decided already (by a holder that did not remove the record).
	Orders []Order
}

// AbandonedStock scans the inventory table for stock items whose lock's lease ended
// more than minAge ago (the holder's recorded lease end, lockUntil: a live holder renews
// it), and returns them with the orders recorded on them. It reads the whole table:
// stock items and adjustment markers (which expire), one Scan page after the other,
// until the context's deadline is near.
func (s *Service) AbandonedStock(ctx context.Context, minAge time.Duration) ([]AbandonedStock, error) {
	if s.t.Inventory == "" {
		return nil, errors.New("shop: no inventory table configured")
	}
	a := lockcore.DefaultItemAttributes
	cutoff := s.now().Add(-minAge).UnixMilli()
	filter := expression.And(
		name(attrSK).Equal(value(StockSK)),
		expression.AttributeExists(name(a.LockedBy)),
		name(a.Until).LessThan(value(cutoff)))
	e, err := expression.NewBuilder().WithFilter(filter).Build()
	if err != nil {
		return nil, fmt.Errorf("shop: sweep filter: %w", err)
	}
	var out []AbandonedStock
	var start map[string]types.AttributeValue
	for {
		page, err := s.db.Scan(ctx, scanInput(s.t.Inventory, e, start))
		if err != nil {
			return out, fmt.Errorf("shop: scan %s: %w", s.t.Inventory, err)
		}
		for _, it := range page.Items {
			sku, ok := strings.CutPrefix(getS(it, attrPK), StockPKPrefix)
			if !ok {
				continue
			}
			until, _ := getN(it, a.Until)
			ab := AbandonedStock{SKU: sku, Owner: getS(it, a.Owner), LeaseID: getS(it, a.LockedBy), Until: time.UnixMilli(until)}
			for _, pe := range pendingEntries(sku, it) {
				ab.Orders = append(ab.Orders, pe.Order)
			}
			out = append(out, ab)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		start = page.LastEvaluatedKey
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*time.Second {
			return out, nil // the next sweep goes on
		}
	}
}

// ClearAbandonedStock takes over the lock of an abandoned stock item (its lease ended
// more than minAge ago by the holder's clock; see lockcore.WallClockTakeover) and
// releases it, removing the records of the orders given (re-driven by the caller), so
// that the next sweep does not find it again. It returns false when the lock could not
// be taken within a few seconds (a live holder has it since: nothing to clear).
func (s *Service) ClearAbandonedStock(ctx context.Context, a AbandonedStock, minAge time.Duration) (bool, error) {
	il, err := s.sweepLocker(minAge)
	if err != nil {
		return false, err
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	l, err := il.Acquire(lctx, stockLockKey(a.SKU), lockcore.WaitUpTo(3*time.Second), lockcore.LeaseDuration(min(s.lease, 5*time.Second)))
	if errors.Is(err, lockcore.ErrLockHeld) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("shop: take over the stock of %s: %w", a.SKU, err)
	}
	var upd expression.UpdateBuilder
	for _, o := range a.Orders {
		upd = upd.Remove(name(pendingAttr(o.OrderID)))
	}
	if len(a.Orders) == 0 {
		err = l.Release(ctx)
	} else {
		_, err = l.UpdateAndRelease(ctx, upd, expression.ConditionBuilder{})
	}
	if err != nil {
		return true, fmt.Errorf("shop: release the stock of %s: %w", a.SKU, err)
	}
	return true, nil
}

// sweepLocker is the janitor's locker of stock items: it takes a lock over by wall
// clock, once the holder's recorded lease end lies minAge in the past.
func (s *Service) sweepLocker(minAge time.Duration) (*lockcore.ItemLocker, error) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if s.sweepIL != nil && s.sweepAge == minAge {
		return s.sweepIL, nil
	}
	il, err := lockcore.NewItemLocker(s.db, s.t.Inventory,
		lockcore.WithOwner(s.owner), lockcore.WithLease(min(s.lease, 5*time.Second)),
		lockcore.WithMinLease(min(s.lease, lockcore.DefaultMinLease)), lockcore.WithClock(s.clock),
		lockcore.WithTakeover(lockcore.WallClockTakeover(minAge)))
	if err != nil {
		return nil, fmt.Errorf("shop: %w", err)
	}
	s.sweepIL, s.sweepAge = il, minAge
	return il, nil
}
