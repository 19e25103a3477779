package lockcore

import (
	"context"
	"errors"
	"sync"

	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Queue is a fair lock: waiters take numbered tickets and enter strictly in ticket order.
//
// Rows (in the lock table, partition key = lock key):
//
//	sk "<ns>#counter"        the last ticket issued (or given up); never expires (the fencing counter)
//	sk "<ns>#resv"           the last place in line handed out; never expires
//	sk "<ns>#t#<ticket>"     one row per waiter or holder, heartbeated at half the lease
//
// The published design increments the counter and writes the row in two calls, which
// admits two holders: A takes ticket N and is delayed, B takes N+1, writes its row, sees
// nobody ahead and enters; A's row then appears and A sees itself first. Here a ticket
// is issued by one TransactWriteItems that moves the counter up to it (conditioned on
// the counter being below it) and puts its row, so rows appear in ticket order only:
// once a ticket's row exists no earlier ticket can be issued, and a waiter that sees its
// own row in a strongly consistent Query also sees every earlier ticket's row that still
// exists. The holder is the first live row; rows whose heartbeat stopped (by the takeover
// mode's rules) are deleted, conditioned on what was observed (the row's version; in
// wall-clock mode, its recorded lease end lying past by the skew), so a live heartbeat
// always wins.
//
// Which number a waiter tries comes from a place in line: an unconditional increment of
// the "resv" row (a separate row, so that taking a place never conflicts with an
// issuing transaction). Waiters that arrive together get consecutive places and their
// transactions mostly land in that order, all of them succeeding; one that lands after a
// later number takes a new place. Trying "counter + 1" instead, a burst of waiters
// collides on every number and only one of them wins each: at 64 bench workers 3 to 4
// failed transactions (4 WCU each) per ticket, tickets issued no faster than the lock
// was released, and backing off from that starves the waiters that lost most. Numbers
// whose transaction never landed are skipped: tickets have gaps, and stay increasing in
// the order they are served. A release before the "resv" row (which moved the counter
// by one per ticket) is compatible: both only ever move the counter up — to a ticket
// whose row they put in the same transaction, or (a waiter giving up a ticket whose
// transaction may still land, see dropUncertain) past a number, which is then skipped.
//
// The fencing token is the ticket number: tickets are granted in order and the counter
// row is never deleted.
type Queue struct {
	db    DynamoDB
	table string
	cfg   *config

	pacing pacing   // per lock: this client's hold times, the queue's pace
	since  sync.Map // lease id → time.Time: when Acquire returned it
}

// NewQueue returns a Queue on the lock table. A heartbeat is required (waiting rows are
// kept alive by it); the default is half the lease.
func NewQueue(db DynamoDB, table string, opts ...Option) (*Queue, error) {
	cfg, err := clientConfig(db, table, StrategyQueue, opts)
	if err != nil {
		return nil, err
	}
	if cfg.heartbeat <= 0 {
		return nil, invalidOption("heartbeat", "a Queue needs heartbeats to keep waiting rows alive; got %s", cfg.heartbeat)
	}
	return &Queue{db: guarded(db), table: table, cfg: cfg}, nil
}

const (
	defaultQueueNamespace = "queue"
	attrNext              = "next"
	attrPlace             = "resv"
	attrTicket            = "ticket"
	attrHB                = "hb"
)

func counterSK(ns string) string         { return ns + "#counter" }
func placeSK(ns string) string           { return ns + "#resv" }
func ticketPrefix(ns string) string      { return ns + "#t#" }
func ticketSK(ns string, t int64) string { return fmt.Sprintf("%s%020d", ticketPrefix(ns), t) }

// Acquire takes a ticket and waits for its turn (as the wait policy says). On timeout
// or cancellation the ticket is withdrawn.
func (q *Queue) Acquire(ctx context.Context, key string, opts ...AcquireOption) (lease *Lease, err error) {
	if q == nil || q.cfg == nil {
		return nil, unusableLocker(q == nil, "*Queue", "NewQueue")
	}
	ac, err := q.cfg.acquireConfig(opts)
	if err != nil {
		return nil, err
	}
	if !ac.nsSet {
		ac.namespace = defaultQueueNamespace
	}
	if err := validatePK("key", key); err != nil {
		return nil, err
	}
	if err := validateSK("namespace", ac.namespace, 30); err != nil {
		return nil, err
	}
	if err := ac.refuse("a Queue", false, true); err != nil {
		return nil, err
	}
	if err := notStarted(ctx, "queue", key); err != nil {
		return nil, err
	}
	t0 := q.cfg.clock.Now()
	var st acqStats
	defer func() { q.cfg.acquired(ctx, StrategyQueue, key, ac.namespace, t0, st, lease, err) }()
	leaseID := newLeaseID(q.cfg.owner)
	ticket, start, ttl, err := q.enqueue(ctx, key, ac.namespace, leaseID, ac.lease, ac.wait)
	if err != nil {
		return nil, err
	}
	if h := q.cfg.hooks.afterTicket; h != nil {
		h(key, ticket)
	}
	l := newLease(q, q.cfg, ac.lease, key, ticketSK(ac.namespace, ticket), leaseID, Fence(ticket), start)
	// The handle keeps the waiting row alive, but it is not the caller's lease until
	// Acquire returns it: the row's loss while waiting and its withdrawal report no
	// lease event (the acquisition's own event says how it ended).
	l.observe(ctx)
	l.mu.Lock()
	obs := l.observer
	l.observer = nil
	l.mu.Unlock()
	if q.cfg.ttlTooEarly(ttl, ac.lease+q.cfg.ttlGrace) {
		// Our clock runs slow: TTL could remove our row while we wait or hold. Rewrite
		// its TTL from the server's time at once.
		if err := l.Renew(ctx); err != nil {
			rctx, cancel := detached(ctx)
			_ = l.Release(rctx)
			cancel()
			return nil, err
		}
	}
	l.startHeartbeat(ctx, ac.heartbeat)
	if err := q.wait(ctx, l, ac, ticket, t0, &st); err != nil {
		rctx, cancel := detached(ctx)
		_ = l.Release(rctx) // withdraw the ticket
		cancel()
		return nil, err
	}
	if rem := l.Remaining(); rem < ac.lease/2 {
		// Much of the validity went by unrenewed while we waited (heartbeats throttled or
		// late, a slow engine): refresh it before handing the lease over, as the Mutex and
		// the TicketLock do, rather than return a lease about to run out. No lease event:
		// the caller does not have it yet. Like a heartbeat's, the renewal has the
		// validity left to land, and a renewal landing later must not hand over a lost
		// lease. The heartbeat pauses meanwhile: it would renew the same row at once,
		// and its deadline, the same validity end, would race this one's.
		resume := l.pauseHeartbeat()
		rctx, cancel := context.WithTimeout(ctx, rem)
		err := l.Renew(rctx)
		cancel()
		if (err == nil && l.Remaining() <= 0) || (err != nil && rctx.Err() != nil && ctx.Err() == nil) {
			// The validity ran out first: lost, as the heartbeat reports it.
			err = &LeaseError{Op: "acquire", Key: key, LeaseID: leaseID, Err: ErrLeaseLost}
		}
		if err != nil {
			rctx, cancel := detached(ctx)
			_ = l.Release(rctx)
			cancel()
			return nil, err
		}
		resume()
	}
	now := q.cfg.clock.Now()
	l.mu.Lock()
	l.observer = obs
	l.acquired = now // the hold starts now, not at the enqueue
	l.mu.Unlock()
	q.since.Store(l.id, now)
	return l, nil
}

// TryAcquire takes the lock only if nobody holds or waits for it.
func (q *Queue) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return q.Acquire(ctx, key, append(opts, NoWait())...)
}

