package lockcore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TicketLock is a fair lease mutex whose whole queue lives in one row of the lock table:
// a ticket counter and a now-serving counter, as the ticket locks of operating-system
// kernels. Waiters enter strictly in the order they took their tickets, and a critical
// section costs two writes (take a ticket, release) plus a few one-RCU reads however
// many clients wait, which makes it the cheapest fair lock for hot keys.
//
// Row (partition key = lock key, sort key = "<namespace>#ticket"):
//
//	next       last ticket issued             serving   ticket allowed in
//	rev        bumps on every handoff and heartbeat of the holder
//	life       random id of this row's life   epoch     fence epoch of this life
//	leaseMs    lease of the clients using the lock (all must agree while it is in use)
//	w#<id>     one per issued, unfinished ticket: ticket − 1, written by the same update
//	           that issued the ticket (a waiter's ambiguous ticket request is settled by it);
//	           <id> is the suffix of the lease id "<owner>#<id>"
//	rel, skip  the last ticket released by its holder / skipped by a waiter
//
// Protocol:
//
//	acquire    one UpdateItem: ADD next 1 (and the ticket's w# entry), returning the row.
//	           If serving equals the ticket the lock is ours: one call uncontended.
//	wait       GetItem of the row (strongly consistent for the next in line, eventually
//	           consistent further back), timed by position in the queue and the
//	           queue's measured pace, until serving reaches the ticket.
//	release    serving = ticket + 1, if serving = ticket (one UpdateItem).
//	heartbeat  rev + 1, if serving = ticket, every heartbeat interval.
//
// Validity: a waiter whose ticket comes up counts its lease from the send time of its
// last request that still showed an earlier ticket served. That request was processed
// before the write that served our ticket, so before any other client can have seen the
// new (serving, rev) — and a client skips a served ticket only after seeing the same
// (serving, rev) for a full lease on its own clock (observation takeover; wall clocks
// play no part, so WallClockTakeover is refused). No claim write is needed.
//
// A ticket whose owner stopped waiting (timeout, cancellation) loses its w# entry; a
// served ticket without an entry is skipped at once. A ticket whose owner crashed, as
// holder or while waiting, is skipped after a full lease without a heartbeat.
//
// The fencing token is epoch<<32 | ticket: tickets are served in increasing order, and
// a row deleted by TTL and created again starts a new epoch from the same keeper rows
// the Mutex uses.
//
// A release whose response was lost and whose retry finds the ticket passed is settled
// from the row (settleRelease, shared with the Mutex): rel = the ticket means it landed;
// skip = the ticket, or a force record naming the lease, means the lease was lost; while
// the lease is still valid by the holder's clock and the row names the same last
// force-release as when the ticket was served, only the release can have passed it (no
// waiter skips a valid lease). Otherwise Release reports ErrLeaseLost with
// ErrUnknownOutcome.
type TicketLock struct {
	db    DynamoDB
	table string
	cfg   *config

	pacing pacing // per lock: this client's hold times, the queue's pace
}

// NewTicketLock returns a TicketLock on the lock table. A heartbeat is required (a
// holder that stops heartbeating is skipped after a lease) and takeover is by
// observation only.
func NewTicketLock(db DynamoDB, table string, opts ...Option) (*TicketLock, error) {
	cfg, err := clientConfig(db, table, StrategyTicket, opts)
	if err != nil {
		return nil, err
	}
	if cfg.heartbeat <= 0 {
		return nil, invalidOption("heartbeat", "a TicketLock needs heartbeats: waiters skip a holder that stops them; got %s", cfg.heartbeat)
	}
	if cfg.takeover.wallClock {
		return nil, invalidOption("takeover", "a TicketLock supports ObserveTakeover only (a handoff records no wall-clock lease end), got %s", cfg.takeover)
	}
	return &TicketLock{db: guarded(db), table: table, cfg: cfg}, nil
}

// Owner returns this client's owner name.
func (t *TicketLock) Owner() string { return t.cfg.owner }

const (
	ticketSuffix = "#ticket"
	attrServing  = "serving"
	attrLife     = "life"
	attrRel      = "rel"
	attrSkip     = "skip"
	waiterPrefix = "w#"
)

