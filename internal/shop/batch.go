package shop

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
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

// BatchDataSeparator separates the order ids in the data of a lock-table SKU lease
// (ids cannot contain control characters); the janitor splits a lease's data with it.
const BatchDataSeparator = "\n"

// Waiting for a stock item's holder (see decideGroup).
const (
	// pollFirst is the first read of a waiter after it recorded its orders: about one
	// critical section (a locking read and a transaction) of the holder it waits for.
	pollFirst = 60 * time.Millisecond
	// pollMax bounds the growing time between a waiter's later reads. A waiter's reads
	// are its main cost (an eventually consistent read of the stock item each); the
	// decisions it waits for are written by the holder, so reading late delays only
	// when the waiter learns of them and returns.
	pollMax = 300 * time.Millisecond
	// maxExtend bounds the stock items a holder tries to take for the waiting orders it
	// cannot decide with the items it holds (see lead).
	maxExtend = 8
)

// batchJob is one distinct order of a batch.
type batchJob struct {
	idx   []int // its positions in the batch (a message delivered twice in one batch)
	order Order
	done  bool
	dup   bool // found decided before (a late copy): its outcome is a duplicate's
}

// ProcessOrders decides the orders of one SQS batch — and any other orders waiting for
// the stock it locks — with the guarantees of ProcessOrder for each order:
//
//  1. It groups the distinct orders into components that share SKUs (a second copy of an
//     order in the same batch gets the first copy's outcome, as a duplicate, logged at
//     WARN when its content differs); the groups are decided concurrently (decideGroup).
//  2. A group's home is its first SKU (in the canonical order). If the home stock item is
//     free, the group takes its lock with the locking read, recording its orders on the
//     item in the same write, and leads (lead). If another invocation holds it, the group
//     records its orders on the item (one UpdateItem) for that holder to decide, and
//     watches the item (eventually consistent reads): a decision marker where a record
//     was gives the order's outcome, a record gone without one sends it to its order
//     item; when the item is free and its records are still there, it takes the lock and
//     leads. A group that waited long, led in vain twice, or saw the holder stalled for
//     its lease queues for the lock instead (lockcore's fair queue, which also takes a
//     dead holder's lease over) and leads patiently.
//  3. A leader takes its group's other stock items — an impatient one without waiting
//     (all at once), a patient one in canonical order waiting for each (so two leaders
//     never wait for each other) — and, without waiting, the stock items the orders
//     recorded by other invocations need besides. Meanwhile it reads the order items of
//     the orders that need no stock item but the home one, and then those of the other
//     orders it holds every stock item of (eventually consistent BatchGetItems; an order
//     it cannot decide is not read): an order decided already (a late copy, a record
//     left on an item its decider did not hold) is not decided again. It decides every
//     order recorded on the items it holds whose lines it holds, and its own, oldest
//     record first, against the stock its locking reads returned, in one transaction
//     (more only past DynamoDB's 100 items): each order's item (its decision,
//     conditioned on the order not being decided yet), and per stock
//     item the units moved from available to reserved (conditioned on enough being
//     available), the decided orders' records replaced by decision markers, the markers
//     of the holder before removed, and the lock released (its holder attributes
//     removed), conditioned on the lease (HeldCondition). Every order's decision is all
//     or nothing; an order decided meanwhile elsewhere (its condition failed) is left
//     out and the others decided again without it. An impatient leader's own orders it
//     could not decide (a stock item of theirs was held) go back to waiting.
//
// So the orders waiting for a hot SKU are decided together by whoever holds it, however
// many invocations they came from: one locking read and one transaction for as many
// orders as a transaction carries.
//
// Locks are waited for until SafetyMargin before the context's deadline (see
// WithWaitBudget); orders that were not decided in time fail with ErrBusy (their records
// stay: a later holder may decide them, and the retry then finds them decided) and those
// whose holder lost its lease with lockcore.ErrLeaseLost; nothing of theirs was written
// and they can be retried. Invalid orders fail with a *FieldError.
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
				// The first version wins, as for a redelivery in a later batch; the other
				// is acknowledged as its duplicate, so say so.
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
		if j.done {
			return
		}
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
			finish(j, Outcome{}, err)
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

	live := jobs
	if err := s.crashAt(CrashOrderLocked); err != nil {
		return failAll(err) // a dead invocation: nothing recorded, nothing locked
	}

	// 2.-3. Each group of orders that share SKUs. The groups share no SKU, so they are
	// decided concurrently: a batch waits for its slowest group rather than for all of
	// them in turn. Still deadlock-free: a leader takes its own stock items in canonical
	// order and waits for none of the others it tries to take.
	g := &groupRun{s: s, lease: lease, waitUntil: waitUntil, finish: finish}
	var (
		wg      sync.WaitGroup
		crashMu sync.Mutex
		crash   error
	)
	for _, group := range skuGroups(live) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.decideGroup(ctx, group); err != nil {
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

// groupRun is what the groups of one batch share.
type groupRun struct {
	s         *Service
	lease     time.Duration
	waitUntil time.Time
	finish    func(*batchJob, Outcome, error)
}

func (g *groupRun) left() lockcore.WaitPolicy { return waitPolicy(g.waitUntil.Sub(g.s.now())) }

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

// groupSKUs returns the SKUs of a group's orders in the canonical order (byte-wise).
func groupSKUs(group []*batchJob) []string {
	var skus []string
	for _, j := range group {
		for _, l := range j.order.Lines {
			if !slices.Contains(skus, l.SKU) {
				skus = append(skus, l.SKU)
			}
		}
	}
	slices.Sort(skus)
	return skus
}

func jobOrders(group []*batchJob) []Order {
	out := make([]Order, len(group))
	for i, j := range group {
		out[i] = j.order
	}
	return out
}

// decideGroup has a group's orders decided: by leading (lead) when its home stock item
// is free, or by the holder of the item, which finds them recorded on it (see
// ProcessOrders). It returns an error only when the crash hook says to die; every
// order's own result goes to finish.
func (g *groupRun) decideGroup(ctx context.Context, group []*batchJob) error {
	s := g.s
	home := groupSKUs(group)[0]
	fail := func(jobs []*batchJob, err error) {
		for _, j := range jobs {
			g.finish(j, Outcome{}, err)
		}
	}
	lockErr := func(err error) error {
		if errors.Is(err, lockcore.ErrLockHeld) || ctx.Err() != nil {
			return busy("orders of "+home, err)
		}
		return fmt.Errorf("shop: orders of %s: lock stock: %w", home, err)
	}
	// tryLead takes the home stock item (waiting as wait says; a probe when nil),
	// recording the orders of record in the same write, and leads. took says whether it
	// got the lock; rest are the group's orders it could not decide (an impatient leader
	// does not wait for its other stock items); crash is the crash hook's error.
	// seen (nil: none) tells the queue what this group watched of the item (lockcore.Seen).
	tryLead := func(wait *lockcore.WaitPolicy, record []Order, waited, patient bool, seen lockcore.AcquireOption) (rest []*batchJob, took bool, err, crash error) {
		hbCtx, stopHB := context.WithCancel(ctx) // the stock leases' heartbeats
		defer stopHB()
		var h *stockHold
		if wait == nil {
			h, err = s.probeStock(hbCtx, home, g.lease, record)
		} else {
			h, err = s.holdStock(hbCtx, home, *wait, g.lease, record, seen)
		}
		if err != nil {
			return group, false, err, nil
		}
		rest, crash = g.lead(ctx, hbCtx, stopHB, group, h, waited, patient)
		return rest, true, nil, crash
	}

	// Free: lead at once, the group's orders recorded on the item by the locking read.
	// An item this container found held a moment ago most likely still is: record the
	// orders first then (a locking read refused costs as much as the write that records
	// them), and take it only if that write shows it free.
	leads := 0 // impatient leads that left orders undecided
	if !s.busyLately(home) {
		rest, took, err, crash := tryLead(nil, jobOrders(group), false, false, nil)
		switch {
		case crash != nil:
			return crash
		case took && len(rest) == 0:
			return nil
		case took:
			group, leads = rest, 1
		case !errors.Is(err, lockcore.ErrLockHeld):
			fail(group, lockErr(err))
			return nil
		default:
			s.sawBusy(home)
		}
	}

	// Held: record the orders for its holder, and watch the item.
	it, err := s.publish(ctx, home, jobOrders(group))
	if err != nil {
		fail(group, err)
		return nil
	}
	for _, j := range group {
		// A decision marker where the order was to be recorded: it was decided before
		// this copy came (a late duplicate).
		j.dup = markerStatus(it[pendingAttr(j.order.OrderID)]) != ""
	}
	start := s.now()
	// How long to wait for the holder before queueing: a couple of its critical
	// sections at least, a third of the wait budget at most (a short budget queues soon:
	// the queue also takes a dead holder's lease over).
	patience := min(max(g.lease, 2*time.Second), g.waitUntil.Sub(start)/3)
	a := lockcore.DefaultItemAttributes
	seenBy, seenRev, seenAt := getS(it, a.LockedBy), getN1(it, a.Rev), start
	poll := pollFirst
	for {
		// Decided: a decision marker where the record was (the reason of a rejection is
		// on the order item, not read), or no record (decided and the marker gone: read
		// from the order item; or taken off an abandoned lock by the janitor, which
		// re-drove it: recorded again).
		var waiting, gone []*batchJob
		for _, j := range group {
			v, ok := it[pendingAttr(j.order.OrderID)]
			switch st := markerStatus(v); {
			case !ok:
				gone = append(gone, j)
			case st != "":
				if j.dup {
					s.count(ctx, MetricOrdersDuplicate)
				}
				out := Outcome{Status: st, Duplicate: j.dup}
				if st == StatusRejected {
					out.Reason = reasonElsewhere
				}
				g.finish(j, out, nil)
			default:
				waiting = append(waiting, j)
			}
		}
		if len(gone) > 0 {
			rest, err := g.learnOutcomes(ctx, gone)
			if err != nil {
				fail(append(rest, waiting...), err)
				return nil
			}
			if len(rest) > 0 {
				if it, err = s.publish(ctx, home, jobOrders(rest)); err != nil {
					fail(append(rest, waiting...), err)
					return nil
				}
				group = append(waiting, rest...)
				continue
			}
		}
		group = waiting
		if len(group) == 0 {
			return nil
		}
		now := s.now()
		if by, rev := getS(it, a.LockedBy), getN1(it, a.Rev); by != seenBy || rev != seenRev {
			seenBy, seenRev, seenAt = by, rev, now
		}
		// A holder seen unchanged for its lease (or, with wall-clock takeover, past its
		// recorded lease end) is stalled: queueing takes its lease over.
		leaseMs, _ := getN(it, a.LeaseMs)
		stalled := seenBy != "" && now.Sub(seenAt) >= time.Duration(leaseMs)*time.Millisecond
		if until, ok := getN(it, a.Until); s.wall && seenBy != "" && ok && time.UnixMilli(until).Add(s.skew).Before(now) {
			stalled = true
		}
		switch {
		case now.Sub(start) >= patience || stalled || !now.Before(g.waitUntil) || leads >= 2:
			// Waited long, led in vain, or the holder looks dead: queue for the lock
			// (fair; a dead holder's lease is taken over after being watched for its
			// length — counted from when this group first saw it unchanged, not from
			// the queueing), and lead patiently: waiting for the other stock items too.
			w := g.left()
			var seen lockcore.AcquireOption
			if it != nil {
				seen = lockcore.Seen(it, seenAt)
			}
			_, took, err, crash := tryLead(&w, nil, true, true, seen)
			switch {
			case crash != nil:
				return crash
			case took:
				return nil
			}
			// Not ours in time; decided meanwhile, perhaps.
			rest, lerr := g.learnOutcomes(ctx, group)
			if lerr != nil {
				fail(rest, lerr)
				return nil
			}
			fail(rest, lockErr(err))
			return nil
		case itemFree(it):
			// Recorded already: the locking read records nothing (an order whose record a
			// holder took off meanwhile is decided, and must not be recorded again).
			rest, took, err, crash := tryLead(nil, nil, true, false, nil)
			switch {
			case crash != nil:
				return crash
			case took && len(rest) == 0:
				return nil
			case took:
				group = rest
				leads++
			case !errors.Is(err, lockcore.ErrLockHeld):
				fail(group, lockErr(err))
				return nil
			default:
				s.sawBusy(home)
			}
		}
		d := poll/2 + rand.N(poll)/2 + poll/4 // 0.75..1.25 of poll
		poll = min(poll*3/2, pollMax)
		if err := ctxtime.Sleep(ctx, min(d, max(g.waitUntil.Sub(s.now()), time.Millisecond))); err != nil {
			rest, lerr := g.learnOutcomes(ctx, group)
			if lerr != nil {
				fail(rest, lerr)
				return nil
			}
			fail(rest, busy("orders of "+home, err))
			return nil
		}
		if it, err = s.readStockItem(ctx, home, false); err != nil {
			fail(group, fmt.Errorf("shop: orders of %s: read stock: %w", home, err))
			return nil
		}
	}
}

// itemFree reports whether a stock item's lock is free: nobody holds it and no ticket is
// outstanding (lockcore's locking read: no holder attributes, and the served ticket is
// the last one issued).
func itemFree(it map[string]types.AttributeValue) bool {
	a := lockcore.DefaultItemAttributes
	if getS(it, a.LockedBy) != "" {
		return false
	}
	serving, ok := getN(it, a.Serving)
	fence, _ := getN(it, a.Fence)
	return !ok || serving >= fence
}

func getN1(it map[string]types.AttributeValue, k string) int64 {
	n, _ := getN(it, k)
	return n
}

// learnOutcomes reads the orders of group (strongly consistent) and finishes those that
// are decided; it returns the others.
func (g *groupRun) learnOutcomes(ctx context.Context, group []*batchJob) ([]*batchJob, error) {
	recs, err := g.s.readOrders(ctx, group, true)
	if err != nil {
		return group, err
	}
	var rest []*batchJob
	for _, j := range group {
		if rec, ok := recs[j.order.OrderID]; ok && rec.Status.Final() {
			if j.dup {
				g.s.count(ctx, MetricOrdersDuplicate)
			}
			g.finish(j, Outcome{Status: rec.Status, Reason: rec.Reason, Duplicate: j.dup}, nil)
			continue
		}
		rest = append(rest, j)
	}
	return rest, nil
}

// lead holds the group's home stock item: it takes the group's other stock items in
// canonical order, tries to take the ones that other recorded orders need (without
// waiting), and decides every recorded order it can and its group's own (decideHeld). A
// patient leader waits for its other stock items (so two leaders never wait for each
// other: the canonical order); the group's orders it still could not decide — a stock
// item held until its time ran out — fail with ErrBusy. An impatient one waits for none:
// it never holds the home item while it waits, and returns its orders it could not
// decide (rest) to wait on. waited says the group recorded its orders and waited before
// it got the lock: its orders found decided were decided for it meanwhile; a group that
// took the lock at once and finds its orders decided is a late copy (a duplicate). The
// error is the crash hook's.
func (g *groupRun) lead(ctx, hbCtx context.Context, stopHB func(), group []*batchJob, home *stockHold, waited, patient bool) ([]*batchJob, error) {
	s := g.s
	holds := map[string]*stockHold{home.sku: home}
	var blocked string
	var blockErr error
	own := groupSKUs(group)[1:]
	// The order items of the orders it will decide whatever else it takes — its own and
	// those recorded on the home item that need no other stock item — read while it takes
	// the others (one eventually consistent BatchGetItem): decided ones are not decided
	// again. Those that need more are read once the takes show which of them it holds
	// (decideHeld): most orders that need another hot SKU are not decided by this holder,
	// and a read of an order it does not decide is paid again by the one that does.
	var first []Order
	for _, e := range home.entries {
		first = append(first, e.Order)
	}
	var pre preRead
	pre.start(ctx, s, onlyOn(append(first, jobOrders(group)...), home.sku))
	// Its own in canonical order: a patient leader waits for each, an impatient one for
	// none (it stops at the first held and decides what it can).
	for _, sku := range own {
		h, err := s.probeStock(hbCtx, sku, g.lease, nil)
		if errors.Is(err, lockcore.ErrLockHeld) {
			s.sawBusy(sku)
			if patient {
				h, err = s.holdStock(hbCtx, sku, g.left(), g.lease, nil)
			}
		}
		if err != nil {
			blocked, blockErr = sku, err
			break
		}
		holds[sku] = h
	}
	// Then, without waiting, those the recorded orders need besides.
	s.takeFree(hbCtx, holds, s.extension(holds), g.lease)
	if err := s.crashAt(CrashStockLocked); err != nil {
		return nil, err // a dead holder: no release, no write
	}
	decided := s.decideHeld(ctx, holds, jobOrders(group), pre.wait(), stopHB)
	var rest []*batchJob
	for _, j := range group {
		r, ok := decided[j.order.OrderID]
		switch {
		case ok && r.err != nil:
			g.finish(j, Outcome{}, r.err)
		case ok && r.elsewhere && !r.known:
			// Decided meanwhile by another holder; its outcome is on its order item.
			j.dup = j.dup || !waited
			left, err := g.learnOutcomes(ctx, []*batchJob{j})
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("shop: order %s: refused as decided, but it is not (%w)", j.order.OrderID, ErrBusy)
			}
			if len(left) > 0 {
				g.finish(j, Outcome{}, err)
			}
		case ok && r.elsewhere:
			out := r.out
			out.Duplicate = j.dup || !waited
			if out.Duplicate {
				s.count(ctx, MetricOrdersDuplicate)
			}
			g.finish(j, out, nil)
		case ok:
			g.finish(j, r.out, nil)
		case !patient && errors.Is(blockErr, lockcore.ErrLockHeld):
			rest = append(rest, j) // back to waiting
		case errors.Is(blockErr, lockcore.ErrLockHeld) || ctx.Err() != nil:
			g.finish(j, Outcome{}, busy("order "+j.order.OrderID, blockErr))
		case blockErr != nil:
			g.finish(j, Outcome{}, fmt.Errorf("shop: order %s: lock stock of %s: %w", j.order.OrderID, blocked, blockErr))
		default:
			g.finish(j, Outcome{}, fmt.Errorf("shop: order %s: not decided (%w)", j.order.OrderID, ErrBusy))
		}
	}
	return rest, nil
}