// enqueue issues a ticket and writes its row atomically. It returns the ticket, the time
// the winning write was sent (the start of the row's validity) and the TTL it gave the
// row.
func (q *Queue) enqueue(ctx context.Context, key, ns, leaseID string, lease time.Duration, wait WaitPolicy) (int64, time.Time, int64, error) {
	began := q.cfg.clock.Now()
	bo := backoff{base: q.cfg.backoffBase, cap: q.cfg.backoffCap}
	counterKey := item{q.cfg.names.PartitionKey: s(key), q.cfg.names.SortKey: s(counterSK(ns))}
	var (
		ticket         int64 // the number we try (0: take a place first)
		floor          int64 // the counter as last seen: no number up to it can be issued any more
		firstUncertain time.Time
	)
	// uncertain: the transaction for ticket (with TTL uncertainTTL) failed ambiguously
	// and could not be settled by a re-read. It may have landed (then its row is ours and
	// must be used, not left behind as an orphan every later ticket would wait a lease
	// for) or may still land while the counter stays below it; until it is settled,
	// ticket is tried again, with the same TTL.
	var (
		uncertain    bool
		uncertainTTL int64
	)
	fail := func(err error) (int64, time.Time, int64, error) { return 0, time.Time{}, 0, err }
	backOff := func(last error) error { // nil: try again; else the wait ended
		if q.cfg.retrySpent(wait, began) {
			if uncertain {
				q.dropUncertain(ctx, key, ns, ticket, leaseID)
			}
			return fmt.Errorf("lockcore: queue %q: take ticket: %w", key, last)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			if uncertain {
				q.dropUncertain(ctx, key, ns, ticket, leaseID)
			}
			return fmt.Errorf("lockcore: queue %q: %w (last error: %v)", key, serr, last)
		}
		return nil
	}
	// settle decides an uncertain ticket once the counter is known to be at c: landed
	// reports that it was issued to us.
	settle := func(c int64) (landed bool, err error) {
		if !uncertain || c < ticket {
			return false, nil // nothing uncertain, or it can still land: it is tried again
		}
		mine, err := q.ownsTicket(ctx, key, ns, ticket, leaseID)
		if err != nil {
			return false, err
		}
		if !mine {
			// The counter passed it: it can never land now, so no row of ours is older
			// than the next number's own first send.
			uncertain, firstUncertain = false, time.Time{}
		}
		return mine, nil
	}
	for {
		if ticket == 0 {
			place, err := q.takePlace(ctx, key, ns, floor)
			if err != nil {
				if classify(err) == errFatal {
					return fail(fmt.Errorf("lockcore: queue %q: take a place: %w", key, err))
				}
				if berr := backOff(err); berr != nil {
					return fail(berr)
				}
				continue
			}
			ticket = place
		}
		now := q.cfg.clock.Now()
		ttl := q.cfg.ttlAt(now, lease+q.cfg.ttlGrace)
		if uncertain {
			ttl = uncertainTTL // the same request again: a duplicate of it must fail
		}
		if h := q.cfg.hooks.beforeIssue; h != nil {
			h(key, ticket)
		}
		out, err := q.issue(ctx, counterKey, ticket, item{
			q.cfg.names.PartitionKey: s(key), q.cfg.names.SortKey: s(ticketSK(ns, ticket)),
			attrTicket: n(ticket), attrLeaseID: s(leaseID), attrOwner: s(q.cfg.owner),
			attrRev: n(1), attrHB: n(now.UnixMilli()), attrUntil: n(now.Add(lease).UnixMilli()),
			attrLeaseMs: n(lease.Milliseconds()), attrState: s(stateHeld), q.cfg.names.TTL: n(ttl),
		})
		if err == nil {
			q.cfg.observeServer(out.ResultMetadata)
			if !firstUncertain.IsZero() {
				now = firstUncertain
			}
			return ticket, now, ttl, nil
		}
		switch classify(err) {
		case errFatal:
			return fail(fmt.Errorf("lockcore: queue %q: take ticket: %w", key, err))
		case errCondition:
			// The counter has reached our number (a later waiter's transaction landed
			// first, or our own earlier attempt did), or its row exists. The
			// cancellation reason carries the counter as it is now; without it, read it.
			c, ok := int64(0), false
			var tce *types.TransactionCanceledException
			if errors.As(err, &tce) && len(tce.CancellationReasons) > 0 {
				c, ok = attrN(tce.CancellationReasons[0].Item, attrNext)
			}
			if !ok {
				counter, rerr := readItem(ctx, q.db, q.table, counterKey)
				if rerr != nil {
					if berr := backOff(rerr); berr != nil {
						return fail(berr)
					}
					continue
				}
				c, _ = attrN(counter, attrNext)
			}
			landed, serr := settle(c)
			if serr != nil {
				if berr := backOff(serr); berr != nil {
					return fail(berr)
				}
				continue
			}
			if landed {
				return ticket, firstUncertain, uncertainTTL, nil
			}
			// Our number is gone: take a new place, at once (a place is a position
			// in line, and waiting would only let later arrivals pass).
			floor = max(floor, c)
			if !uncertain {
				ticket = 0
			} else if berr := backOff(err); berr != nil {
				return fail(berr) // ours may still land: try it again, after a pause
			}
			continue
		case errAmbiguous:
			if firstUncertain.IsZero() {
				firstUncertain = now
			}
			rctx, cancel := detached(ctx)
			mine, rerr := q.ownsTicket(rctx, key, ns, ticket, leaseID)
			cancel()
			if rerr == nil && mine {
				return ticket, firstUncertain, ttl, nil // it landed
			}
			uncertain, uncertainTTL = true, ttl // tried again with the same number
		}
		// Throttled, a conflicting transaction or an unknown outcome: back off, try the
		// same number again.
		if berr := backOff(err); berr != nil {
			return fail(berr)
		}
	}
}

