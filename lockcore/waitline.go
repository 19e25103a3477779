package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The wait line, shared by the Mutex, the TicketLock (a lock row), the ItemLocker (the
// data item) and the Queue (its ticket rows) (docs/protocol.md §3, "wait"): a waiter
// holding ticket t reads the line until serving = t, skips a served ticket that was
// withdrawn or whose holder stopped heartbeating for its lease, and gives its ticket up
// when its wait policy's time runs out. What differs between them is where the line's
// fields live and how a skip is written: a lineLayout.

// lineRow is a parsed lock row as the wait line sees it.
type lineRow interface {
	line() ticketRow            // the fields every wait line has
	servedLease() time.Duration // the lease of the served ticket
	sharedHold() time.Duration  // the hold time the lock's holders publish (0: none)
	holder() *Holder            // the served ticket's holder, for a HeldError
	turnBegan() time.Time       // when the served ticket's turn began (zero: not recorded)
	servedID() string           // names the served ticket's tenure: a change restarts the takeover clock
}

func (r ticketRow) line() ticketRow { return r }

// servedID: a lock row's served ticket, in its life.
func (r ticketRow) servedID() string { return servedKey(r) }

// servedLease is the lease every client of a TicketLock uses, recorded on the row.
func (r ticketRow) servedLease() time.Duration { return time.Duration(r.leaseMs) * time.Millisecond }

// sharedHold: TicketLock holders publish no hold time.
func (r ticketRow) sharedHold() time.Duration { return 0 }

// turnBegan is when the served ticket's turn began, as the row records it (hSince for
// ticket hFor, the writer's clock; zero: not recorded). Timing only, never safety.
func (r ticketRow) turnBegan() time.Time {
	if r.hFor != r.serving || r.hSince <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(r.hSince)
}

// lineLayout is what a wait line needs of its strategy.
type lineLayout[R lineRow] interface {
	// gone reports whether r does not show the line our ticket was issued in (no row,
	// another life, another format).
	gone(r R) bool
	// skippable reports whether the served ticket of r may be skipped now, and whether
	// because its holder stalled (obs: what this client saw of the served ticket).
	skippable(r R, obs observer, now time.Time) (ok, stalled bool)
	// skip moves serving past the served ticket of r, conditioned on the row being as
	// read; it reports whether the write succeeded.
	skip(ctx context.Context, r R, stalled bool) bool
	// skipAt is the moment the served ticket of r may be skipped, as far as the time
	// goes (obs: what this client saw of it): a lease of silence, or in wall-clock
	// mode the lease end the row records plus the allowance.
	skipAt(r R, obs observer) time.Time
	// read reads the row, strongly consistent or not.
	read(ctx context.Context, consistent bool) (R, error)
	// withdraw gives our ticket up (or passes the lock on if it was just served).
	withdraw(ctx context.Context)
}

// lineWait is one wait in a line.
type lineWait struct {
	cfg    *config
	pacing *pacing
	pk     string // the lock in pacing memory
	key    string // the lock's key, for errors
	what   string // the lock kind, for errors ("acquire", "ticket lock")
	ticket int64
	ac     *acquireConfig
	start  time.Time // when the acquisition began
	obs    *observer // what this client saw of the served ticket
	// plan: the row says when each turn began (lineRow.turnBegan), and the pacer plans
	// reads from it (pacer.began). The lock rows and the ItemLocker's item do; the
	// Queue's rows do not.
	plan bool
	// fresh (0: no bound): a waiter far back reads strongly consistently at least this
	// often, so that one served after a long wait enters with most of its lease
	// (lastBefore recent) instead of renewing at once. The ItemLocker's waiters do.
	fresh time.Duration
	// confirmTurn: our turn seen on an eventually consistent view is confirmed by a
	// strong read before the wait returns (the ItemLocker enters on the item as
	// returned: its size, its waiters). A lock row's line enters on any view of its
	// life with our ticket served (validity counts from lastBefore anyway), and
	// serving past our ticket in our life means skipped: serving only grows in a life.
	confirmTurn bool
	// eventual: the row waitTurn starts from was read eventually consistently (the
	// Queue's first read, see queueLine.read); a lock row's take returns it as written.
	eventual bool
}

// servedKey names the served ticket of a row in the observation memory.
func servedKey(r ticketRow) string { return r.life + "\x00" + strconv.FormatInt(r.serving, 10) }

// seeServed records an observation of r's served ticket in obs.
func seeServed[R lineRow](obs *observer, r R, now time.Time) {
	b := r.line()
	obs.see(&Holder{LeaseID: r.servedID(), Rev: b.rev, Lease: r.servedLease()}, now)
}

// waitTurn reads the row (as it was at sent: row) until our ticket is served in the
// life it was issued in, and returns that row and lastBefore, the send time of the last
// request whose answer showed an earlier ticket served: the lease's validity counts from
// it. It returns errTicketSkipped when our ticket was skipped or the row is gone, and
// the wait policy's or the context's end as giveUp explains it (our ticket withdrawn).
//
// It is the shell around lineState: the state decides each step from the row as read,
// what the waiter knows and the clock (lineState.step), and waitTurn sends the request
// the step names and gives the state the answer (lineState.saw).
func waitTurn[R lineRow](ctx context.Context, ly lineLayout[R], w lineWait, row R, sent time.Time) (R, time.Time, error) {
	clock := w.cfg.clock
	s := newLineState(w, row, sent, clock.Now())
	served := false
	defer func() { s.pc.done(w.pacing, w.pk, served) }()
	bo := backoff{base: w.cfg.backoffBase, cap: w.cfg.backoffCap}
	for {
		st := s.step(ly, clock.Now())
		switch st.do {
		case lineEnter:
			served = true
			return s.row, s.lastBefore, nil
		case lineSkipped:
			return s.row, s.lastBefore, errTicketSkipped
		case lineTimedOut:
			return s.row, s.lastBefore, giveUp(ctx, ly, w, s.row, nil)
		case lineSkip:
			if !ly.skip(ctx, s.row, st.stalled) {
				if err := sleep(ctx, bo.next()); err != nil {
					return s.row, s.lastBefore, giveUp(ctx, ly, w, s.row, err)
				}
			}
		case lineRead:
			if st.sleep > 0 {
				if err := sleep(ctx, st.sleep); err != nil {
					return s.row, s.lastBefore, giveUp(ctx, ly, w, s.row, err)
				}
			}
		}
		send := clock.Now()
		next, err := ly.read(ctx, st.consistent)
		if err != nil {
			if ctx.Err() != nil {
				return s.row, s.lastBefore, giveUp(ctx, ly, w, s.row, ctx.Err())
			}
			if classify(err) == errFatal {
				ly.withdraw(ctx)
				return s.row, s.lastBefore, fmt.Errorf("lockcore: %s %q: %w", w.what, w.key, err)
			}
			if err := sleep(ctx, bo.next()); err != nil {
				return s.row, s.lastBefore, giveUp(ctx, ly, w, s.row, err)
			}
			continue
		}
		s.saw(next, st.consistent, send, clock.Now())
	}
}

// lineAction is what a wait does next (lineStep).
type lineAction int

const (
	lineRead     lineAction = iota // sleep, then read the row
	lineSkip                       // skip the served ticket, then read the row
	lineEnter                      // our ticket is served: the wait is over
	lineSkipped                    // our ticket was skipped, or the row is gone
	lineTimedOut                   // the wait policy's time ran out: withdraw
)

// lineStep is one decision of a wait.
type lineStep struct {
	do         lineAction
	sleep      time.Duration // lineRead: how long to sleep first
	stalled    bool          // lineSkip: the served ticket's holder stopped heartbeating
	consistent bool          // lineRead, lineSkip: the read is strongly consistent
}

// lineState is a wait in progress: the row as last read and what the waiter has
// learned. step and saw decide without I/O; waitTurn sends.
type lineState[R lineRow] struct {
	w             lineWait
	row           R
	rowConsistent bool      // row came from a strongly consistent read (or the take)
	lastBefore    time.Time // send time of the last strong read that showed an earlier ticket served
	rtt           time.Duration
	pc            *pacer
}

func newLineState[R lineRow](w lineWait, row R, sent, now time.Time) *lineState[R] {
	pc := newPacer(w.pacing, w.pk, sent)
	s := &lineState[R]{w: w, row: row, rowConsistent: !w.eventual, lastBefore: sent, rtt: max(now.Sub(sent), time.Millisecond), pc: &pc}
	if w.plan {
		pc.began(sent, row.turnBegan())
	}
	if w.ac.urgent {
		pc.reach = minReach
	}
	seeServed(w.obs, row, now)
	return s
}

// step decides what the wait does next, at now.
//
// In only by our ticket served in the life it was issued in: an eventually consistent
// read may return the row of an earlier life (before TTL removed it) with our number
// served, and its fence epoch would make our token lower than the last holder's.
func (s *lineState[R]) step(ly lineLayout[R], now time.Time) lineStep {
	w := s.w
	b := s.row.line()
	gone := ly.gone(s.row)
	switch {
	case !s.rowConsistent && (gone || (w.confirmTurn && b.serving >= w.ticket)):
		// An eventually consistent view may be old: it may show the row before our
		// ticket was issued, or an earlier life's. That our ticket is gone is decided on
		// a consistent read, at once; with confirmTurn, our turn too.
		return lineStep{do: lineRead, consistent: true}
	case gone || b.serving > w.ticket:
		return lineStep{do: lineSkipped}
	case b.serving == w.ticket:
		return lineStep{do: lineEnter}
	}
	if ok, stalled := ly.skippable(s.row, *w.obs, now); ok {
		return lineStep{do: lineSkip, stalled: stalled, consistent: s.consistent(b, now)}
	}
	waited := now.Sub(w.start)
	p := w.ac.wait
	if !p.forever && waited >= p.max {
		if !s.rowConsistent {
			// An eventually consistent view may be old: the line it shows may have moved
			// on to our ticket. The time runs out on what a consistent read shows, taken
			// at once.
			return lineStep{do: lineRead, consistent: true}
		}
		return lineStep{do: lineTimedOut}
	}
	turn := w.pacing.turnShared(w.pk, s.rtt, s.pc.pace, s.row.sharedHold())
	d := s.pc.delay(now, w.ticket-b.serving, s.rtt, turn)
	// Never sleep past the moment the served ticket could be skipped, and look often
	// enough that the takeover clock starts soon after the holder's last heartbeat (see
	// watchEvery).
	lease := max(s.row.servedLease(), time.Millisecond)
	d = min(d, watchEvery(lease), ly.skipAt(s.row, *w.obs).Sub(now)+time.Millisecond)
	d = max(d, w.ac.pollFloor(lease))
	if !p.forever {
		d = min(d, p.max-waited)
	}
	d = max(d, time.Millisecond)
	return lineStep{do: lineRead, sleep: d, consistent: s.consistent(b, now.Add(d))}
}

// consistent decides the kind of the read sent at send. Only the next in line, and a
// waiter whose read the pacer aimed at its own turn (pacer.aimed), read strongly
// consistently; waiters further back read eventually consistent (half the RCU) and only
// time their next read by it. Such a read shows a state the row really had, so the skips
// it may lead to stay safe (each is conditioned on the row as observed), but it may be
// old, so it never moves lastBefore, and what it shows of our turn is confirmed (step).
func (s *lineState[R]) consistent(b ticketRow, send time.Time) bool {
	return s.w.ticket-b.serving <= 1 || s.pc.aimed || (s.w.fresh > 0 && send.Sub(s.lastBefore) >= s.w.fresh)
}

// saw takes the answer to a read sent at send (strongly consistent or not), received at
// now: the row, the pace of the line and the round trip.
func (s *lineState[R]) saw(next R, consistent bool, send, now time.Time) {
	b, nb := s.row.line(), next.line()
	s.rtt = (3*s.rtt + max(now.Sub(send), time.Millisecond)) / 4
	if consistent && nb.serving < s.w.ticket {
		s.lastBefore = send
	}
	if nb.life == b.life {
		s.pc.read(send, nb.serving-b.serving, s.w.pacing.turnShared(s.w.pk, s.rtt, s.pc.pace, next.sharedHold()), s.rtt)
		if s.w.plan {
			s.pc.began(send, next.turnBegan())
		}
	} else {
		s.pc.restart(send)
	}
	seeServed(s.w.obs, next, now)
	s.row, s.rowConsistent = next, consistent
}

// giveUp withdraws the ticket and explains why the wait ended (cause nil: the wait
// policy's time ran out).
func giveUp[R lineRow](ctx context.Context, ly lineLayout[R], w lineWait, row R, cause error) error {
	ly.withdraw(ctx)
	waited := w.cfg.clock.Now().Sub(w.start)
	if cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return &HeldError{Key: w.key, Holder: row.holder(), Waited: waited, TimedOut: cause == nil && !noWait(w.ac.wait), Cause: cause}
}

// withdrawal sends e, a waiter's withdrawal of its ticket (or its tombstone for a ticket
// request whose outcome is unknown), until it lands or is refused. Refused, reread gives
// the row if the refusal did not return it, and refused is told the row: the ticket was
// served meanwhile, say (handed over, or claimed by our own skip), and must be passed on;
// refused returns the next withdrawal to send, if the row calls for another (nil: done).
// It keeps trying while the detached context lasts (5 s): a waiter cut off from DynamoDB
// for longer leaves its ticket behind, and it is skipped after a lease.
func withdrawal(ctx context.Context, db DynamoDB, table string, key item, e expression.Expression,
	reread func(context.Context) (item, error), refused func(ctx context.Context, old item) *expression.Expression) {
	ctx, cancel := detached(ctx)
	defer cancel()
	bo := backoff{base: 50 * time.Millisecond, cap: 500 * time.Millisecond}
	for {
		_, err := db.UpdateItem(ctx, conditionalUpdate(table, key, e, types.ReturnValueNone), noSDKRetry)
		switch {
		case err == nil:
			return
		case classify(err) == errCondition:
			old, err := refusedItem(ctx, err, reread)
			if err != nil {
				return
			}
			next := refused(ctx, old)
			if next == nil {
				return
			}
			e = *next // after a pause: the row may be refusing it for a while
		case classify(err) == errFatal:
			return
		}
		if sleep(ctx, bo.next()) != nil {
			return
		}
	}
}

// enterLine makes a served ticket the lease l: renewed at once when renew says so (much
// of its validity went by unnoticed, or the row's TTL is too close), given its fence
// token (the row's epoch, or a new one, startEpoch, where the row has none) and its
// heartbeat; entered runs just before the heartbeat starts. The lease is not the
// caller's until enterLine returns it: a renewal that finds it skipped, or the release
// after a failed epoch, reports no lease event. giveUp explains a failed renewal.
func enterLine(ctx context.Context, l *Lease, row ticketRow, ticket int64, renew bool, ac *acquireConfig,
	startEpoch func(context.Context) (int64, error), giveUp func(error) error, entered func()) (*Lease, error) {
	obs := l.observer
	l.observer = nil
	if renew {
		if err := l.Renew(ctx); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				return nil, errTicketSkipped
			}
			return nil, giveUp(err)
		}
	}
	epoch, ok := row.epoch, row.hasEpoch
	if !ok {
		var err error
		if epoch, err = startEpoch(ctx); err != nil {
			rctx, cancel := detached(ctx)
			_ = l.Release(rctx)
			cancel()
			if errors.Is(err, ErrLeaseLost) {
				return nil, errTicketSkipped
			}
			return nil, err
		}
	}
	l.token = makeFence(epoch, ticket)
	entered()
	l.observer = obs
	l.startHeartbeat(ctx, ac.heartbeat)
	return l, nil
}