// extension returns the stock items (at most maxExtend) that the orders recorded on
// the held items need besides: each one taken lets the holder decide more of them. An
// order that needs an item this container found held lately is left to its own leader: a
// take refused costs a write for nothing.
func (s *Service) extension(holds map[string]*stockHold) []string {
	var need []string
	for _, sku := range slices.Sorted(maps.Keys(holds)) {
		for _, e := range holds[sku].entries {
			var missing []string
			for _, l := range e.Lines {
				if holds[l.SKU] == nil {
					missing = append(missing, l.SKU)
				}
			}
			if len(missing) == 0 || slices.ContainsFunc(missing, s.busyLately) {
				continue
			}
			for _, m := range missing {
				if !slices.Contains(need, m) && len(need) < maxExtend {
					need = append(need, m)
				}
			}
		}
	}
	return need
}

// takeFree takes the stock items of skus that are free, concurrently and without
// waiting (so the holder never waits for another holder out of the canonical order), and
// adds them to holds.
func (s *Service) takeFree(ctx context.Context, holds map[string]*stockHold, skus []string, lease time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sku := range skus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := s.probeStock(ctx, sku, lease, nil)
			if err != nil {
				s.sawBusy(sku)
				return
			}
			mu.Lock()
			holds[sku] = h
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// preRead reads order items in the background (see lead).
type preRead struct {
	done chan struct{}
	recs map[string]orderRecord // nil: the read failed
	ids  []string
}

func (p *preRead) start(ctx context.Context, s *Service, orders []Order) {
	p.done = make(chan struct{})
	for _, o := range orders {
		if !slices.Contains(p.ids, o.OrderID) {
			p.ids = append(p.ids, o.OrderID)
		}
	}
	go func() {
		defer close(p.done)
		if recs, err := s.readOrderIDs(ctx, p.ids, false); err == nil {
			p.recs = recs
		}
	}()
}

// wait returns the orders read: the ids asked for, and the records of those found.
func (p *preRead) wait() orderReads {
	<-p.done
	if p.recs == nil {
		return orderReads{}
	}
	return orderReads{ids: p.ids, recs: p.recs}
}

// orderReads are order items read before a decision: ids were read; recs holds those
// that exist.
type orderReads struct {
	ids  []string
	recs map[string]orderRecord
}

// onlyOn returns the orders whose lines are all on sku.
func onlyOn(orders []Order, sku string) []Order {
	return slices.DeleteFunc(orders, func(o Order) bool {
		return slices.ContainsFunc(o.Lines, func(l Line) bool { return l.SKU != sku })
	})
}

// decision is what decideHeld did with one order.
type decision struct {
	out       Outcome
	err       error
	elsewhere bool // decided before, elsewhere
	known     bool // with elsewhere: out holds that decision (read from the order item)
}

// candidate is an order recorded on held stock items (or the leader's own).
type candidate struct {
	e     pendingEntry
	items []string // the held items that record it
}

// carry are the writes a held stock item owes besides a decision's: attributes to
// remove (decision markers of earlier decisions, records of orders decided elsewhere)
// and records to replace by a decision marker (orders found decided).
type carry struct {
	remove map[string][]string
	mark   map[string]map[string]string
}

func newCarry() carry {
	return carry{remove: map[string][]string{}, mark: map[string]map[string]string{}}
}

func (c carry) setMark(sku, attr, marker string) {
	if c.mark[sku] == nil {
		c.mark[sku] = map[string]string{}
	}
	c.mark[sku][attr] = marker
}

// decideHeld decides every order recorded on the held stock items whose lines it holds,
// and the leader's own orders (own), oldest first, against the stock the locking reads
// returned. It reads their order items first (those not in read, which the leader read
// while it took its stock items; one eventually consistent BatchGetItem):
// an order found decided — a late copy recorded again, a record a holder could not take
// off (it was on an item it did not hold) — is not decided again; its records become
// markers of that decision. It writes the decisions in as few transactions as DynamoDB's
// item limit allows (usually one): each order's item (conditioned on the order not being
// decided yet: the read may lag) and per stock item one update — the units reserved, the
// decided orders' records replaced by decision markers, earlier markers removed, and in
// the last transaction the release (the holder attributes removed) — conditioned on the
// lease. stopHB stops the stock leases' heartbeats before the releasing transaction is
// sent, so that no renewal races it. An order whose condition failed was decided
// elsewhere after all: it is left out (its record removed) and the rest decided again. A
// stock lease lost fails every order left; nothing of theirs was written. With nothing
// to decide, the holds are released with lockcore's release.
func (s *Service) decideHeld(ctx context.Context, holds map[string]*stockHold, own []Order, read orderReads, stopHB func()) map[string]decision {
	out := map[string]decision{}
	skus := slices.Sorted(maps.Keys(holds))
	byID := map[string]*candidate{}
	var cands []*candidate
	for _, sku := range skus {
		for _, e := range holds[sku].entries {
			c, ok := byID[e.OrderID]
			if !ok {
				c = &candidate{e: e}
				byID[e.OrderID] = c
				cands = append(cands, c)
			} else if e.At.Before(c.e.At) {
				c.e = e // the first version recorded wins
			}
			c.items = append(c.items, sku)
		}
	}
	now := s.now()
	for _, o := range own {
		if _, ok := byID[o.OrderID]; !ok {
			c := &candidate{e: pendingEntry{Order: o, At: now}}
			byID[o.OrderID] = c
			cands = append(cands, c)
		}
	}
	var pending []*candidate
	for _, c := range cands {
		if !slices.ContainsFunc(c.e.Lines, func(l Line) bool { return holds[l.SKU] == nil }) {
			pending = append(pending, c)
		}
	}
	slices.SortFunc(pending, func(a, b *candidate) int {
		if c := a.e.At.Compare(b.e.At); c != 0 {
			return c
		}
		return strings.Compare(a.e.OrderID, b.e.OrderID)
	})
	// The decision markers the held items carry have served their waiters: they go with
	// the first write.
	next := newCarry()
	for sku, h := range holds {
		if len(h.markers) > 0 {
			next.remove[sku] = slices.Clone(h.markers)
		}
	}
	// Orders decided already are not decided again: those read before (read), and the
	// others now.
	var ids []string
	for _, c := range pending {
		if !slices.Contains(read.ids, c.e.OrderID) {
			ids = append(ids, c.e.OrderID)
		}
	}
	recs := read.recs
	if len(ids) > 0 {
		if more, err := s.readOrderIDs(ctx, ids, false); err == nil {
			recs = maps.Clone(recs)
			if recs == nil {
				recs = map[string]orderRecord{}
			}
			maps.Copy(recs, more)
		}
	}
	pending = slices.DeleteFunc(pending, func(c *candidate) bool {
		rec, ok := recs[c.e.OrderID]
		if !ok || !rec.Status.Final() {
			return false
		}
		out[c.e.OrderID] = decision{elsewhere: true, known: true,
			out: Outcome{OrderID: c.e.OrderID, Status: rec.Status, Reason: rec.Reason}}
		for _, sku := range c.items {
			next.setMark(sku, c.e.attr, decisionMarker(rec.Status))
		}
		return true
	})
	stock := make(map[string]int64, len(holds))
	for sku, h := range holds {
		stock[sku] = h.avail
	}
	decided := 0
	released := false
	defer func() {
		if !released {
			s.releaseHolds(ctx, holds)
		}
	}()
	if len(pending) == 0 {
		// Nothing to decide: lockcore's release (a write per item, not two in a
		// transaction); the markers and the records of orders found decided stay for
		// the next holder that decides.
		return out
	}
	for len(pending) > 0 {
		run := maps.Clone(stock)
		var chunk []*candidate
		var statuses []Status
		var reasons []string
		units := map[string]int64{}
		w := next
		next = newCarry()
		room := max(maxTransactItems-len(holds), 1)
		for _, c := range pending {
			if len(chunk) == room {
				break // the next transaction decides it, against what this one leaves
			}
			st, reason := decideFrom(run, c.e.Order)
			if st == StatusReserved {
				for _, l := range c.e.Lines {
					units[l.SKU] += int64(l.Qty)
					run[l.SKU] -= int64(l.Qty)
				}
			}
			chunk = append(chunk, c)
			statuses = append(statuses, st)
			reasons = append(reasons, reason)
			for _, sku := range c.items {
				w.setMark(sku, c.e.attr, decisionMarker(st))
			}
		}
		last := len(chunk) == len(pending)
		var items []types.TransactWriteItem
		for i, c := range chunk {
			items = append(items, s.decisionItem(c.e.Order, statuses[i], reasons[i]))
		}
		for _, sku := range skus {
			// Every held item fits (room): a decision is never written without its
			// reservation.
			if it, ok := s.stockUpdate(holds[sku], units[sku], w.remove[sku], w.mark[sku], last); ok {
				items = append(items, it)
			}
		}
		if last {
			stopHB()
		}
		res, err := s.transact(ctx, items)
		switch {
		case err == nil:
			for i, c := range chunk {
				if statuses[i] == StatusReserved {
					s.count(ctx, MetricOrdersReserved)
				} else {
					s.count(ctx, MetricOrdersRejected)
				}
				out[c.e.OrderID] = decision{out: Outcome{OrderID: c.e.OrderID, Status: statuses[i], Reason: reasons[i]}}
			}
			decided += len(chunk)
			stock = run
			pending = pending[len(chunk):]
			if last {
				released = true
				s.held(ctx, holds, decided, false)
			}
		case res.failed >= 0 && slices.Max(res.all) < len(chunk):
			// Those orders were decided elsewhere meanwhile (the read lagged): they are
			// left out, their records removed with the next write, and the rest is
			// decided again without them.
			next = w
			for _, i := range res.all {
				c := chunk[i]
				out[c.e.OrderID] = decision{elsewhere: true}
				pending = slices.DeleteFunc(pending, func(p *candidate) bool { return p == c })
			}
			for _, c := range chunk { // the chunk's markers are not written: only the refused orders' removals
				for _, sku := range c.items {
					delete(next.mark[sku], c.e.attr)
					if out[c.e.OrderID].elsewhere {
						next.remove[sku] = append(next.remove[sku], c.e.attr)
					}
				}
			}
			if len(pending) == 0 {
				stopHB()
				if _, err := s.transactRelease(ctx, holds, next); err == nil {
					released = true
					s.held(ctx, holds, decided, false)
				}
			}
		case res.failed >= 0:
			// A stock condition: a stock lease was lost (paused past it, taken over).
			// Nothing was written; the orders stay recorded for the next holder. Those
			// whose own condition failed too were decided elsewhere.
			s.held(ctx, holds, decided, true)
			for _, i := range res.all {
				if i < len(chunk) {
					out[chunk[i].e.OrderID] = decision{elsewhere: true}
					pending = slices.DeleteFunc(pending, func(p *candidate) bool { return p == chunk[i] })
				}
			}
			for _, c := range pending {
				out[c.e.OrderID] = decision{err: fmt.Errorf("shop: order %s: a stock lease was lost before the decision was written (%w): %w",
					c.e.OrderID, lockcore.ErrLeaseLost, err)}
			}
			pending = nil
		default:
			for _, c := range pending {
				out[c.e.OrderID] = decision{err: fmt.Errorf("shop: order %s: decision: %w", c.e.OrderID, err)}
			}
			pending = nil
		}
	}
	return out
}

// transactRelease releases the held stock items with the writes they owe, in one
// transaction.
func (s *Service) transactRelease(ctx context.Context, holds map[string]*stockHold, w carry) (txResult, error) {
	var items []types.TransactWriteItem
	for _, sku := range slices.Sorted(maps.Keys(holds)) {
		if it, ok := s.stockUpdate(holds[sku], 0, w.remove[sku], w.mark[sku], true); ok {
			items = append(items, it)
		}
	}
	return s.transact(ctx, items)
}

// decisionItem writes an order's decision to its item, conditioned on the order not
// being decided yet (no status, or PENDING): a decision is written once.
func (s *Service) decisionItem(o Order, st Status, reason string) types.TransactWriteItem {
	now := s.now().UnixMilli()
	cond := expression.Or(expression.AttributeNotExists(name(attrStatus)), name(attrStatus).Equal(value(string(StatusPending))))
	upd := expression.Set(name(attrStatus), value(string(st))).
		Set(name(attrCustomerID), value(o.CustomerID)).
		Set(name(attrLines), value(linesList(o.Lines))).
		Set(name(attrUpdatedAt), value(now)).
		Set(name(attrCreatedAt), expression.IfNotExists(name(attrCreatedAt), value(now)))
	if reason != "" {
		upd = upd.Set(name(attrReason), value(reason))
	} else {
		upd = upd.Remove(name(attrReason))
	}
	return buildUpdate(s.t.Orders, orderKey(o.OrderID), upd, &cond)
}

// publish records orders on sku's stock item for its holder to decide (an order recorded
// before keeps its first record) and returns the item as written.
func (s *Service) publish(ctx context.Context, sku string, orders []Order) (map[string]types.AttributeValue, error) {
	var upd expression.UpdateBuilder
	attrs := s.recordAttrs(sku, orders)
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		upd = upd.Set(name(k), expression.IfNotExists(name(k), value(attrs[k])))
	}
	e, err := expression.NewBuilder().WithUpdate(upd).Build()
	if err != nil {
		return nil, fmt.Errorf("shop: record orders on %s: %w", sku, err)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.t.Inventory), Key: stockKey(sku),
		UpdateExpression: e.Update(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return nil, fmt.Errorf("shop: record orders on %s: %w", sku, err)
	}
	return out.Attributes, nil
}