// issue sends the transaction that issues ticket: the counter moves up to it from below
// (absent: 0), and the ticket's row is put, or neither happens.
func (q *Queue) issue(ctx context.Context, counterKey item, ticket int64, row item) (*dynamodb.TransactWriteItemsOutput, error) {
	counterCond := expression.Or(expression.AttributeNotExists(name(attrNext)),
		expression.LessThan(name(attrNext), value(ticket)))
	ce := expr(expression.NewBuilder().WithCondition(counterCond).
		WithUpdate(expression.Set(name(attrNext), value(ticket))))
	re := expr(expression.NewBuilder().WithCondition(expression.AttributeNotExists(name(q.cfg.names.PartitionKey))))
	return q.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName:                           aws.String(q.table),
				Key:                                 counterKey,
				ConditionExpression:                 ce.Condition(),
				UpdateExpression:                    ce.Update(),
				ExpressionAttributeNames:            ce.Names(),
				ExpressionAttributeValues:           ce.Values(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}},
			{Put: &types.Put{
				TableName:                 aws.String(q.table),
				Item:                      row,
				ConditionExpression:       re.Condition(),
				ExpressionAttributeNames:  re.Names(),
				ExpressionAttributeValues: re.Values(),
			}},
		},
	}, noSDKRetry)
}

