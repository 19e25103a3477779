package shop

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/ctxtime"
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

// orderPollInterval is the least time between the reads of a batch waiting for an order
// lock. The holder is another copy of the same order (a producer's retry, a duplicate
// delivery) deciding it, or a dead holder to be taken over after a lease: either way the
// waiter will find the order decided or take it over, and noticing that half a second
// late costs less than reading every few milliseconds while the holder waits for its
// SKUs for seconds (about 1.4 reads per order in the demo before).
const orderPollInterval = 500 * time.Millisecond

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
//     already decided as duplicates and stores new ones as PENDING (in the write that
//     locks them). A second copy of an order in the same batch gets the first copy's
//     outcome, as a duplicate (logged at WARN when its content differs: the first wins).
//  2. It groups the live orders into components that share SKUs. For each component it
//     takes the union of their SKU locks with one Mutex.AcquireAll (canonical order), so
//     a hot SKU wanted by five orders of the batch is acquired, read and released once,
//     not five times. Each SKU lease carries the component's order ids (joined by
//     BatchDataSeparator), so a lease found abandoned names its orders.
//  3. It reads each SKU's stock once (one BatchGetItem for the group), then decides the
//     orders in batch order against the running stock and writes all of the
//     component's decisions in one transaction
//     (more only past DynamoDB's 100 items): each order's item (its decision, which
//     unlocks it) and one update per SKU moving the reserved units, conditioned on
//     available >= units and fenced by the SKU lease's token (see writeDecisions for
//     why no GuardCheck items). Every order's decision is all or nothing; an order
//     whose own lock was lost meanwhile fails alone and the others are decided again
//     without it, so one order's failure does not undo another's decision.
//  4. It releases the component's SKU locks. Components share no SKU and are decided
//     concurrently.
//
// Locks are waited for until SafetyMargin before the context's deadline (see
// WithWaitBudget); orders that could not get their locks in time fail with ErrBusy and
// those whose lease was lost with lockcore.ErrLeaseLost; in both cases nothing of theirs
// was written and they can be retried. Invalid orders fail with a *FieldError.
func (s *Service) ProcessOrders(ctx context.Context, orders []Order) []BatchResult {
	res := make([]BatchResult, len(orders))
	if s.legacy {
		// The legacy mode decides orders one by one, as its handler does.
		for i, o := range orders {
			out, err := s.processOrderLegacy(ctx, o)
			out.OrderID = o.OrderID
			res[i] = BatchResult{Outcome: out, Err: err}
		}
		return res
	}
	byID := map[string]*batchJob{}
	var jobs []*batchJob
	for i, o := range orders {
		res[i].Outcome.OrderID = o.OrderID
		if err := o.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if j, ok := byID[o.OrderID]; ok {
			if o.CustomerID != j.order.CustomerID || !slices.Equal(o.Lines, j.order.Lines) {
				// The first version wins, as for a redelivery in a later batch
				// (prepareOrder); the other is acknowledged as its duplicate, so say so.
				s.log.WarnContext(ctx, "order delivered twice in one batch with different content; keeping the first version",
					"orderId", o.OrderID, "index", i, "firstIndex", j.idx[0])
			}
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
	var finishMu sync.Mutex // groups are decided concurrently
	finish := func(j *batchJob, out Outcome, err error) {
		finishMu.Lock()
		defer finishMu.Unlock()
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
	// The order locks are held while the batch waits for its SKUs: their lease is three
	// quarters of the wait (at least the SKU lease), so that a batch that waits for
	// seconds renews them once at most (each renewal is a write per order: at 100
	// concurrent invocations, with half the wait, a third of all order-item writes), and
	// a waiter for a dead holder's order lock (a retry of its message, which takes its
	// order locks first thing) can still watch it for a whole lease within one
	// invocation.
	orderLease := max(lease, (wait * 3 / 4).Truncate(time.Millisecond))
	left := func() lockcore.WaitPolicy { return waitPolicy(waitUntil.Sub(s.now())) }

	// 1. The orders, in id order, each waited for in one go. An order held by another
	// invocation holds up the rest of the batch meanwhile (with a copy of it that takes
	// the whole invocation, the others' SKU waits have no budget left). Setting held
	// orders aside and waiting for them after the others was tried and not kept: set
	// aside at once (NoWait), batches went on together and contended for the SKUs all at
	// once (SKU-lock reads per order 1.9-2.7 -> 4.4-4.5 at 40 invocations, back to back);
	// set aside after a quarter of the budget, a retry waiting for a dead holder's order
	// lock could no longer watch it for a whole order lease in one wait to take it over
	// (waits do not share observations) — the demo's crash orders were never decided.
	locking := slices.Clone(jobs)
	slices.SortFunc(locking, func(a, b *batchJob) int { return strings.Compare(a.order.OrderID, b.order.OrderID) })
	defer func() {
		for _, j := range jobs {
			if j.stop != nil {
				j.stop()
			}
		}
	}()
	// Takeover observations of the later orders overlap the wait for an earlier one: a
	// batch that died holding all its order locks comes back as one batch, and waiting for
	// its abandoned locks one after the other took over one per invocation (observation
	// takes a full order lease, three quarters of the wait), so its later orders reached
	// the dead-letter queue. Once an order lock has kept the batch waiting for a while
	// (watchAfter), every later order that a read shows locked by a holder past its lease
	// end (orderAbandoned) is watched concurrently by a take that lets the lock go at
	// once: it holds nothing while it waits, so no two batches can wait for each other,
	// and the lock it took over is free when the batch's own take in id order reaches it.
	pre := s.preObserver(ctx, orderLease, left)
	for i, j := range locking {
		octx, stop := context.WithCancel(ctx)
		j.stop = stop
		watch := time.AfterFunc(watchAfter(orderLease), func() { pre.start(locking[i+1:]) })
		ol, err := s.orders.Acquire(octx, orderKey(j.order.OrderID), left(), lockcore.LeaseDuration(orderLease),
			s.pendingOrder(j.order), lockcore.MinPollInterval(orderPollInterval))
		watch.Stop()
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
	pre.stop()
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

	// 2.-4. Each group of orders that share SKUs, under one acquisition of its SKUs. The
	// groups share no SKU, so they are decided concurrently: a batch waits for its
	// slowest group rather than for all of them in turn, and holds its order locks that
	// much shorter. Still deadlock-free: every batch takes all its order locks before any
	// SKU lock, and each group its SKUs in canonical order.
	var (
		wg      sync.WaitGroup
		crashMu sync.Mutex
		crash   error
	)
	for _, group := range skuGroups(live) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.decideGroup(ctx, group, lease, left, finish); err != nil {
				crashMu.Lock()
				crash = err
				crashMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if crash != nil {
		return failAll(crash) // the crash hook: die here
	}
	return res
}

// releaseJobs releases the order locks of jobs, concurrently: one after the other, each
// bounded by the cleanup timeout, a slow table could keep the invocation past its
// deadline.
func (s *Service) releaseJobs(ctx context.Context, jobs []*batchJob) {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.release(ctx, "order "+j.order.OrderID, j.ol.Lease)
		}()
	}
	wg.Wait()
}

// watchAfter is how long a batch waits for one order lock before it looks at the later
// ones (see ProcessOrders): an eighth of the order lease, at least orderPollInterval.
// Most such waits are for a live copy of the order, decided within a second or two, and
// each look costs a read per later order; a takeover by observation needs a whole order
// lease of watching, and the order lease plus an eighth still fits in the wait (the
// order lease is three quarters of it).
func watchAfter(orderLease time.Duration) time.Duration {
	return max(orderPollInterval, orderLease/8)
}

// preObserver watches order locks for a batch waiting for an earlier one (see
// ProcessOrders): each watcher takes its order's lock, waiting as the batch would, and
// releases it at once.
type preObserver struct {
	s       *Service
	ctx     context.Context
	cancel  context.CancelFunc
	lease   time.Duration
	left    func() lockcore.WaitPolicy
	mu      sync.Mutex
	started bool
	stopped bool
	wg      sync.WaitGroup
}

func (s *Service) preObserver(ctx context.Context, lease time.Duration, left func() lockcore.WaitPolicy) *preObserver {
	pctx, cancel := context.WithCancel(ctx)
	return &preObserver{s: s, ctx: pctx, cancel: cancel, lease: lease, left: left}
}

// start watches the orders of jobs (once per batch).
func (p *preObserver) start(jobs []*batchJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.stopped {
		return
	}
	p.started = true
	for _, j := range jobs {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if !p.s.orderAbandoned(p.ctx, j.order.OrderID) {
				return // free, or held by a live holder: the batch's own take waits for it
			}
			l, err := p.s.orders.Acquire(p.ctx, orderKey(j.order.OrderID), p.left(), lockcore.LeaseDuration(p.lease),
				p.s.pendingOrder(j.order), lockcore.MinPollInterval(orderPollInterval))
			if err == nil {
				p.s.release(p.ctx, "order "+j.order.OrderID+" (watched)", l.Lease)
			}
		}()
	}
}

// orderAbandoned says whether an eventually consistent read shows the order's item
// locked under a lease whose recorded end (lockcore's lockUntil, the holder's wall
// clock) has passed: a holder that stopped renewing. Only such an order is watched. A
// live holder — a copy of the order being decided, which renews its lease — is left to
// the batch's own wait: watching it cost a take, a release and a read every 500 ms for
// nothing (demo at 100 invocations: about 0.5 calls per order). A retry of a crashed
// batch comes back after the queue's visibility timeout, longer than the order lease,
// so its dead holders' lease ends have passed. The clock only decides what to watch:
// the takeover itself is the batch's by observation, as always.
func (s *Service) orderAbandoned(ctx context.Context, id string) bool {
	a := lockcore.DefaultItemAttributes
	e, err := expression.NewBuilder().WithProjection(expression.NamesList(name(a.LockedBy), name(a.Until))).Build()
	if err != nil {
		return true // cannot happen (a static projection); watch
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.Orders), Key: orderKey(id),
		ProjectionExpression: e.Projection(), ExpressionAttributeNames: e.Names(),
	})
	if err != nil || getS(out.Item, a.LockedBy) == "" {
		return false
	}
	until, ok := getN(out.Item, a.Until)
	return !ok || until < s.now().UnixMilli()
}

