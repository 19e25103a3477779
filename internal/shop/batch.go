package shop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// BatchResult is what ProcessOrders did with one order of a batch: Err is nil when the
// order was decided (now or before: Outcome.Duplicate), else it is as ProcessOrder's.
type BatchResult struct {
	Outcome Outcome
	Err     error
}

// BatchDataSeparator separates the order ids in the data of a SKU lease taken by
// ProcessOrders (ids cannot contain control characters).
const BatchDataSeparator = "\n"

// batchJob is one distinct order of a batch.
type batchJob struct {
	idx   []int // its positions in the batch (a message delivered twice in one batch)
	order Order
	ol    *lockcore.ItemLease
	stop  context.CancelFunc // stops the order lease's heartbeat
	done  bool
}

// ProcessOrders decides the orders of one SQS batch with as few lock round trips as the
// batch allows, with the guarantees of ProcessOrder for each order:
//
//  1. It locks the order items of the distinct orders (the locking read, in order id
//     order, so two batches never deadlock) and, as ProcessOrder does, reports orders
//     already decided as duplicates and stores new ones as PENDING. A second copy of
//     an order in the same batch gets the first copy's outcome, as a duplicate.
//  2. It groups the live orders into components that share SKUs. For each component it
//     takes the union of their SKU locks with one Mutex.AcquireAll (canonical order), so
//     a hot SKU wanted by five orders of the batch is acquired, read and released once,
//     not five times. Each SKU lease carries the component's order ids (joined by
//     BatchDataSeparator), so a lease found abandoned names its orders.
//  3. It reads each SKU's stock once, then decides the orders in batch order against the
//     running stock, writing each decision in its own transaction exactly as
//     ProcessOrder does: the order item (which releases the order lock), the
//     reservations fenced by the SKU leases' tokens, and a GuardCheck of each SKU lease
//     the order uses. An order's decision is all or nothing; orders do not share
//     transactions, so one order's failure does not undo another's decision.
//  4. It releases the component's SKU locks, then moves on to the next component.
//
// Locks are waited for until SafetyMargin before the context's deadline (see
// WithWaitBudget); orders that could not get their locks in time fail with ErrBusy and
// those whose lease was lost with lockcore.ErrLeaseLost; in both cases nothing of theirs
// was written and they can be retried. Invalid orders fail with a *FieldError.
func (s *Service) ProcessOrders(ctx context.Context, orders []Order) []BatchResult {
	res := make([]BatchResult, len(orders))
	byID := map[string]*batchJob{}
	var jobs []*batchJob
	for i, o := range orders {
		res[i].Outcome.OrderID = o.OrderID
		if err := o.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if j, ok := byID[o.OrderID]; ok {
			j.idx = append(j.idx, i)
			continue
		}
		j := &batchJob{idx: []int{i}, order: o}
		byID[o.OrderID] = j
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return res
	}
	finish := func(j *batchJob, out Outcome, err error) {
		j.done = true
		for k, i := range j.idx {
			o := out
			o.OrderID = orders[i].OrderID
			if k > 0 && err == nil {
				o.Duplicate = true // the batch's second copy: the first one decided it
				s.count(ctx, MetricOrdersDuplicate)
			}
			res[i] = BatchResult{Outcome: o, Err: err}
		}
	}
	failAll := func(err error) []BatchResult {
		for _, j := range jobs {
			if !j.done {
				finish(j, Outcome{}, err)
			}
		}
		return res
	}
	if s.t.Inventory == "" || s.t.Orders == "" {
		return failAll(errors.New("shop: ProcessOrders needs the orders and inventory tables"))
	}
	lease, wait, err := s.budget(ctx)
	if err != nil {
		return failAll(err)
	}
	waitUntil := s.now().Add(wait)
	// The order locks are held while the batch waits for its SKUs: their lease is half
	// the wait (at least the SKU lease), so that they are renewed once or twice rather
	// than every half SKU lease, and a waiter for a dead holder's order lock (a retry of
	// its message) can still watch it for a whole lease within one invocation.
	orderLease := max(lease, (wait / 2).Truncate(time.Millisecond))
	left := func() lockcore.WaitPolicy { return waitPolicy(waitUntil.Sub(s.now())) }

	// 1. The orders, in id order.
	locking := slices.Clone(jobs)
	slices.SortFunc(locking, func(a, b *batchJob) int { return strings.Compare(a.order.OrderID, b.order.OrderID) })
	defer func() {
		for _, j := range jobs {
			if j.stop != nil {
				j.stop()
			}
		}
	}()
	for _, j := range locking {
		octx, stop := context.WithCancel(ctx)
		j.stop = stop
		ol, err := s.orders.Acquire(octx, orderKey(j.order.OrderID), left(), lockcore.LeaseDuration(orderLease))
		if err != nil {
			if errors.Is(err, lockcore.ErrLockHeld) || ctx.Err() != nil {
				err = busy("order "+j.order.OrderID, err)
			} else {
				err = fmt.Errorf("shop: lock order %s: %w", j.order.OrderID, err)
			}
			finish(j, Outcome{}, err)
			continue
		}
		order, dup, err := s.prepareOrder(ctx, s.orders, ol, j.order)
		if err != nil || dup != nil {
			out := Outcome{}
			if dup != nil {
				out = *dup
			}
			finish(j, out, err)
			continue
		}
		j.order, j.ol = order, ol
	}
	var live []*batchJob
	for _, j := range jobs {
		if !j.done {
			live = append(live, j)
		}
	}
	if len(live) == 0 {
		return res
	}
	if err := s.crashAt(CrashOrderLocked); err != nil {
		return failAll(err) // a dead holder: no release, no write
	}

	// 2.-4. Each group of orders that share SKUs, under one acquisition of its SKUs.
	for _, group := range skuGroups(live) {
		if err := s.decideGroup(ctx, group, lease, left, finish); err != nil {
			return failAll(err) // the crash hook: die here
		}
	}
	return res
}