// takePlace hands out the next place in line: a number above floor (the counter as last
// seen) that no other waiter of this queue is given. A place is not a ticket: the ticket
// is issued when the transaction trying that number lands (see Queue).
func (q *Queue) takePlace(ctx context.Context, key, ns string, floor int64) (int64, error) {
	placeKey := item{q.cfg.names.PartitionKey: s(key), q.cfg.names.SortKey: s(placeSK(ns))}
	for {
		e := expr(expression.NewBuilder().WithUpdate(expression.Add(name(attrPlace), value(1))))
		out, err := q.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(q.table), Key: placeKey,
			UpdateExpression: e.Update(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
			ReturnValues: types.ReturnValueUpdatedNew,
		}, noSDKRetry)
		if err != nil {
			return 0, err
		}
		place, ok := attrN(out.Attributes, attrPlace)
		if !ok {
			return 0, fmt.Errorf("lockcore: queue %q: the place row has no number %q", key, attrPlace)
		}
		if place > floor {
			return place, nil
		}
		// The places lag behind the counter (its first use on a queue whose tickets a
		// release without places issued, or such a release running beside this one):
		// move them past it, and take a place again.
		me := expr(expression.NewBuilder().
			WithCondition(expression.Or(expression.AttributeNotExists(name(attrPlace)),
				expression.LessThan(name(attrPlace), value(floor)))).
			WithUpdate(expression.Set(name(attrPlace), value(floor))))
		_, err = q.db.UpdateItem(ctx, conditionalUpdate(q.table, placeKey, me, types.ReturnValueNone), noSDKRetry)
		if err != nil && classify(err) != errCondition {
			return 0, err
		}
	}
}

// ownsTicket reads ticket's row: whether it holds leaseID.
func (q *Queue) ownsTicket(ctx context.Context, key, ns string, ticket int64, leaseID string) (bool, error) {
	r, err := readItem(ctx, q.db, q.table, item{q.cfg.names.PartitionKey: s(key), q.cfg.names.SortKey: s(ticketSK(ns, ticket))})
	return err == nil && attrS(r, attrLeaseID) == leaseID, err
}

// dropUncertain gives up, best effort, a ticket whose transaction may have landed or may
// still land: a request aborted in flight (the caller's context was cancelled) or
// delayed can reach DynamoDB after any read or delete this waiter makes, and put a row
// nobody heartbeats — an orphan every later ticket would wait a lease for. So it first
// moves the counter up to the ticket, which makes such a copy fail its condition (it only
// skips a number, as a later ticket landing first does), then deletes the row if one
// landed.
func (q *Queue) dropUncertain(ctx context.Context, key, ns string, ticket int64, leaseID string) {
	ctx, cancel := detached(ctx)
	defer cancel()
	e := expr(expression.NewBuilder().
		WithCondition(expression.Or(expression.AttributeNotExists(name(attrNext)),
			expression.LessThan(name(attrNext), value(ticket)))).
		WithUpdate(expression.Set(name(attrNext), value(ticket))))
	counterKey := item{q.cfg.names.PartitionKey: s(key), q.cfg.names.SortKey: s(counterSK(ns))}
	bo := backoff{base: q.cfg.backoffBase, cap: q.cfg.backoffCap}
	for {
		_, err := q.db.UpdateItem(ctx, conditionalUpdate(q.table, counterKey, e, types.ReturnValueNone), noSDKRetry)
		if err == nil || classify(err) == errCondition || classify(err) == errFatal {
			break // moved, or already past the ticket (or not to be done)
		}
		if sleep(ctx, bo.next()) != nil {
			break
		}
	}
	l := &Lease{key: key, namespace: ticketSK(ns, ticket), id: leaseID, owner: q.cfg.owner, clock: q.cfg.clock}
	_ = q.release(ctx, l)
}