// TicketInfo is what TicketLock.Get reports.
type TicketInfo struct {
	Key, Namespace string
	Serving        int64         // ticket allowed in (it may be finished: see Held)
	Next           int64         // last ticket issued
	Held           bool          // the served ticket is a live holder's (or a waiter's about to notice)
	Waiting        int           // unfinished tickets behind the served one
	Rev            int64         // bumps on every handoff and heartbeat
	Lease          time.Duration // lease of the lock's clients
	Token          Fence         // fencing token of the served ticket (0 before the first epoch)
}

type ticketRow struct {
	exists                bool
	next, serving, rev    int64
	epoch                 int64
	hasEpoch              bool
	life                  string
	leaseMs               int64
	rel, skip             int64
	hFor, hSince          int64            // ticket hFor's turn began at hSince (ms; see turnBegan)
	waiters               map[int64]string // ticket → w# attribute
	ownTicket             int64            // ticket of the w# entry asked about (0: none)
	ownEntry, servedEntry bool
	tombs                 tombstones // w# attribute → ms: withdrawn before issued
	// The last force-release recorded on the row (see settleRelease): its id, the lease
	// it ended and that lease's token.
	forcedID, forcedLease string
	forcedToken           int64
}

func parseTicketRow(it item, wattr string) ticketRow {
	return parseQueueRow(it, attrNext, 1, wattr)
}

// parseQueueRow reads a one-row ticket queue (TicketLock's row, or a Mutex row in the
// ticket format): counter names the attribute that issues tickets, and a w# entry holds
// its ticket − offset.
func parseQueueRow(it item, counter string, offset int64, wattr string) ticketRow {
	r := ticketRow{exists: it != nil, waiters: map[int64]string{}, tombs: map[string]int64{}}
	r.next, _ = attrN(it, counter)
	r.serving, _ = attrN(it, attrServing)
	r.rev, _ = attrN(it, attrRev)
	r.epoch, r.hasEpoch = attrN(it, attrEpoch)
	r.life = attrS(it, attrLife)
	r.leaseMs, _ = attrN(it, attrLeaseMs)
	r.rel, _ = attrN(it, attrRel)
	r.skip, _ = attrN(it, attrSkip)
	r.hFor, _ = attrN(it, attrHFor)
	r.hSince, _ = attrN(it, attrHSince)
	r.forcedID, r.forcedLease = attrS(it, attrForcedID), attrS(it, attrForcedLease)
	r.forcedToken, _ = attrN(it, attrForcedToken)
	for k := range it {
		if strings.HasPrefix(k, waiterPrefix) {
			if ts, ok := strings.CutPrefix(attrS(it, k), tombPrefix); ok {
				ms, _ := strconv.ParseInt(ts, 10, 64)
				r.tombs[k] = ms
				continue
			}
			if v, ok := attrN(it, k); ok {
				r.waiters[v+offset] = k
				if k == wattr {
					r.ownTicket, r.ownEntry = v+offset, true
				}
			}
		}
	}
	_, r.servedEntry = r.waiters[r.serving]
	return r
}

func (t *TicketLock) keyOf(key, ns string) item {
	return item{t.cfg.names.PartitionKey: s(key), t.cfg.names.SortKey: s(ns + ticketSuffix)}
}

func (t *TicketLock) validate(key, ns string) error {
	if err := validatePK("key", key); err != nil {
		return err
	}
	return validateSK("namespace", ns, len(ticketSuffix))
}

// expiry is the TTL every write gives the row: far enough that TTL never removes a row
// in use (every holder writes at least every heartbeat interval). lease is the lease of
// the row's clients where the writer knows it (0: the client's own).
func (t *TicketLock) expiry(now time.Time, lease time.Duration) int64 {
	return t.cfg.ttlAt(now, max(t.cfg.retention, max(lease, t.cfg.lease)+t.cfg.ttlGrace))
}

// ticketHold is one ticket of one acquisition: the leaseOps of its Lease.
type ticketHold struct {
	t      *TicketLock
	key    string
	ns     string
	ticket int64
	life   string
	wattr  string
	lease  time.Duration // the acquisition's lease: the lease of the lock's clients
	since  time.Time     // when Acquire returned (for the hold-time estimate)
	gc     []string      // old tombstones seen when the ticket was issued: removed on release
	// tomb: a request for this ticket failed ambiguously and may still land (a retry
	// issued it): its entry is left as a tombstone when the ticket ends, not removed, so
	// that the late copy fails its condition instead of issuing a ticket nobody holds.
	tomb bool

	skippedStalled bool // this waiter skipped a holder that had stopped heartbeating
	// behind: when our turn came, later tickets were issued; the release then records
	// when the next turn begins (hFor, hSince), which their waiters plan by.
	behind bool

	forced forceMark // the row's last force-release while the ticket was served
}