// stop ends the watchers still waiting and waits for them.
func (p *preObserver) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
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

// decideGroup takes the stock items of a group of orders once (the locking read: lock
// and stock in one call per SKU), decides the orders one by one against the running
// stock and writes the decisions in a transaction that also releases the stock items.
// It returns an error only when the crash hook says to die; every order's own result
// goes to finish.
func (s *Service) decideGroup(ctx context.Context, group []*batchJob, lease time.Duration,
	left func() lockcore.WaitPolicy, finish func(*batchJob, Outcome, error),
) error {
	releaseOrders := func(jobs []*batchJob, err error) {
		var undone []*batchJob
		for _, j := range jobs {
			if !j.done {
				undone = append(undone, j)
			}
		}
		s.releaseJobs(ctx, undone)
		for _, j := range undone {
			finish(j, Outcome{}, err)
		}
	}
	// The stock leases' heartbeats run until the releasing transaction is sent.
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	var holds map[string]*stockHold
	for {
		var skus []string
		var record []Order
		for _, j := range group {
			record = append(record, j.order)
			for _, l := range j.order.Lines {
				if !slices.Contains(skus, l.SKU) {
					skus = append(skus, l.SKU)
				}
			}
		}
		slices.Sort(skus)
		// The group's orders are recorded on its first stock item in the write that
		// locks it, so that a holder that dies leaves them where the janitor finds them.
		var blocked string
		var err error
		holds, blocked, err = s.holdAllStock(hbCtx, skus, left, lease, record)
		if err == nil {
			break
		}
		what := "orders of " + strings.Join(skus, ", ")
		if !errors.Is(err, lockcore.ErrLockHeld) && ctx.Err() != nil {
			// The invocation's deadline ended the wait (a request in flight at the end of
			// the wait budget): contention all the same.
			releaseOrders(group, busy(what, err))
			return nil
		}
		if !errors.Is(err, lockcore.ErrLockHeld) {
			releaseOrders(group, fmt.Errorf("shop: %s: lock stock: %w", what, err))
			return nil
		}
		// Only the orders that need the SKU still held go back; the others try again
		// without it (at once, if the wait budget is spent).
		var stuck, rest []*batchJob
		for _, j := range group {
			if slices.ContainsFunc(j.order.Lines, func(l Line) bool { return l.SKU == blocked }) {
				stuck = append(stuck, j)
			} else {
				rest = append(rest, j)
			}
		}
		if len(stuck) == 0 {
			stuck, rest = group, nil
		}
		releaseOrders(stuck, busy("order "+stuck[0].order.OrderID, err))
		if len(rest) == 0 {
			return nil
		}
		group = rest
	}
	if err := s.crashAt(CrashStockLocked); err != nil {
		return err // a dead holder: no release, no write
	}
	// The group's records on its first stock item go with the release.
	first := holds[slices.Min(slices.Collect(maps.Keys(holds)))]
	for _, j := range group {
		first.remove = append(first.remove, pendingAttr(j.order.OrderID))
	}
	s.writeDecisions(ctx, group, holds, stopHB, finish)
	return nil
}