// wait waits in the queue's line (waitTurn) until our row is the first live one: its
// first read places us, and tells the line whether to keep it eventually consistent.
//
// Only the next in line reads strongly consistently; waiters further back read
// eventually consistently (half the RCU) and only time their next read by it. Such a
// read shows rows as they really were, so the evictions it may lead to stay safe (each
// is conditioned on the row as observed), but it may be old or miss our own new row: it
// never decides that our turn came or that our row is gone — a strongly consistent
// read, at once, does (waitTurn, confirmTurn).
//
// The first read is eventually consistent too when this client's last wait on the lock
// found others ahead and this one may wait: in a busy queue most waiters are far back
// (at 16 waiters that saved about half an RCU per critical section, a tenth of the
// queue's reads). Otherwise it is consistent: an uncontended take is served by that one
// read, and a NoWait take is refused only on what a consistent read shows.
func (q *Queue) wait(ctx context.Context, l *Lease, ac *acquireConfig, ticket int64, start time.Time, st *acqStats) error {
	mayWait := ac.wait.forever || ac.wait.max > 0
	consistent := !mayWait || !q.pacing.lineAhead(l.key)
	ql := queueLine{q: q, l: l, ns: ac.namespace, ticket: ticket, st: st, w: &queueWatch{deleted: map[string]bool{}, fullAt: q.cfg.clock.Now()}}
	defer func() { q.pacing.setLine(l.key, ql.w.sawLine) }()
	bo := backoff{base: q.cfg.backoffBase, cap: q.cfg.backoffCap}
	for {
		sent := q.cfg.clock.Now()
		v, err := ql.read(ctx, consistent)
		if err == nil {
			var obs observer
			w := lineWait{cfg: q.cfg, pacing: &q.pacing, pk: l.key, key: l.key, what: "queue", ticket: ticket, ac: ac,
				start: start, obs: &obs, confirmTurn: true, eventual: !consistent}
			_, _, err = waitTurn(ctx, ql, w, v, sent)
			if errors.Is(err, errTicketSkipped) {
				if err := l.Err(); err != nil {
					return err
				}
				return &LeaseError{Op: "wait", Key: l.key, LeaseID: l.id, Err: ErrLeaseLost}
			}
			return err
		}
		// The first read failed. As for the take (retrySpent), the policy bounds the
		// retries — its wait, and at least the backoff cap — and the error says why, not
		// ErrLockHeld: nobody may hold the lock.
		switch {
		case ctx.Err() != nil:
			return &HeldError{Key: l.key, Waited: q.cfg.clock.Now().Sub(start), Cause: ctx.Err()}
		case classify(err) == errFatal, q.cfg.retrySpent(ac.wait, start):
			return fmt.Errorf("lockcore: queue %q: read the queue: %w", l.key, err)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return &HeldError{Key: l.key, Waited: q.cfg.clock.Now().Sub(start), Cause: serr}
		}
	}
}

// scanRows is how many rows from the head of the queue a waiter reads per poll: the
// head (whose holder it watches) and a few behind it, so that dead rows at the head are
// evicted a few at a time. To be served a waiter needs no more: it is served when its own
// row is the first one, and its place in line is its ticket less the head's. Once a
// lease it reads every row ahead of it, so that a waiter that died anywhere in the queue
// is seen, watched and evicted within about two of its leases, not when its turn comes.
const scanRows = 4

// queueRow is one ticket row as read by a waiter.
type queueRow struct {
	sk     string
	ticket int64
	holder Holder
}

// queueView is the Queue's line as one read of its ticket rows shows it to the waiter
// holding ticket: served when no row is ahead of ours.
type queueView struct {
	ahead  []queueRow // rows ahead of ours, in ticket order
	mine   bool       // our row was read
	gone   bool       // every row up to ours was read, and ours is not among them
	ticket int64
	lease  time.Duration
}