// tombstone is the value of a withdrawn (or uncertain) ticket entry written at now.
func tombstone(now time.Time) string { return tombPrefix + strconv.FormatInt(now.UnixMilli(), 10) }

// endEntry adds the end of a ticket's entry attr to u (TicketLock, Mutex): removed, or a
// tombstone where a late copy of an ambiguous request for it could still land.
func endEntry(u expression.UpdateBuilder, attr string, tomb bool, now time.Time) expression.UpdateBuilder {
	if tomb {
		return u.Set(name(attr), value(tombstone(now)))
	}
	return u.Remove(name(attr))
}

// Acquire takes a ticket and waits for its turn, as the wait policy says (default: until
// ctx ends). On timeout or cancellation the ticket is withdrawn. NoWait (TryAcquire)
// takes a ticket only if nobody holds or waits for the lock, so a failed try writes
// nothing.
//
// The lease's heartbeat runs until Release or until ctx ends, so pass a context that
// lives as long as the critical section.
func (t *TicketLock) Acquire(ctx context.Context, key string, opts ...AcquireOption) (lease *Lease, err error) {
	if t == nil || t.cfg == nil {
		return nil, unusableLocker(t == nil, "*TicketLock", "NewTicketLock")
	}
	ac, err := t.cfg.acquireConfig(opts)
	if err != nil {
		return nil, err
	}
	if ac.data != nil {
		return nil, invalidOption("data", "a TicketLock stores no data with its leases")
	}
	if err := t.validate(key, ac.namespace); err != nil {
		return nil, err
	}
	if err := notStarted(ctx, "ticket lock", key); err != nil {
		return nil, err
	}
	start := t.cfg.clock.Now()
	var st acqStats
	defer func() { t.cfg.acquired(ctx, StrategyTicket, key, ac.namespace, start, st, lease, err) }()
	pk := key + "\x00" + ac.namespace
	if l := t.cfg.bypass.reenter(ctx, pk, ac); l != nil {
		return l, nil
	}
	defer func() { t.cfg.bypass.bypassable(lease, pk, ac) }()
	for {
		h, row, sent, err := t.take(ctx, key, ac, start)
		if err != nil {
			if errors.Is(err, ErrLockHeld) {
				st.contended = true
			}
			return nil, err
		}
		st.contended = st.contended || row.serving != h.ticket
		if f := t.cfg.hooks.afterTicket; f != nil {
			f(key, h.ticket)
		}
		l, err := t.wait(ctx, h, row, sent, ac, start)
		st.takeover = st.takeover || h.skippedStalled
		if errors.Is(err, errTicketSkipped) {
			continue // our ticket was skipped while we were away: queue again
		}
		return l, err
	}
}

// TryAcquire takes the lock only if nobody holds or waits for it (NoWait).
func (t *TicketLock) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return t.Acquire(ctx, key, append(opts, NoWait())...)
}

var errTicketSkipped = errors.New("lockcore: ticket skipped")

func noWait(p WaitPolicy) bool { return !p.forever && p.max == 0 }