// writeDecisions decides the orders of a group in batch order against the running stock
// (as the locking reads returned it) and writes the decisions in as few transactions as
// DynamoDB's item limit allows (usually one per group): each order's item (its decision,
// which also unlocks it, conditioned on the order lease) and, per SKU, one update moving
// the group's reserved units from available to reserved, conditioned on enough being
// available and on the stock lease (HeldCondition). The last transaction also releases
// every stock item (its holder attributes removed, in the same update), so the release
// costs no call of its own; stopHB stops the stock leases' heartbeats before it is sent,
// so that no renewal races it.
//
// A transaction is all or nothing, so every order's decision is too, and the running
// stock a later order was decided against is exactly what the earlier orders left. One
// order's failure does not undo another's: an order whose own lock was lost (its item's
// condition failed) is failed alone and the others are decided again without it. A
// stock lease lost (its condition failed) fails every order left: nothing was written.
func (s *Service) writeDecisions(ctx context.Context, group []*batchJob, holds map[string]*stockHold,
	stopHB func(), finish func(*batchJob, Outcome, error),
) {
	type decision struct {
		j      *batchJob
		status Status
		reason string
	}
	stock := make(map[string]int64, len(holds))
	for sku, h := range holds {
		stock[sku] = h.avail
	}
	skus := slices.Sorted(maps.Keys(holds))
	pending := slices.Clone(group)
	decided := 0
	released := false
	failRest := func(err error) {
		s.releaseJobs(ctx, pending)
		for _, j := range pending {
			finish(j, Outcome{}, err)
		}
		pending = nil
	}
	defer func() {
		if !released {
			s.releaseHolds(ctx, holds)
		}
	}()
	for len(pending) > 0 {
		// Decide from the stock as the landed transactions left it.
		run := maps.Clone(stock)
		var (
			chunk []decision
			items []types.TransactWriteItem
			units = map[string]int64{} // per SKU, the chunk's reserved units
		)
		// Room for the orders: every held stock item may be written by the last
		// transaction (the release), and an earlier one writes those it reserves on.
		room := max(maxTransactItems-len(holds), 1)
		for _, j := range pending {
			if len(chunk) == room {
				break // the next transaction decides it, against what this one leaves
			}
			st, reason := decideFrom(run, j.order)
			if st == StatusReserved {
				for _, l := range j.order.Lines {
					units[l.SKU] += int64(l.Qty)
					run[l.SKU] -= int64(l.Qty)
				}
			}
			chunk = append(chunk, decision{j: j, status: st, reason: reason})
		}
		last := len(chunk) == len(pending)
		for _, d := range chunk {
			d.j.stop() // the transaction unlocks the order: its heartbeat must not race it
			items = append(items, s.finalOrderItem(d.j.ol, d.j.order, d.status, d.reason))
		}
		var holdFor []*stockHold // the stock items, in items' order after the orders
		for _, sku := range skus {
			h := holds[sku]
			rm := h.remove
			if !last {
				h.remove = nil // the records go with the release
			}
			it, ok := s.stockUpdate(h, units[sku], last)
			h.remove = rm
			if ok && len(items) < maxTransactItems {
				items = append(items, it)
				holdFor = append(holdFor, h)
			}
		}
		if last {
			stopHB()
		}
		res, err := s.transact(ctx, items)
		if err != nil && res.failed >= 0 && res.failed < len(chunk) && res.ambiguous {
			// An earlier attempt of ours may have landed and unlocked the orders.
			landed := true
			for _, d := range chunk {
				if !s.landed(ctx, d.j.order.OrderID, d.j.ol, d.status) {
					landed = false
					break
				}
			}
			if landed {
				err = nil
			}
		}
		switch {
		case err == nil:
			for _, d := range chunk {
				if d.status == StatusReserved {
					s.count(ctx, MetricOrdersReserved)
				} else {
					s.count(ctx, MetricOrdersRejected)
				}
				finish(d.j, Outcome{Status: d.status, Reason: d.reason}, nil)
			}
			decided += len(chunk)
			stock = run
			pending = pending[len(chunk):]
			if last {
				released = len(holdFor) == len(holds)
				if !released {
					// Held items the transaction had no room for: nothing to write there.
					rest := map[string]*stockHold{}
					for sku, h := range holds {
						if !slices.Contains(holdFor, h) {
							rest[sku] = h
						}
					}
					s.releaseHolds(ctx, rest)
					released = true
				}
				s.held(ctx, holds, decided, false)
			}
		case res.failed >= 0 && res.failed < len(chunk):
			// That order's lock was taken over: it alone goes back; the rest is decided
			// again without it.
			j := chunk[res.failed].j
			s.release(ctx, "order "+j.order.OrderID, j.ol.Lease)
			finish(j, Outcome{}, fmt.Errorf("shop: order %s: its lease was lost before the decision was written (%w): %w",
				j.order.OrderID, lockcore.ErrLeaseLost, err))
			pending = slices.DeleteFunc(pending, func(p *batchJob) bool { return p == j })
			if len(pending) == 0 && !released {
				// Nobody left to decide: the stock items still carry the records.
				stopHB()
				if _, err := s.transactRelease(ctx, holds); err == nil {
					released = true
					s.held(ctx, holds, decided, false)
				}
			}
		case res.failed >= 0:
			// A stock condition: a stock lease was lost (paused past it, taken over).
			// Nothing was written; every order left goes back.
			s.held(ctx, holds, decided, true)
			failRest(fmt.Errorf("shop: %s: a stock lease was lost before the decisions were written (%w): %w",
				"orders of the batch", lockcore.ErrLeaseLost, err))
		default:
			failRest(fmt.Errorf("shop: decisions of the batch: %w", err))
		}
	}
}