// line: the first row ahead is served; with none, our ticket (ours read) or, not yet
// known (nothing read up to ours), the one before it, in another "life" so that the
// pacer does not count it as progress.
func (v queueView) line() ticketRow {
	r := ticketRow{exists: !v.gone, life: "q", serving: v.ticket}
	switch {
	case len(v.ahead) > 0:
		r.serving, r.rev = v.ahead[0].ticket, v.ahead[0].holder.Rev
	case !v.mine:
		r.serving, r.life = v.ticket-1, "?"
	}
	return r
}

func (v queueView) servedLease() time.Duration { return v.lease }
func (v queueView) sharedHold() time.Duration  { return 0 }
func (v queueView) turnBegan() time.Time       { return time.Time{} }

func (v queueView) holder() *Holder {
	if len(v.ahead) == 0 {
		return nil
	}
	h := v.ahead[0].holder
	return &h
}

func (v queueView) servedID() string {
	if len(v.ahead) == 0 {
		return ""
	}
	return v.ahead[0].sk
}

// queueLine is the Queue's lineLayout: the line is the ticket rows. Every row ahead is
// watched (Queue.dead), not only the first, so that waiters that died anywhere ahead are
// evicted together, within about a lease.
type queueLine struct {
	q      *Queue
	l      *Lease // our row's lease: its heartbeat keeps the row alive while we wait
	ns     string
	ticket int64
	st     *acqStats
	w      *queueWatch
}

// queueWatch is what one wait keeps between reads.
type queueWatch struct {
	// deleted: rows this wait evicted. A ticket's row does not come back once deleted
	// (its number lies below the counter), so an eventually consistent view that still
	// shows one is old: the row is passed over, not evicted again (a Delete and a read
	// each time, at every poll, while the view stays old). A consistent view is taken as
	// it is.
	deleted map[string]bool
	fullAt  time.Time  // when every row ahead was last read (short waits never need to)
	dead    []queueRow // the rows ahead that skippable found dead
	wake    time.Time  // when the next row ahead could be found dead (zero: unknown)
	sawLine bool       // a read showed rows ahead
}

// read scans the rows from the head of the queue up to ours: scanRows of them, all once
// a lease. Our row's lease lost (the heartbeat says so) reads as gone, without a request.
// An eventually consistent view that showed only rows this wait deleted is read again,
// consistently: it is old.
func (ql queueLine) read(ctx context.Context, consistent bool) (queueView, error) {
	v := queueView{ticket: ql.ticket, lease: ql.l.duration}
	select {
	case <-ql.l.Done():
		v.gone = true
		return v, nil
	default:
	}
	for {
		limit := int32(scanRows)
		if now := ql.q.cfg.clock.Now(); now.Sub(ql.w.fullAt) >= ql.l.duration {
			limit, ql.w.fullAt = 0, now
		}
		rows, complete, err := ql.q.scan(ctx, ql.l.key, ql.ns, ql.ticket, limit, consistent)
		if err != nil {
			return v, err
		}
		v.ahead, v.mine = nil, false
		reached, old := false, false
		for _, r := range rows {
			if r.ticket >= ql.ticket {
				reached = true
				v.mine = r.ticket == ql.ticket && r.holder.LeaseID == ql.l.id
				break
			}
			if !consistent && ql.w.deleted[r.sk] {
				old = true
				continue
			}
			v.ahead = append(v.ahead, r)
		}
		if old && len(v.ahead) == 0 && !v.mine {
			consistent = true
			continue
		}
		v.gone = !v.mine && (complete || reached)
		if len(v.ahead) > 0 {
			ql.st.contended = true
			ql.w.sawLine = true
		}
		return v, nil
	}
}

func (ql queueLine) gone(v queueView) bool { return v.gone }

// skippable: some row ahead is dead (Queue.dead); it notes them for skip, and when the
// next of the others could be.
func (ql queueLine) skippable(v queueView, _ observer, now time.Time) (ok, stalled bool) {
	ql.w.dead, ql.w.wake = ql.w.dead[:0], time.Time{}
	for _, r := range v.ahead {
		dead, in := ql.q.dead(ql.l.key, r, now)
		switch {
		case dead:
			ql.w.dead = append(ql.w.dead, r)
		case in >= 0 && (ql.w.wake.IsZero() || now.Add(in).Before(ql.w.wake)):
			ql.w.wake = now.Add(in)
		}
	}
	return len(ql.w.dead) > 0, true
}

// skip evicts the dead rows ahead; it reports whether any is gone.
func (ql queueLine) skip(ctx context.Context, _ queueView, _ bool) bool {
	evicted := false
	for _, r := range ql.w.dead {
		if ql.q.evict(ctx, ql.l.key, r) {
			ql.st.takeover = true
			ql.w.deleted[r.sk] = true
			evicted = true
		}
	}
	return evicted
}