// skuGroups partitions jobs into the connected components of "shares a SKU", each in
// batch order.
func skuGroups(jobs []*batchJob) [][]*batchJob {
	parent := make([]int, len(jobs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	owner := map[string]int{}
	for i, j := range jobs {
		for _, l := range j.order.Lines {
			if k, ok := owner[l.SKU]; ok {
				parent[find(i)] = find(k)
			} else {
				owner[l.SKU] = i
			}
		}
	}
	var groups [][]*batchJob
	at := map[int]int{}
	for i, j := range jobs {
		r := find(i)
		g, ok := at[r]
		if !ok {
			g = len(groups)
			at[r] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], j)
	}
	return groups
}

// decideGroup takes the SKU locks of a group of orders once, reads each SKU's stock once
// and decides the orders one by one. It returns an error only when the crash hook says
// to die; every order's own result goes to finish.
func (s *Service) decideGroup(ctx context.Context, group []*batchJob, lease time.Duration,
	left func() lockcore.WaitPolicy, finish func(*batchJob, Outcome, error),
) error {
	releaseOrders := func(jobs []*batchJob, err error) {
		for _, j := range jobs {
			if !j.done {
				s.release(ctx, "order "+j.order.OrderID, j.ol.Lease)
				finish(j, Outcome{}, err)
			}
		}
	}
	skuCtx, stopSKUHB := context.WithCancel(ctx)
	defer stopSKUHB()
	var (
		ml        *lockcore.MultiLease
		keys, ids []string
		skus      map[string]bool
		what      string
	)
	for {
		keys, ids, skus = nil, nil, map[string]bool{}
		for _, j := range group {
			ids = append(ids, j.order.OrderID)
			for _, l := range j.order.Lines {
				if !skus[l.SKU] {
					skus[l.SKU] = true
					keys = append(keys, SKULockKey(l.SKU))
				}
			}
		}
		what = "orders " + strings.Join(ids, ", ")
		var err error
		ml, err = s.skus.AcquireAll(skuCtx, keys, left(),
			lockcore.Data([]byte(strings.Join(ids, BatchDataSeparator))), lockcore.LeaseDuration(lease))
		if err == nil {
			break
		}
		var held *lockcore.HeldError
		if !errors.As(err, &held) && ctx.Err() != nil {
			// The invocation's deadline ended the wait (a request in flight at the end of
			// the wait budget): contention all the same.
			releaseOrders(group, busy(what, err))
			return nil
		}
		if !errors.As(err, &held) {
			releaseOrders(group, fmt.Errorf("shop: %s: lock stock: %w", what, err))
			return nil
		}
		// Only the orders that need the SKU still held go back; the others try again
		// without it (at once, if the wait budget is spent).
		var blocked, rest []*batchJob
		for _, j := range group {
			if slices.ContainsFunc(j.order.Lines, func(l Line) bool { return SKULockKey(l.SKU) == held.Key }) {
				blocked = append(blocked, j)
			} else {
				rest = append(rest, j)
			}
		}
		if len(blocked) == 0 {
			blocked, rest = group, nil
		}
		releaseOrders(blocked, busy("order "+blocked[0].order.OrderID, err))
		if len(rest) == 0 {
			return nil
		}
		group = rest
	}
	// Released when the group is done — not by a crash: a dead holder releases nothing.
	releaseSKUs := func() { s.releaseAll(ctx, "stock of "+what, ml) }

	// The stock, once per SKU (concurrently); the running figure follows the decisions
	// written.
	stock, err := s.readStocks(ctx, skus)
	if err != nil {
		releaseOrders(group, err)
		releaseSKUs()
		return nil
	}
	if err := s.crashAt(CrashStockLocked); err != nil {
		return err
	}
	defer releaseSKUs()

	leases := map[string]*lockcore.Lease{}
	for _, l := range ml.Leases() {
		leases[l.Key()] = l
	}
	// Decide every order in batch order against the running stock, then write the
	// decisions: each order's transaction waits only for the earlier orders that share a
	// SKU with it (they must have landed for its decision to hold), so orders on
	// different SKUs of the group are written concurrently and the group's locks are held
	// for its longest chain of transactions, not for all of them.
	type step struct {
		j      *batchJob
		status Status
		reason string
		tx     []types.TransactWriteItem
		deps   []*step
		ok     bool
		done   chan struct{}
	}
	steps := make([]*step, len(group))
	last := map[string]*step{}
	for i, j := range group {
		st := &step{j: j, done: make(chan struct{})}
		st.status, st.reason = decideFrom(stock, j.order)
		st.tx = []types.TransactWriteItem{s.finalOrderItem(j.ol, j.order, st.status, st.reason)}
		for _, l := range j.order.Lines {
			if st.status == StatusReserved {
				stock[l.SKU] -= int64(l.Qty)
				st.tx = append(st.tx, s.reserveItem(l, ml.Token(SKULockKey(l.SKU))))
			}
			if d, ok := last[l.SKU]; ok && !slices.Contains(st.deps, d) {
				st.deps = append(st.deps, d)
			}
			last[l.SKU] = st
		}
		for _, l := range j.order.Lines {
			if len(st.tx) == maxTransactItems {
				break // the stock updates' fence conditions stand in for the missing guards
			}
			g, err := s.skus.GuardCheck(leases[SKULockKey(l.SKU)])
			if err != nil {
				releaseOrders(group, err) // nothing written yet
				return nil
			}
			st.tx = append(st.tx, g)
		}
		steps[i] = st
	}
	var wg sync.WaitGroup
	for _, st := range steps {
		wg.Add(1)
		go func(st *step) {
			defer wg.Done()
			defer close(st.done)
			j := st.j
			for _, d := range st.deps {
				<-d.done
				if !d.ok {
					// An earlier decision on a shared SKU was not written: this one,
					// made against the stock it would have left, cannot be either.
					s.release(ctx, "order "+j.order.OrderID, j.ol.Lease)
					finish(j, Outcome{}, fmt.Errorf("shop: order %s: an earlier order of the batch on the same SKU was not decided (%w)",
						j.order.OrderID, lockcore.ErrLeaseLost))
					return
				}
			}
			j.stop() // the transaction unlocks the order: its heartbeat must not race it
			res, err := s.transact(ctx, st.tx)
			if err != nil && res.failed == 0 && s.landed(ctx, j.order.OrderID, j.ol, st.status) {
				err = nil // an earlier, ambiguous attempt of ours wrote it
			}
			if err != nil {
				s.release(ctx, "order "+j.order.OrderID, j.ol.Lease)
				if res.failed >= 0 {
					err = fmt.Errorf("shop: order %s: a lease was lost before the decision was written (%w): %w",
						j.order.OrderID, lockcore.ErrLeaseLost, err)
				} else {
					err = fmt.Errorf("shop: order %s: %w", j.order.OrderID, err)
				}
				finish(j, Outcome{}, err)
				return
			}
			st.ok = true
			if st.status == StatusReserved {
				s.count(ctx, MetricOrdersReserved)
			} else {
				s.count(ctx, MetricOrdersRejected)
			}
			finish(j, Outcome{Status: st.status, Reason: st.reason}, nil)
		}(st)
	}
	wg.Wait()
	return nil
}

// decideFrom decides an order against the available stock: RESERVED if every line is
// available, else REJECTED naming the lines that are short.
func decideFrom(stock map[string]int64, order Order) (Status, string) {
	var short []string
	for _, l := range order.Lines {
		if avail := stock[l.SKU]; avail < int64(l.Qty) {
			short = append(short, fmt.Sprintf("%s (requested %d, available %d)", l.SKU, l.Qty, avail))
		}
	}
	if len(short) > 0 {
		return StatusRejected, "insufficient stock: " + strings.Join(short, "; ")
	}
	return StatusReserved, ""
}

// readStocks reads the stock of every SKU concurrently: the SKU locks are held meanwhile,
// and every millisecond they are held is a millisecond every waiter waits.
func (s *Service) readStocks(ctx context.Context, skus map[string]bool) (map[string]int64, error) {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	stock := make(map[string]int64, len(skus))
	for sku := range skus {
		wg.Add(1)
		go func(sku string) {
			defer wg.Done()
			st, err := s.readStock(ctx, sku)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			stock[sku] = st.available
		}(sku)
	}
	wg.Wait()
	return stock, first
}

// releaseAll releases the leases of ml concurrently (best effort, as release does): the
// next batch waiting for any of them gets it a few round trips sooner.
func (s *Service) releaseAll(ctx context.Context, what string, ml *lockcore.MultiLease) {
	var wg sync.WaitGroup
	for _, l := range ml.Leases() {
		wg.Add(1)
		go func(l *lockcore.Lease) {
			defer wg.Done()
			s.release(ctx, what+": "+l.Key(), l)
		}(l)
	}
	wg.Wait()
}