// readStockItem reads a SKU's stock item.
func (s *Service) readStockItem(ctx context.Context, sku string, consistent bool) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.Inventory), Key: stockKey(sku), ConsistentRead: aws.Bool(consistent),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// readOrders reads the order items of jobs in one BatchGetItem (per 100); orders without
// an item are left out.
func (s *Service) readOrders(ctx context.Context, jobs []*batchJob, consistent bool) (map[string]orderRecord, error) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.order.OrderID
	}
	return s.readOrderIDs(ctx, ids, consistent)
}

// readOrderIDs reads order items in one BatchGetItem (per 100); orders without an item
// are left out.
func (s *Service) readOrderIDs(ctx context.Context, ids []string, consistent bool) (map[string]orderRecord, error) {
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = orderKey(id)
	}
	items, err := s.batchGet(ctx, s.t.Orders, keys, consistent)
	if err != nil {
		return nil, fmt.Errorf("shop: read orders: %w", err)
	}
	out := make(map[string]orderRecord, len(items))
	for _, it := range items {
		id := getS(it, attrOrderID)
		out[id] = parseOrder(id, it)
	}
	return out, nil
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

// reasonElsewhere is the reason of a rejection a waiter learns from the decision marker
// on the stock item (the holder's own reason, naming the short lines, is on the order
// item: reading it would cost a read per rejected waiter).
const reasonElsewhere = "insufficient stock (decided by the stock's holder; the order item names the lines)"