// transactRelease releases held stock items and removes their records, in one
// transaction (a group's orders all failed alone: their records must not outlive the
// hold).
func (s *Service) transactRelease(ctx context.Context, holds map[string]*stockHold) (txResult, error) {
	var items []types.TransactWriteItem
	for _, sku := range slices.Sorted(maps.Keys(holds)) {
		if it, ok := s.stockUpdate(holds[sku], 0, true); ok {
			items = append(items, it)
		}
	}
	return s.transact(ctx, items)
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

// maxBatchGetKeys is DynamoDB's limit of keys in one BatchGetItem.
const maxBatchGetKeys = 100

// batchGetAttempts bounds the requests of one BatchGetItem whose keys DynamoDB keeps
// returning unprocessed (throttling).
const batchGetAttempts = 8

// batchGet reads the items of table with the given keys, strongly consistent: one
// BatchGetItem per 100 keys, and again for the keys DynamoDB returns unprocessed
// (throttling) after a short backoff, at most batchGetAttempts requests each. Keys
// without an item are left out of the result.
func (s *Service) batchGet(ctx context.Context, table string, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	for len(keys) > 0 {
		n := min(len(keys), maxBatchGetKeys)
		req := map[string]types.KeysAndAttributes{table: {Keys: keys[:n], ConsistentRead: aws.Bool(true)}}
		keys = keys[n:]
		wait := 10 * time.Millisecond
		for attempt := 1; len(req[table].Keys) > 0; attempt++ {
			if attempt > 1 {
				if attempt > batchGetAttempts {
					return nil, fmt.Errorf("keys still unprocessed after %d requests", batchGetAttempts)
				}
				if err := ctxtime.Sleep(ctx, wait); err != nil {
					return nil, err
				}
				wait = min(2*wait, 200*time.Millisecond)
			}
			out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, err
			}
			items = append(items, out.Responses[table]...)
			req = out.UnprocessedKeys
		}
	}
	return items, nil
}