// take issues a ticket. It returns the row as the issuing update left it and the send
// time of the first request that may have issued it.
func (t *TicketLock) take(ctx context.Context, key string, ac *acquireConfig, start time.Time) (_ *ticketHold, _ ticketRow, _ time.Time, retErr error) {
	h := &ticketHold{t: t, key: key, ns: ac.namespace, life: randomHex(8), wattr: waiterPrefix + t.entryID(), lease: ac.lease}
	leaseMs := ac.lease.Milliseconds()
	bo := backoff{base: t.cfg.backoffBase, cap: t.cfg.backoffCap}
	var first time.Time
	uncertain := false // a ticket request may have landed, or may still land
	defer func() {
		if retErr != nil && uncertain {
			t.withdrawUnknown(ctx, key, ac.namespace, h)
		}
	}()
	for {
		// A lease length may change only while nobody holds or waits (serving > next).
		cond := expression.And(
			expression.AttributeNotExists(name(h.wattr)),
			expression.Or(
				expression.AttributeNotExists(name(attrLeaseMs)),
				expression.Equal(name(attrLeaseMs), value(leaseMs)),
				expression.GreaterThan(name(attrServing), name(attrNext))))
		if noWait(ac.wait) {
			cond = expression.And(cond, expression.Or(
				expression.AttributeNotExists(name(attrNext)),
				expression.GreaterThan(name(attrServing), name(attrNext))))
		}
		now := t.cfg.clock.Now()
		upd := expression.Add(name(attrNext), value(1)).
			Set(name(h.wattr), expression.IfNotExists(name(attrNext), value(0))).
			Set(name(attrServing), expression.IfNotExists(name(attrServing), value(1))).
			Set(name(attrRev), expression.IfNotExists(name(attrRev), value(0))).
			Set(name(attrLife), expression.IfNotExists(name(attrLife), value(h.life))).
			Set(name(attrLeaseMs), value(leaseMs)).
			Set(name(t.cfg.names.TTL), value(t.expiry(now, ac.lease)))
		e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
		if first.IsZero() {
			first = now
		}
		out, err := t.db.UpdateItem(ctx, conditionalUpdate(t.table, t.keyOf(key, ac.namespace), e, types.ReturnValueAllNew), noSDKRetry)
		if err == nil {
			t.cfg.observeServer(out.ResultMetadata)
			row := parseTicketRow(out.Attributes, h.wattr)
			h.ticket, h.life = row.ownTicket, row.life
			h.gc = row.tombs.old(now)
			h.tomb = uncertain
			return h, row, first, nil
		}
		switch classify(err) {
		case errCondition:
			old, ok := conditionOld(err)
			if !ok {
				if old, err = t.read(ctx, key, ac.namespace); err != nil {
					return nil, ticketRow{}, time.Time{}, fmt.Errorf("lockcore: ticket lock %q: take ticket: %w", key, err)
				}
			}
			row := parseTicketRow(old, h.wattr)
			_, tomb := row.tombs[h.wattr]
			switch {
			case row.ownEntry && uncertain: // an earlier, ambiguous attempt of ours landed
				h.ticket, h.life = row.ownTicket, row.life
				h.gc = row.tombs.old(now)
				h.tomb = true
				return h, row, first, nil
			case tomb && uncertain:
				// An earlier, ambiguous attempt of ours landed and its ticket has ended
				// since (withdrawn): every copy of it now fails, so take a ticket under a
				// new id.
				h.wattr, uncertain, first = waiterPrefix+t.entryID(), false, time.Time{}
				continue
			case row.ownEntry || tomb:
				// Another acquisition's entry (or its tombstone) under our random id: it
				// is not ours, whatever its ticket. Draw another id, as the Mutex does.
				h.wattr = waiterPrefix + t.entryID()
				continue
			}
			// Only withdrawn tickets left to serve: nobody holds or waits (the lease may
			// change then, and a NoWait take may enter). Skip them and try again.
			if t.skipGone(ctx, key, ac.namespace, row) {
				continue
			}
			if row.leaseMs != leaseMs && row.serving <= row.next && !noWait(ac.wait) {
				return nil, ticketRow{}, time.Time{}, &OptionError{Field: "lease", Err: ErrInvalidOption,
					Reason: fmt.Sprintf("ticket lock %q is in use with a %s lease; this client's is %s (clients of one ticket lock must agree while it is in use)",
						key, time.Duration(row.leaseMs)*time.Millisecond, ac.lease)}
			}
			// NoWait and the lock is busy.
			return nil, ticketRow{}, time.Time{}, &HeldError{Key: key, Holder: row.holder(), Waited: t.cfg.clock.Now().Sub(start)}
		case errFatal:
			return nil, ticketRow{}, time.Time{}, fmt.Errorf("lockcore: ticket lock %q: take ticket: %w", key, err)
		}
		// Throttled, or ambiguous: the retry carries the same w# entry, so if the first
		// attempt landed its condition fails and returns the row with our ticket.
		if classify(err) == errAmbiguous {
			uncertain = true
		}
		if t.cfg.retrySpent(ac.wait, start) {
			return nil, ticketRow{}, time.Time{}, fmt.Errorf("lockcore: ticket lock %q: take ticket: %w", key, err)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return nil, ticketRow{}, time.Time{}, &HeldError{Key: key, Waited: t.cfg.clock.Now().Sub(start), Cause: serr}
		}
	}
}