// maxBatchGetKeys is DynamoDB's limit of keys in one BatchGetItem.
const maxBatchGetKeys = 100

// batchGetAttempts bounds the requests of one BatchGetItem whose keys DynamoDB keeps
// returning unprocessed (throttling).
const batchGetAttempts = 8

// batchGet reads the items of table with the given keys: one BatchGetItem per 100 keys,
// and again for the keys DynamoDB returns unprocessed (throttling) after a short
// backoff, at most batchGetAttempts requests each. Keys without an item are left out of
// the result.
func (s *Service) batchGet(ctx context.Context, table string, keys []map[string]types.AttributeValue, consistent bool) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	for len(keys) > 0 {
		n := min(len(keys), maxBatchGetKeys)
		req := map[string]types.KeysAndAttributes{table: {Keys: keys[:n], ConsistentRead: aws.Bool(consistent)}}
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

// busyFor is how long a stock item found held counts as busy (busyLately).
const busyFor = 2 * time.Second

// sawBusy notes that sku's stock item was found held.
func (s *Service) sawBusy(sku string) {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	if s.busy == nil {
		s.busy = map[string]time.Time{}
	}
	now := s.now()
	s.busy[sku] = now
	if len(s.busy) > 1024 {
		for k, t := range s.busy {
			if now.Sub(t) > busyFor {
				delete(s.busy, k)
			}
		}
	}
}

// busyLately reports whether sku's stock item was found held within busyFor, and the
// item not taken free since.
func (s *Service) busyLately(sku string) bool {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	t, ok := s.busy[sku]
	return ok && s.now().Sub(t) < busyFor
}