// skipAt: when the first row ahead could be found dead (a lease from now when unknown:
// the line's reads are capped by watchEvery anyway).
func (ql queueLine) skipAt(queueView, observer) time.Time {
	if ql.w.wake.IsZero() {
		return ql.q.cfg.clock.Now().Add(ql.l.duration)
	}
	return ql.w.wake
}

// withdraw: nothing here; Acquire releases our row's lease when the wait fails.
func (ql queueLine) withdraw(context.Context) {}

// dead decides whether row r's holder stopped heartbeating; if not, it says how long
// until it could be judged dead (-1: unknown).
func (q *Queue) dead(key string, r queueRow, now time.Time) (bool, time.Duration) {
	if q.cfg.takeover.wallClock {
		exp := r.holder.Until.Add(q.cfg.takeover.skew)
		if now.After(exp) {
			return true, 0
		}
		return false, exp.Sub(now)
	}
	obsKey := q.table + "\x00" + key + "\x00" + r.sk
	o := q.cfg.seen.load(obsKey)
	o.see(&r.holder, now)
	q.cfg.seen.store(obsKey, o)
	if o.stale(now) != nil {
		q.cfg.seen.forget(obsKey)
		return true, 0
	}
	return false, o.since.Add(o.lease).Sub(now)
}

// evict deletes a dead row, conditioned on what was observed so a heartbeat that landed
// meanwhile keeps it. It reports whether the row is gone; a row it could not delete
// (alive after all, or an error) counts as live.
func (q *Queue) evict(ctx context.Context, key string, r queueRow) bool {
	var cond expression.ConditionBuilder
	if q.cfg.takeover.wallClock {
		cond = expression.And(
			expression.Equal(name(attrLeaseID), value(r.holder.LeaseID)),
			expression.LessThan(name(attrUntil), value(q.cfg.clock.Now().Add(-q.cfg.takeover.skew).UnixMilli())))
	} else {
		cond = expression.And(
			expression.Equal(name(attrLeaseID), value(r.holder.LeaseID)),
			expression.Equal(name(attrRev), value(r.holder.Rev)))
	}
	e := expr(expression.NewBuilder().WithCondition(cond))
	_, err := q.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(q.table), Key: item{q.cfg.names.PartitionKey: s(key), q.cfg.names.SortKey: s(r.sk)},
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return true
	}
	if classify(err) != errCondition {
		return false
	}
	if old, ok := conditionOld(err); ok && old != nil {
		return false // it heartbeated or changed hands: alive
	}
	// No old item: either the row is gone (released by its owner) or the engine does not
	// return old items. Only a consistent read can tell.
	cur, rerr := readItem(ctx, q.db, q.table, item{q.cfg.names.PartitionKey: s(key), q.cfg.names.SortKey: s(r.sk)})
	return rerr == nil && cur == nil
}

// scan reads the queue in ticket order, from its head up to ticket, with strongly or
// eventually consistent Queries: at most limit rows (0: all, paginated). complete says
// whether every row up to ticket was read.
func (q *Queue) scan(ctx context.Context, key, ns string, ticket int64, limit int32, consistent bool) (rows []queueRow, complete bool, err error) {
	kc := expression.Key(q.cfg.names.PartitionKey).Equal(expression.Value(key)).
		And(expression.Key(q.cfg.names.SortKey).Between(expression.Value(ticketSK(ns, 0)), expression.Value(ticketSK(ns, ticket))))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, false, err
	}
	var startKey item
	for {
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(q.table),
			KeyConditionExpression:    e.KeyCondition(),
			ExpressionAttributeNames:  e.Names(),
			ExpressionAttributeValues: e.Values(),
			ConsistentRead:            aws.Bool(consistent),
			ExclusiveStartKey:         startKey,
		}
		if limit > 0 {
			in.Limit = aws.Int32(limit)
		}
		out, err := q.db.Query(ctx, in)
		if err != nil {
			return nil, false, err
		}
		for _, it := range out.Items {
			t, _ := attrN(it, attrTicket)
			h := holderOf(it)
			if h == nil {
				continue
			}
			rows = append(rows, queueRow{sk: attrS(it, q.cfg.names.SortKey), ticket: t, holder: *h})
		}
		if len(out.LastEvaluatedKey) == 0 {
			return rows, true, nil
		}
		if limit > 0 {
			return rows, false, nil
		}
		startKey = out.LastEvaluatedKey
	}
}

func (q *Queue) rowKey(l *Lease) item {
	return item{q.cfg.names.PartitionKey: s(l.key), q.cfg.names.SortKey: s(l.namespace)}
}