// holder describes the served ticket for errors (the row records no owner names).
func (r ticketRow) holder() *Holder {
	if !r.exists || r.serving > r.next {
		return nil
	}
	return &Holder{LeaseID: fmt.Sprintf("ticket %d", r.serving), Rev: r.rev,
		Lease: time.Duration(r.leaseMs) * time.Millisecond, Token: makeFence(r.epoch, r.serving)}
}

// skipGone skips served tickets whose owners withdrew (no w# entry), as long as the row
// stays as observed. It reports whether it skipped anything.
func (t *TicketLock) skipGone(ctx context.Context, key, ns string, row ticketRow) bool {
	if !row.exists || row.serving > row.next || row.servedEntry {
		return false
	}
	return t.skip(ctx, key, ns, row, "")
}

// skip moves serving past the served ticket, conditioned on the row being as observed,
// removing the ticket's entry (wattr) if it has one.
func (t *TicketLock) skip(ctx context.Context, key, ns string, row ticketRow, wattr string) bool {
	cond := expression.And(
		expression.Equal(name(attrServing), value(row.serving)),
		expression.Equal(name(attrRev), value(row.rev)),
		expression.Equal(name(attrLife), value(row.life)))
	now := t.cfg.clock.Now()
	upd := expression.Set(name(attrServing), value(row.serving+1)).
		Set(name(attrSkip), value(row.serving)).
		Set(name(t.cfg.names.TTL), value(t.expiry(now, time.Duration(row.leaseMs)*time.Millisecond))).
		Add(name(attrRev), value(1))
	upd = turnBegins(upd, row.serving+1, row.next > row.serving, now)
	if wattr != "" {
		// A tombstone, not a removal: the skipped ticket may have come from a retried,
		// ambiguous take whose late copy could otherwise still land and issue a ticket
		// nobody holds (the Mutex's skip does the same).
		upd = endEntry(upd, wattr, true, now)
	}
	e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
	_, err := t.db.UpdateItem(ctx, conditionalUpdate(t.table, t.keyOf(key, ns), e, types.ReturnValueNone), noSDKRetry)
	return err == nil
}

// wait waits in the row's line until our ticket is served (waitTurn), then enters.
func (t *TicketLock) wait(ctx context.Context, h *ticketHold, row ticketRow, sent time.Time, ac *acquireConfig, start time.Time) (*Lease, error) {
	var obs observer
	pk := h.key + "\x00" + h.ns // the lock, in this client's pacing memory
	w := lineWait{cfg: t.cfg, pacing: &t.pacing, pk: pk, key: h.key, what: "ticket lock", ticket: h.ticket, ac: ac, start: start, obs: &obs, plan: true}
	row, lastBefore, err := waitTurn(ctx, ticketLine{t, h}, w, row, sent)
	if err != nil {
		return nil, err
	}
	return t.enter(ctx, h, row, lastBefore, ac, start)
}

// ticketLine is the TicketLock's wait line: the row <ns>#ticket.
type ticketLine struct {
	t *TicketLock
	h *ticketHold
}

func (l ticketLine) gone(r ticketRow) bool { return !r.exists || r.life != l.h.life }

// skippable: the served ticket was withdrawn — only on a view that shows it issued: an
// eventually consistent read may show the row before it was, and an uncontended take
// does not bump rev, so the skip's condition would still hold against a live holder —
// or its owner stopped heartbeating for a full lease.
func (l ticketLine) skippable(r ticketRow, obs observer, now time.Time) (bool, bool) {
	if !r.servedEntry && r.serving <= r.next {
		return true, false
	}
	return obs.leaseID == servedKey(r) && obs.rev == r.rev && now.Sub(obs.since) >= r.servedLease(), true
}

func (l ticketLine) skip(ctx context.Context, r ticketRow, stalled bool) bool {
	wattr := ""
	if stalled {
		wattr = r.waiters[r.serving]
	}
	if !l.t.skip(ctx, l.h.key, l.h.ns, r, wattr) {
		return false
	}
	if stalled {
		l.h.skippedStalled = true
	}
	return true
}

func (l ticketLine) skipAt(r ticketRow, obs observer) time.Time {
	return obs.since.Add(max(r.servedLease(), time.Millisecond))
}