// startEpoch gives the row of a ticket just served a fence epoch, when it has none: a new
// one from the lock's keeper row (takeEpoch), written under served, the condition that
// our ticket is still served. Refused, epochOf judges the row (reread if the refusal did
// not return it): the epoch an earlier attempt of ours, or a holder before us, set, or
// the lease lost. what and key name the lock in errors.
func startEpoch(ctx context.Context, db DynamoDB, cfg *config, table, what, key string, rowKey item,
	served expression.ConditionBuilder, reread func(context.Context) (item, error), epochOf func(old item) (int64, error)) (int64, error) {
	epoch, err := takeEpoch(ctx, db, table, cfg.names, key, backoff{base: cfg.backoffBase, cap: cfg.backoffCap})
	if err != nil {
		return 0, err
	}
	e := expr(expression.NewBuilder().
		WithCondition(expression.And(served, expression.AttributeNotExists(name(attrEpoch)))).
		WithUpdate(expression.Set(name(attrEpoch), value(epoch))))
	bo := backoff{base: cfg.backoffBase, cap: cfg.backoffCap}
	for {
		_, err := db.UpdateItem(ctx, conditionalUpdate(table, rowKey, e, types.ReturnValueNone), noSDKRetry)
		if err == nil {
			return epoch, nil
		}
		switch classify(err) {
		case errCondition:
			old, _ := refusedItem(ctx, err, reread)
			return epochOf(old)
		case errFatal:
			return 0, fmt.Errorf("lockcore: %s %q: set fence epoch: %w", what, key, err)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return 0, fmt.Errorf("lockcore: %s %q: set fence epoch: %w (last error: %v)", what, key, serr, err)
		}
	}
}