func (q *Queue) ownedBy(l *Lease) expression.ConditionBuilder {
	return expression.And(
		expression.Equal(name(attrLeaseID), value(l.id)),
		expression.Equal(name(attrOwner), value(l.owner)))
}

// renew implements leaseOps (the heartbeat of waiting and holding rows).
//
// The recorded lease end only moves forward: a late copy of an earlier renewal (sent,
// timed out, retried, landing after a later renewal) must not set until back to its
// older value, or a waiter in wall-clock mode would evict us while our validity (from
// the later renewal) still runs. Where the row records a later end than ours (a clock
// stepped back), the renewal keeps it (keepUntil) and only bumps rev, hb and TTL.
func (q *Queue) renew(ctx context.Context, l *Lease) error {
	keepUntil := false
	var until int64
	return holderWrite(ctx, q.cfg, "renew", l.key,
		func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
			now := q.cfg.clock.Now()
			until = now.Add(l.duration).UnixMilli()
			upd := expression.Set(name(attrHB), value(now.UnixMilli())).
				Set(name(q.cfg.names.TTL), value(q.cfg.ttlAt(now, l.duration+q.cfg.ttlGrace))).
				Add(name(attrRev), value(1))
			cond := q.ownedBy(l)
			if !keepUntil {
				upd = upd.Set(name(attrUntil), value(until))
				cond = expression.And(cond, expression.Or(
					expression.AttributeNotExists(name(attrUntil)),
					expression.LessThanEqual(name(attrUntil), value(until))))
			}
			e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
			return q.db.UpdateItem(ctx, conditionalUpdate(q.table, q.rowKey(l), e, types.ReturnValueNone), noSDKRetry)
		},
		func(out *dynamodb.UpdateItemOutput) error {
			q.cfg.observeServer(out.ResultMetadata)
			return nil
		},
		func(ctx context.Context) (item, error) { return readItem(ctx, q.db, q.table, q.rowKey(l)) },
		func(_ context.Context, old item, _ bool) (bool, error) {
			if r, ok := attrN(old, attrUntil); ok && !keepUntil && r > until &&
				attrS(old, attrLeaseID) == l.id && attrS(old, attrOwner) == l.owner {
				keepUntil = true // still ours, with a later recorded end: keep it
				return true, nil
			}
			return false, q.classifyOld("renew", l, old)
		}, nil)
}

func (q *Queue) classifyOld(op string, l *Lease, old item) error {
	if attrS(old, attrLeaseID) == l.id && attrS(old, attrOwner) != l.owner {
		return &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: holderOf(old), Err: ErrNotOwner}
	}
	return &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Err: ErrLeaseLost}
}

// release implements leaseOps: it deletes our row, handing the lock to the next ticket.
func (q *Queue) release(ctx context.Context, l *Lease) error {
	if v, ok := q.since.LoadAndDelete(l.id); ok {
		q.pacing.held(l.key, q.cfg.clock.Now().Sub(v.(time.Time)))
	}
	e := expr(expression.NewBuilder().WithCondition(q.ownedBy(l)))
	return holderWrite(ctx, q.cfg, "release", l.key,
		func(ctx context.Context) (*dynamodb.DeleteItemOutput, error) {
			return q.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName: aws.String(q.table), Key: q.rowKey(l),
				ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}, noSDKRetry)
		},
		func(*dynamodb.DeleteItemOutput) error { return nil },
		nil,
		func(_ context.Context, old item, uncertain bool) (bool, error) {
			if old == nil && uncertain {
				// Gone: deleted by our earlier attempt, or evicted as dead before it.
				// A row is evicted only after its heartbeat stopped for a full lease,
				// and TTL removes it later still; so while this answer came within our
				// lease's local validity, nobody but our earlier attempt can have
				// deleted it.
				if l.Remaining() > 0 {
					return false, nil
				}
				return false, &LeaseError{Op: "release", Key: l.key, LeaseID: l.id, Err: errLostUnknown}
			}
			return false, q.classifyOld("release", l, old)
		}, nil)
}

// GuardCheck returns a TransactWriteItems entry that fails the caller's transaction
// unless this queue lease is still held (its row still exists with our lease id).
// It returns an *OptionError naming the lease when l is nil.
func (q *Queue) GuardCheck(l *Lease) (types.TransactWriteItem, error) {
	if l == nil {
		return types.TransactWriteItem{}, invalidOption("lease", "must not be nil")
	}
	e := expr(expression.NewBuilder().WithCondition(q.ownedBy(l)))
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(q.table), Key: q.rowKey(l),
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}}, nil
}