func (l ticketLine) read(ctx context.Context, consistent bool) (ticketRow, error) {
	it, err := getItem(ctx, l.t.db, l.t.table, l.t.keyOf(l.h.key, l.h.ns), consistent)
	return parseTicketRow(it, l.h.wattr), err
}

func (l ticketLine) withdraw(ctx context.Context) { l.t.withdraw(ctx, l.h) }

// enter makes a served ticket a lease: its validity counts from lastBefore, the send time
// of the last read that still showed an earlier ticket served (refreshed at once if much
// of it went by unnoticed); a row without a fence epoch gets one.
func (t *TicketLock) enter(ctx context.Context, h *ticketHold, row ticketRow, lastBefore time.Time, ac *acquireConfig, start time.Time) (*Lease, error) {
	// The lease id is "<owner>#<entry id>", as a Mutex lease's: the row records the
	// entry, not the owner, and the Inspector shows the entry id (LeaseSuffix), so that
	// a lease id in a holder's logs can be matched to the lock's "ticket N".
	l := newLease(h, t.cfg, ac.lease, h.key, h.ns, t.cfg.owner+nsSeparator+strings.TrimPrefix(h.wattr, waiterPrefix), 0, lastBefore)
	h.forced.see(row) // row shows our ticket served (see settleRelease)
	h.behind = row.next > h.ticket
	return enterLine(ctx, l, row, h.ticket, l.Remaining() < ac.lease/2, ac,
		func(ctx context.Context) (int64, error) { return t.startEpoch(ctx, h) },
		func(err error) error { return t.giveUp(ctx, h, row, start, err) },
		func() { h.since = t.cfg.clock.Now() })
}

// giveUp withdraws the ticket and explains why the wait ended (cause nil: the wait
// policy's time ran out).
func (t *TicketLock) giveUp(ctx context.Context, h *ticketHold, row ticketRow, start time.Time, cause error) error {
	return giveUp(ctx, ticketLine{t, h}, lineWait{cfg: t.cfg, key: h.key, start: start}, row, cause)
}

// withdraw gives up a ticket: it removes the ticket's entry while the ticket is not
// served yet, or releases it if it just was.
func (t *TicketLock) withdraw(ctx context.Context, h *ticketHold) {
	now := t.cfg.clock.Now()
	e := expr(expression.NewBuilder().
		WithCondition(expression.And(
			expression.LessThan(name(attrServing), value(h.ticket)),
			expression.Equal(name(attrLife), value(h.life)),
			expression.AttributeExists(name(h.wattr)))).
		// The TTL from the lock's lease (the holder's too), not this client's default: a
		// shorter one could let TTL remove the row under a live holder.
		WithUpdate(endEntry(expression.Set(name(t.cfg.names.TTL), value(t.expiry(now, h.lease))), h.wattr, h.tomb, now)))
	withdrawal(ctx, t.db, t.table, t.keyOf(h.key, h.ns), e,
		func(ctx context.Context) (item, error) { return t.read(ctx, h.key, h.ns) },
		func(ctx context.Context, old item) *expression.Expression {
			row := parseTicketRow(old, h.wattr)
			if row.exists && row.life == h.life && row.serving == h.ticket && row.ownEntry {
				l := &Lease{key: h.key, namespace: h.ns, clock: t.cfg.clock, duration: h.lease}
				_ = h.release(ctx, l) // served meanwhile: pass it on
			}
			return nil
		})
}

// Tombstones. A ticket request whose outcome is unknown when its waiter gives up (its
// context was cancelled while the request was in flight, say) may land later, after any
// read the waiter could make; nobody would then withdraw it, and the queue would idle a
// lease when its turn came. So the waiter withdraws the request itself: it sets its w#
// entry to a tombstone unless the entry exists. A request landing after that fails its
// attribute_not_exists(w#) condition and issues nothing; a request that had landed is
// withdrawn as usual. Tombstones older than tombLife are removed by the next holder's
// release: by then no request can land (DynamoDB refuses a signed request more than
// five minutes after its signing time).
const (
	tombPrefix = "x"
	tombLife   = 15 * time.Minute
	maxTombGC  = 16
)

// tombstones maps a withdrawn entry's id to when it was withdrawn (ms).
type tombstones map[string]int64

// old returns up to maxTombGC tombstones older than tombLife, for removal.
func (t tombstones) old(now time.Time) []string {
	var old []string
	for k, ms := range t {
		if now.Sub(time.UnixMilli(ms)) > tombLife && len(old) < maxTombGC {
			old = append(old, k)
		}
	}
	return old
}

// withdrawUnknown withdraws a ticket request whose outcome is unknown: a tombstone if it
// has not landed (so that it never will), the ticket's withdrawal if it has.
func (t *TicketLock) withdrawUnknown(ctx context.Context, key, ns string, h *ticketHold) {
	now := t.cfg.clock.Now()
	e := expr(expression.NewBuilder().
		WithCondition(expression.AttributeNotExists(name(h.wattr))).
		// A row in use keeps its TTL (its lease may not be ours: the request may have
		// failed on that); a row this creates gets one, so that TTL removes it.
		WithUpdate(expression.Set(name(h.wattr), value(tombstone(now))).
			Set(name(t.cfg.names.TTL), expression.IfNotExists(name(t.cfg.names.TTL), value(t.expiry(now, h.lease))))))
	withdrawal(ctx, t.db, t.table, t.keyOf(key, ns), e,
		func(ctx context.Context) (item, error) { return t.read(ctx, key, ns) },
		func(ctx context.Context, old item) *expression.Expression {
			if row := parseTicketRow(old, h.wattr); row.ownEntry {
				h.ticket, h.life = row.ownTicket, row.life
				// Another copy of the request may still be on its way: leave a
				// tombstone, not a removed entry, for it to fail on.
				h.tomb = true
				t.withdraw(ctx, h)
			} // else our tombstone, from an earlier attempt
			return nil
		})
}

// startEpoch gives the row a fence epoch, for a holder that found none (the row's first
// life, or the first after TTL deleted it).
func (t *TicketLock) startEpoch(ctx context.Context, h *ticketHold) (int64, error) {
	served := expression.And(
		expression.Equal(name(attrServing), value(h.ticket)),
		expression.Equal(name(attrLife), value(h.life)))
	return startEpoch(ctx, t.db, t.cfg, t.table, "ticket lock", h.key, t.keyOf(h.key, h.ns), served,
		func(ctx context.Context) (item, error) { return t.read(ctx, h.key, h.ns) },
		func(old item) (int64, error) {
			row := parseTicketRow(old, h.wattr)
			if row.exists && row.life == h.life && row.serving == h.ticket && row.hasEpoch {
				return row.epoch, nil // set by our earlier attempt, or by a holder before us
			}
			return 0, &LeaseError{Op: "acquire", Key: h.key, Err: ErrLeaseLost}
		})
}

func (t *TicketLock) read(ctx context.Context, key, ns string) (item, error) {
	return readItem(ctx, t.db, t.table, t.keyOf(key, ns))
}

// Get reads the lock's state with a strongly consistent read. It never changes anything.
func (t *TicketLock) Get(ctx context.Context, key string, opts ...AcquireOption) (*TicketInfo, error) {
	it, ns, err := lookup(ctx, t.cfg, key, opts, t.validate, t.read)
	if err != nil {
		return nil, err
	}
	row := parseTicketRow(it, "")
	info := &TicketInfo{Key: key, Namespace: ns, Serving: row.serving, Next: row.next,
		Rev: row.rev, Lease: time.Duration(row.leaseMs) * time.Millisecond}
	if row.exists && row.serving <= row.next {
		info.Held = row.servedEntry
		info.Token = makeFence(row.epoch, row.serving)
		for tk := range row.waiters {
			if tk > row.serving {
				info.Waiting++
			}
		}
	}
	return info, nil
}

// GuardCheck returns a TransactWriteItems entry that fails the caller's transaction
// unless this lease is still held (its ticket is still served).
// It returns an *OptionError naming the lease when l is nil.
func (t *TicketLock) GuardCheck(l *Lease) (types.TransactWriteItem, error) {
	if l == nil {
		return types.TransactWriteItem{}, invalidOption("lease", "must not be nil")
	}
	h, _ := l.ops.(*ticketHold)
	var ticket int64
	life := ""
	if h != nil {
		ticket, life = h.ticket, h.life
	}
	e := expr(expression.NewBuilder().WithCondition(expression.And(
		expression.Equal(name(attrServing), value(ticket)),
		expression.Equal(name(attrLife), value(life)))))
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(t.table), Key: t.keyOf(l.key, l.namespace),
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, nil
}

func (h *ticketHold) ours() expression.ConditionBuilder {
	return expression.And(
		expression.Equal(name(attrServing), value(h.ticket)),
		expression.Equal(name(attrLife), value(h.life)))
}

// renew implements leaseOps: the holder's heartbeat.
func (h *ticketHold) renew(ctx context.Context, l *Lease) error {
	t := h.t
	return holderWrite(ctx, t.cfg, "renew", h.key,
		func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
			e := expr(expression.NewBuilder().WithCondition(h.ours()).WithUpdate(
				expression.Add(name(attrRev), value(1)).
					Set(name(h.t.cfg.names.TTL), value(t.expiry(t.cfg.clock.Now(), l.duration)))))
			return t.db.UpdateItem(ctx, conditionalUpdate(t.table, t.keyOf(h.key, h.ns), e, types.ReturnValueNone), noSDKRetry)
		},
		func(out *dynamodb.UpdateItemOutput) error {
			t.cfg.observeServer(out.ResultMetadata)
			return nil
		},
		nil,
		func(context.Context, item, bool) (bool, error) {
			return false, &LeaseError{Op: "renew", Key: h.key, LeaseID: l.id, Err: ErrLeaseLost}
		}, nil)
}

// release implements leaseOps: it serves the next ticket.
func (h *ticketHold) release(ctx context.Context, l *Lease) error {
	t := h.t
	if !h.since.IsZero() {
		t.pacing.held(h.key+"\x00"+h.ns, t.cfg.clock.Now().Sub(h.since))
	}
	return holderWrite(ctx, t.cfg, "release", h.key,
		func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
			now := t.cfg.clock.Now()
			upd := expression.Set(name(attrServing), value(h.ticket+1)).
				Set(name(attrRel), value(h.ticket)).
				Set(name(h.t.cfg.names.TTL), value(t.expiry(now, l.duration))).
				Add(name(attrRev), value(1))
			upd = endEntry(turnBegins(upd, h.ticket+1, h.behind, now), h.wattr, h.tomb, now)
			for _, tomb := range h.gc {
				upd = upd.Remove(name(tomb))
			}
			e := expr(expression.NewBuilder().WithCondition(h.ours()).WithUpdate(upd))
			return t.db.UpdateItem(ctx, conditionalUpdate(t.table, t.keyOf(h.key, h.ns), e, types.ReturnValueNone), noSDKRetry)
		},
		func(*dynamodb.UpdateItemOutput) error { return nil },
		func(ctx context.Context) (item, error) { return t.read(ctx, h.key, h.ns) },
		func(_ context.Context, old item, uncertain bool) (bool, error) {
			row := parseTicketRow(old, h.wattr)
			switch settleRelease(row, releaseSettle{uncertain: uncertain, ticket: h.ticket, life: h.life,
				leaseID: l.id, token: l.token, valid: l.Remaining() > 0, mark: &h.forced}) {
			case releaseLanded:
				return false, nil // our earlier attempt landed
			case releaseUnknown:
				return false, &LeaseError{Op: "release", Key: h.key, LeaseID: l.id, Err: errLostUnknown}
			}
			return false, &LeaseError{Op: "release", Key: h.key, LeaseID: l.id, Err: ErrLeaseLost}
		}, nil)
}

// turnBegins records on a TicketLock row that ticket's turn begins at now, for its
// waiter and those behind it to plan their reads by (ticketRow.turnBegan), when
// waiters is true (tickets after the ending one were issued); otherwise it removes the
// record, which would date a later ticket's turn from an idle lock's last release.
func turnBegins(upd expression.UpdateBuilder, ticket int64, waiters bool, now time.Time) expression.UpdateBuilder {
	if !waiters {
		return upd.Remove(name(attrHFor)).Remove(name(attrHSince))
	}
	return upd.Set(name(attrHFor), value(ticket)).Set(name(attrHSince), value(now.UnixMilli()))
}

// compactID is a waiter's entry id: 48 random bits in 8 characters. Every issued,
// unfinished ticket keeps an entry in the row, and DynamoDB charges a write one WCU per
// started KB of the item: with 8-character ids a row stays under 1 KB with about 64
// waiters (12-character hex ids passed it at about 50, doubling every write's cost).
// entryID draws a ticket entry's id (a test may draw them: WithEntryIDs).
func (t *TicketLock) entryID() string {
	if f := t.cfg.hooks.entryID; f != nil {
		return f()
	}
	return compactID()
}

func compactID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
