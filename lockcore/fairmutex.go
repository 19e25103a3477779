package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The Mutex's ticket protocol (see Mutex for the overview and the validity argument).
//
// Row (partition key = lock key, sort key = namespace), ticket format:
//
//	state      "fair" (never "held" or "released": see the rolling-deploy argument)
//	fence      last ticket issued (the old format's acquisition counter, continued)
//	serving    ticket allowed in
//	rev        bumps on every handoff, skip and heartbeat
//	life       random id of this row's life      epoch  fence epoch of this life
//	leaseMs    the longest lease of the tickets issued since the lock was last free: set
//	           by a take served at once (nobody holds or waits), raised by a queued take
//	           with a longer lease, never lowered while the lock is in use; waiters skip
//	           a served ticket after this lease (at least the holder's own)
//	w#<id>     one per issued, unfinished ticket: the ticket, written by the update that
//	           issued it (<id> is the suffix of the lease id "<owner>#<id>")
//	d#<id>     the ticket's data (binary), only for an acquisition with data (Data)
//	hFor       ticket that hSince/hUntil/hOwner describe; hSince: when it got the lock
//	hUntil     its wall-clock lease end (ms), moved by every heartbeat
//	hOwner     its owner name, written by the writes that happen anyway: a take served
//	           at once and every heartbeat (a handoff or skip removes it, so a holder
//	           that entered by a handoff is reported without owner until it heartbeats)
//	rel, skip  the last ticket released by its holder / skipped by a waiter
//	holdMs     the holders' hold time (a moving average, written by each release): what
//	           waiters without hold times of their own plan their reads with (see
//	           pacing.turnShared); timing only, never safety
//
// A waiting ticket costs its w# entry only (about 13 bytes), so a row with 64 waiters
// stays under 1 KB and a write of it costs 1 WCU (TestMutexRowUnderOneKBWith64Waiters).
//
// Rows written by the first release of the ticket format keep d#<id> = [owner, lease
// ms] or [owner, lease ms, data] and no leaseMs: they are read as well (owner, lease
// and data of a ticket come from its list when the row records none), and a queued take
// accepts a row without leaseMs.
const (
	stateFair    = "fair"
	attrHFor     = "hFor"
	attrHUntil   = "hUntil"
	attrHSince   = "hSince"
	attrHOwner   = "hOwner"
	attrHoldMs   = "holdMs"
	detailPrefix = "d#"
)

type mutexFormat int

const (
	fmtAbsent         mutexFormat = iota // no row
	fmtBare                              // a row without state: only tombstones
	fmtFair                              // the ticket format
	fmtLegacyHeld                        // the previous release's format, held
	fmtLegacyReleased                    // the previous release's format, released
)

// entryDetails are what a ticket's d# entry says: its data, and in a row written by the
// first release of the ticket format also its owner and lease.
type entryDetails struct {
	owner   string
	leaseMs int64
	data    []byte
}

// mutexRow is a Mutex row as read.
type mutexRow struct {
	ticketRow
	raw     item
	format  mutexFormat
	details map[int64]entryDetails // ticket → details (tickets with a d# entry)
	hUntil  int64
	hOwner  string
	leaseMs int64 // 0: not recorded (a row of the first ticket-format release)
	holdMs  int64 // the holders' published hold time (0: none)
}

func parseMutexRow(it item, wattr string) mutexRow {
	r := mutexRow{ticketRow: parseQueueRow(it, attrFence, 0, wattr), raw: it, details: map[int64]entryDetails{}}
	switch st := attrS(it, attrState); {
	case it == nil:
		r.format = fmtAbsent
	case st == stateFair:
		r.format = fmtFair
	case st == stateHeld:
		r.format = fmtLegacyHeld
	case st == stateReleased:
		r.format = fmtLegacyReleased
	default:
		r.format = fmtBare
	}
	if r.format != fmtFair {
		r.waiters, r.servedEntry, r.ownEntry, r.ownTicket = map[int64]string{}, false, false, 0
	}
	for tk, w := range r.waiters {
		if av, ok := it[detailPrefix+strings.TrimPrefix(w, waiterPrefix)]; ok {
			r.details[tk] = parseDetails(av)
		}
	}
	r.hOwner = attrS(it, attrHOwner)
	if r.format == fmtFair {
		r.leaseMs, _ = attrN(it, attrLeaseMs)
		r.holdMs, _ = attrN(it, attrHoldMs)
	}
	r.hUntil, _ = attrN(it, attrHUntil)
	return r
}

// turnBegan: see ticketRow.turnBegan; only a row in the ticket format records it.
func (r mutexRow) turnBegan() time.Time {
	if r.format != fmtFair {
		return time.Time{}
	}
	return r.ticketRow.turnBegan()
}

// sharedHold is the hold time the row's holders published (0: none).
func (r mutexRow) sharedHold() time.Duration { return time.Duration(r.holdMs) * time.Millisecond }

func parseDetails(av types.AttributeValue) entryDetails {
	if b, ok := av.(*types.AttributeValueMemberB); ok {
		return entryDetails{data: b.Value}
	}
	l, ok := av.(*types.AttributeValueMemberL)
	if !ok {
		return entryDetails{}
	}
	var d entryDetails
	if len(l.Value) > 0 {
		if v, ok := l.Value[0].(*types.AttributeValueMemberS); ok {
			d.owner = v.Value
		}
	}
	if len(l.Value) > 1 {
		if v, ok := l.Value[1].(*types.AttributeValueMemberN); ok {
			d.leaseMs, _ = strconv.ParseInt(v.Value, 10, 64)
		}
	}
	if len(l.Value) > 2 {
		if v, ok := l.Value[2].(*types.AttributeValueMemberB); ok {
			d.data = v.Value
		}
	}
	return d
}

// busy reports whether somebody holds or waits (ticket format).
func (r mutexRow) busy() bool { return r.format == fmtFair && r.serving <= r.next }

// entryID returns the id of ticket tk's entries ("" if it has none).
func (r mutexRow) entryID(tk int64) string {
	w, ok := r.waiters[tk]
	if !ok {
		return ""
	}
	return strings.TrimPrefix(w, waiterPrefix)
}

// leaseOf bounds the lease of ticket tk from above: the row's leaseMs, or the ticket's
// own where a row of the first ticket-format release records a longer one (0: unknown).
func (r mutexRow) leaseOf(tk int64) time.Duration {
	return time.Duration(max(r.leaseMs, r.details[tk].leaseMs)) * time.Millisecond
}

// servedLease is the lease of the served ticket (0: unknown).
func (r mutexRow) servedLease() time.Duration { return r.leaseOf(r.serving) }

// ownerOf is the owner recorded for ticket tk ("": none recorded).
func (r mutexRow) ownerOf(tk int64) string {
	if r.hFor == tk && r.hOwner != "" {
		return r.hOwner
	}
	return r.details[tk].owner
}

// holder describes the served ticket (nil: none). Its owner and lease id "<owner>#<id>"
// are known when recorded (hOwner); otherwise it is described as TicketLock's holders
// are: lease id "ticket N", no owner.
func (r mutexRow) holder() *Holder {
	if r.format == fmtLegacyHeld {
		return holderOf(r.raw)
	}
	if !r.busy() {
		return nil
	}
	h := &Holder{LeaseID: ticketLeaseID(r.serving), Rev: r.rev, Token: makeFence(r.epoch, r.serving), Lease: r.servedLease()}
	if id := r.entryID(r.serving); id != "" {
		if owner := r.ownerOf(r.serving); owner != "" {
			h.Owner, h.LeaseID = owner, owner+nsSeparator+id
		}
	}
	if r.hFor == r.serving && r.hUntil > 0 {
		h.Until = time.UnixMilli(r.hUntil)
	}
	return h
}

// mutexMemory is a Mutex client's memory, per lock, of whether it last found the lock
// busy (so that its next take uses the right update at once). Forgetting is safe.
type mutexMemory struct {
	mu   sync.Mutex
	busy map[string]bool
}

func (mm *mutexMemory) wasBusy(k string) bool {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	return mm.busy[k]
}

func (mm *mutexMemory) set(k string, busy bool) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	if mm.busy == nil {
		mm.busy = make(map[string]bool)
	}
	boundedStore(mm.busy, k, busy)
}

// mutexHold is one ticket of a Mutex acquisition (or an attached lease): the leaseOps
// of its Lease.
type mutexHold struct {
	m      *Mutex
	key    string
	ns     string
	id     string // entry id: the lease id's suffix
	wattr  string
	dattr  string
	ticket int64 // 0: unknown (an attached lease)
	life   string
	next   int64     // last ticket issued as this holder last saw the row
	since  time.Time // when Acquire returned (for the hold-time estimate)
	shared int64     // the row's published hold time (ms) when we entered (0: none)
	gc     []string  // old tombstones seen when the ticket was issued: removed on release
	// tomb: a request for this ticket failed ambiguously and may still land (a retry
	// issued it): its entry is left as a tombstone when the ticket ends, not removed, so
	// that the late copy fails its condition instead of issuing a ticket nobody holds.
	tomb bool

	skippedStalled bool // this waiter skipped a holder that had stopped heartbeating

	forced forceMark // the row's last force-release while the ticket was served
}

func (m *Mutex) newHold(key, ns, id string) *mutexHold {
	return &mutexHold{m: m, key: key, ns: ns, id: id, wattr: waiterPrefix + id, dattr: detailPrefix + id}
}

func (h *mutexHold) leaseID() string { return h.m.cfg.owner + nsSeparator + h.id }

// ours is the condition that the lease's ticket is served. The owner check is the
// client's (checkOwner): the row records no owner per ticket.
func (h *mutexHold) ours() expression.ConditionBuilder {
	return expression.Equal(name(attrServing), name(h.wattr))
}

// leaseOwner is the owner part of a lease id "<owner>#<id>" ("" if it has none).
func leaseOwner(id string) string {
	if i := strings.LastIndex(id, nsSeparator); i >= 0 {
		return id[:i]
	}
	return ""
}

// checkOwner is the owner check of renew, release and GuardCheck, made before any
// write: the lease's owner (this client's) must be the owner its lease id names, so
// that no client can renew or release another owner's lease (one attached with Attach).
// The previous format's check compared the row's owner with the owner name the client
// itself sent, so a client was trusted for its own owner name then as now.
func checkOwner(op string, l *Lease) error {
	if leaseOwner(l.id) != l.owner {
		return &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Err: ErrNotOwner}
	}
	return nil
}

func (m *Mutex) pk(key, ns string) string { return m.table + "\x00" + key + "\x00" + ns }

// legacyRemoved are the previous format's attributes that the ticket format drops.
// (leaseMs, which the ticket format keeps with its own meaning, is set by the same update).
var legacyRemoved = []string{attrOwner, attrLeaseID, attrUntil, attrData, attrPrevLease, attrPrevState, attrAcquiredAt}

// take issues a ticket. It returns the row as the issuing update left it and the send
// time of the first request that may have issued it. On a row in the previous format
// held by an old client it waits (by observation, or by wall clock in that mode) as the
// previous release did, and converts the row when it takes it over.
func (m *Mutex) take(ctx context.Context, key string, ac *acquireConfig, start time.Time, st *acqStats) (_ *mutexHold, _ mutexRow, _ time.Time, retErr error) {
	h := m.newHold(key, ac.namespace, compactID())
	lk := m.pk(key, ac.namespace)
	free := noWait(ac.wait) || !m.memory.wasBusy(lk)
	bo := backoff{base: m.cfg.backoffBase, cap: m.cfg.backoffCap}
	var first time.Time
	uncertain := false // a ticket request may have landed, or may still land
	defer func() {
		if retErr != nil && uncertain {
			m.withdrawUnknown(ctx, h)
		}
	}()
	obs := m.cfg.seen.load(lk)
	defer func() { m.cfg.seen.store(lk, obs) }()
	var last *Holder
	flips := 0
	leaseMs := ac.lease.Milliseconds()
	grow := false // the row's leaseMs is shorter than ours (or absent): raise it
	// giveBack withdraws a queued ticket that took room the holder's writes need, and
	// waits for the queue to shrink before the next take (under a new id).
	giveBack := func() error {
		m.withdraw(ctx, h)
		h, uncertain, first = m.newHold(key, ac.namespace, compactID()), false, time.Time{}
		return m.waitForRoom(ctx, key, ac, start, entryBytes(h, ac, grow), &bo)
	}
	for {
		now := m.cfg.clock.Now()
		var stale *Holder
		if !m.cfg.takeover.wallClock {
			stale = obs.stale(now)
		}
		var e expression.Expression
		if free {
			tk := expression.Plus(expression.IfNotExists(name(attrFence), value(0)), value(1))
			cond := expression.Or(
				expression.AttributeNotExists(name(attrState)),
				expression.Equal(name(attrState), value(stateReleased)),
				expression.And(
					expression.Equal(name(attrState), value(stateFair)),
					expression.GreaterThan(name(attrServing), name(attrFence))))
			if m.cfg.takeover.wallClock {
				cond = expression.Or(cond, expression.And(
					expression.Equal(name(attrState), value(stateHeld)),
					expression.LessThan(name(attrUntil), value(now.Add(-m.cfg.takeover.skew).UnixMilli()))))
			}
			if stale != nil && !strings.Contains(stale.LeaseID, "\x00") {
				cond = expression.Or(cond, expression.And(
					expression.Equal(name(attrState), value(stateHeld)),
					expression.Equal(name(attrLeaseID), value(stale.LeaseID)),
					expression.Equal(name(attrRev), value(stale.Rev))))
			}
			// Nobody holds or waits: the lease length may change.
			upd := expression.Set(name(attrState), value(stateFair)).
				Set(name(attrFence), tk).
				Set(name(attrServing), tk).
				Set(name(h.wattr), tk).
				Set(name(attrLeaseMs), value(leaseMs)).
				Set(name(attrLife), expression.IfNotExists(name(attrLife), value(randomHex(8)))).
				Set(name(attrHFor), tk).
				Set(name(attrHOwner), value(m.cfg.owner)).
				Set(name(attrHUntil), value(now.Add(ac.lease).UnixMilli())).
				Set(name(attrHSince), value(now.UnixMilli())).
				Set(name(m.cfg.names.TTL), value(m.cfg.ttlAt(now, ac.lease+m.cfg.ttlGrace))).
				Add(name(attrRev), value(1))
			if ac.data != nil {
				upd = upd.Set(name(h.dattr), value(ac.data))
			}
			for _, a := range legacyRemoved {
				upd = upd.Remove(name(a))
			}
			e = expr(expression.NewBuilder().WithCondition(expression.And(expression.AttributeNotExists(name(h.wattr)), cond)).WithUpdate(upd))
		} else {
			// Queue behind the holder, making sure leaseMs is at least our lease (a row
			// of the first ticket-format release has none). The TTL is the holder's to
			// keep (see Mutex).
			tk := expression.Plus(name(attrFence), value(1))
			cond := expression.And(
				expression.AttributeNotExists(name(h.wattr)),
				expression.Equal(name(attrState), value(stateFair)),
				expression.LessThanEqual(name(attrServing), name(attrFence)))
			upd := expression.Set(name(attrFence), tk).
				Set(name(h.wattr), tk)
			if grow {
				cond = expression.And(cond, expression.Or(
					expression.AttributeNotExists(name(attrLeaseMs)),
					expression.LessThan(name(attrLeaseMs), value(leaseMs))))
				upd = upd.Set(name(attrLeaseMs), value(leaseMs))
			} else {
				cond = expression.And(cond, expression.GreaterThanEqual(name(attrLeaseMs), value(leaseMs)))
			}
			if ac.data != nil {
				upd = upd.Set(name(h.dattr), value(ac.data))
			}
			e = expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
		}
		if first.IsZero() {
			first = now
		}
		out, err := m.db.UpdateItem(ctx, conditionalUpdate(m.table, m.keyOf(key, ac.namespace), e, types.ReturnValueAllNew), noSDKRetry)
		if err == nil {
			m.cfg.observeServer(out.ResultMetadata)
			row := parseMutexRow(out.Attributes, h.wattr)
			h.ticket, h.life, h.next = row.ownTicket, row.life, row.next
			h.gc = row.tombs.old(now)
			h.tomb = uncertain
			if row.serving != h.ticket && itemBytes(out.Attributes) > m.rowRoom() {
				if err := giveBack(); err != nil {
					return nil, mutexRow{}, time.Time{}, err
				}
				continue
			}
			if free && stale != nil {
				st.takeover = true // a row of the previous format, taken over
			}
			m.memory.set(lk, row.serving != h.ticket)
			return h, row, first, nil
		}
		switch classify(err) {
		case errCondition:
			old, ok := conditionOld(err)
			if !ok {
				if old, err = m.read(ctx, key, ac.namespace); err != nil {
					return nil, mutexRow{}, time.Time{}, fmt.Errorf("lockcore: acquire %q: take ticket: %w", key, err)
				}
			}
			row := parseMutexRow(old, h.wattr)
			_, tomb := row.tombs[h.wattr]
			switch {
			case row.ownEntry && uncertain: // an earlier, ambiguous attempt of ours landed
				h.ticket, h.life, h.next = row.ownTicket, row.life, row.next
				h.gc = row.tombs.old(now)
				h.tomb = true
				if row.serving != h.ticket && itemBytes(old) > m.rowRoom() {
					// As for a take whose answer we got (old is the row it left).
					if err := giveBack(); err != nil {
						return nil, mutexRow{}, time.Time{}, err
					}
					continue
				}
				return h, row, first, nil
			case tomb && uncertain:
				// An earlier, ambiguous attempt of ours landed, and its ticket was served
				// and skipped before we learnt of it (a skip leaves a tombstone): every
				// copy of it now fails, so take a ticket under a new id.
				h, uncertain, first = m.newHold(key, ac.namespace, compactID()), false, time.Time{}
				continue
			case row.ownEntry || tomb:
				// Another acquisition's entry under our random id: draw another.
				h = m.newHold(key, ac.namespace, compactID())
				continue
			}
			st.contended = st.contended || row.busy() || row.format == fmtLegacyHeld
			switch {
			case row.format == fmtFair && !row.busy():
				flips++
				free = true
			case row.format == fmtFair && !noWait(ac.wait):
				if grow != (row.leaseMs < leaseMs) {
					grow = !grow // the other variant fits the row's lease
				} else {
					flips++
				}
				free = false
			case row.format == fmtFair:
				// NoWait and the lock is busy — unless its holder is gone.
				if m.skipGone(ctx, h, row, &obs) {
					continue
				}
				return nil, mutexRow{}, time.Time{}, &HeldError{Key: key, Holder: row.holder(), Waited: m.cfg.clock.Now().Sub(start)}
			case row.format == fmtLegacyHeld:
				// An old client holds the row: watch its lease as the previous release did.
				now := m.cfg.clock.Now()
				last = holderOf(old)
				obs.see(last, now)
				if !m.cfg.takeover.wallClock && obs.stale(now) != nil {
					free = true
					continue
				}
				waited := now.Sub(start)
				if !ac.wait.forever && waited >= ac.wait.max {
					return nil, mutexRow{}, time.Time{}, &HeldError{Key: key, Holder: last, Waited: waited, TimedOut: ac.wait.max > 0}
				}
				d := bo.next()
				if m.cfg.takeover.wallClock {
					if r := last.Until.Add(m.cfg.takeover.skew).Sub(now); r < d {
						d = max(r, 0) + time.Millisecond
					}
				} else {
					d = min(d, obs.since.Add(obs.lease).Sub(now)+time.Millisecond, max(obs.lease/10, m.cfg.backoffBase))
				}
				if !ac.wait.forever {
					d = min(d, ac.wait.max-waited)
				}
				if err := sleep(ctx, max(d, time.Millisecond)); err != nil {
					return nil, mutexRow{}, time.Time{}, &HeldError{Key: key, Holder: last, Waited: m.cfg.clock.Now().Sub(start), Cause: err}
				}
				free = true
				continue
			default: // no row, a released row of the previous format, a bare row
				flips++
				free = true
			}
			if flips > 2 { // the row keeps changing under us: let it settle
				if err := sleep(ctx, m.cfg.backoffBase); err != nil {
					return nil, mutexRow{}, time.Time{}, &HeldError{Key: key, Holder: row.holder(), Waited: m.cfg.clock.Now().Sub(start), Cause: err}
				}
			}
			continue
		case errFatal:
			if tooLarge(err) {
				// The queue's data fills the row: the lock is busy. (An engine may refuse
				// a write that is too large before it evaluates the condition, so a take
				// that found the lock free lately may see this too.)
				if err := m.waitForRoom(ctx, key, ac, start, entryBytes(h, ac, grow), &bo); err != nil {
					return nil, mutexRow{}, time.Time{}, err
				}
				continue
			}
			return nil, mutexRow{}, time.Time{}, fmt.Errorf("lockcore: acquire %q: take ticket: %w", key, err)
		}
		// Throttled, or ambiguous: the retry carries the same w# entry, so if the first
		// attempt landed its condition fails and returns the row with our ticket.
		if classify(err) == errAmbiguous {
			uncertain = true
		}
		if m.cfg.retrySpent(ac.wait, start) {
			return nil, mutexRow{}, time.Time{}, fmt.Errorf("lockcore: acquire %q: take ticket: %w", key, err)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			if last == nil {
				return nil, mutexRow{}, time.Time{}, fmt.Errorf("lockcore: acquire %q: %w", key, serr)
			}
			return nil, mutexRow{}, time.Time{}, &HeldError{Key: key, Holder: last, Waited: m.cfg.clock.Now().Sub(start), Cause: serr}
		}
	}
}

// rowRoom is the size a row may reach by a queued take: the item size limit less the
// headroom the holder's writes need (room.go).
func (m *Mutex) rowRoom() int { return m.cfg.itemLimit() - itemHeadroom }

// entryBytes bounds from above what a queued take of h adds to the row: its w# entry,
// its data, the fence's growth, and leaseMs where the take raises it.
func entryBytes(h *mutexHold, ac *acquireConfig, grow bool) int {
	n := len(h.wattr) + 21 + 1 // the entry, and fence gaining a digit
	if ac.data != nil {
		n += len(h.dattr) + len(ac.data)
	}
	if grow {
		n += len(attrLeaseMs) + 21
	}
	return n
}

// waitForRoom waits, as the wait policy allows, until the lock's row has room for a
// queued take that adds need bytes, or nobody holds or waits there any more. It reads
// the row instead of taking tickets to give them back: each such take writes the whole
// row twice. bo is the take's backoff: its pauses keep growing across the take's
// returns here (a fresh backoff per call would pause only its first, shortest step
// between a refused take and the next).
func (m *Mutex) waitForRoom(ctx context.Context, key string, ac *acquireConfig, start time.Time, need int, bo *backoff) error {
	if f := m.cfg.hooks.waitRoom; f != nil {
		f(key)
	}
	var holder *Holder
	for {
		it, err := m.read(ctx, key, ac.namespace)
		idle := false
		switch {
		case err == nil:
			row := parseMutexRow(it, "")
			if itemBytes(it)+need <= m.rowRoom() {
				return nil
			}
			// An idle row without room (dead weight: tombstones of skips, say) is tried
			// again by a free take — after a pause and within the wait policy, or a take
			// the engine refuses as too large would come straight back here, in a loop
			// of reads and writes without a pause until the context ends.
			idle = !row.busy()
			holder = row.holder()
		case ctx.Err() == nil && classify(err) == errFatal:
			return fmt.Errorf("lockcore: acquire %q: %w", key, err)
		}
		waited := m.cfg.clock.Now().Sub(start)
		if noWait(ac.wait) || (!ac.wait.forever && waited >= ac.wait.max) {
			return &HeldError{Key: key, Holder: holder, Waited: waited, TimedOut: !noWait(ac.wait)}
		}
		d := bo.next()
		if !ac.wait.forever {
			d = min(d, ac.wait.max-waited)
		}
		if err := sleep(ctx, max(d, time.Millisecond)); err != nil {
			return &HeldError{Key: key, Holder: holder, Waited: m.cfg.clock.Now().Sub(start), Cause: err}
		}
		if idle {
			return nil
		}
	}
}

// skippable reports whether the served ticket of a busy row may be skipped now: its
// owner withdrew it (no entry); in wall-clock mode with a lease end recorded for it,
// that lease end plus the skew allowance lies in the past; otherwise obs has seen the
// same (serving, rev) for the ticket's full lease.
func (m *Mutex) skippable(row mutexRow, obs observer, now time.Time) (ok, stalled bool) {
	if !row.servedEntry {
		return true, false
	}
	if m.cfg.takeover.wallClock && row.hFor == row.serving && row.hUntil > 0 {
		// Wall-clock mode, as the previous release's: the recorded lease end plus the
		// allowance decides alone (an application may choose a long allowance so that
		// TTL, not a waiter, removes a dead holder's row: see internal/demo).
		return time.UnixMilli(row.hUntil).Add(m.cfg.takeover.skew).Before(now), true
	}
	// Observation: the default mode, and wall-clock mode where no lease end is recorded.
	return obs.leaseID == servedKey(row.ticketRow) && obs.rev == row.rev && obs.lease > 0 && now.Sub(obs.since) >= obs.lease, true
}

// skipGone, for a NoWait take, skips the served ticket if it may be skipped now.
func (m *Mutex) skipGone(ctx context.Context, h *mutexHold, row mutexRow, obs *observer) bool {
	if !row.busy() {
		return false
	}
	now := m.cfg.clock.Now()
	seeServed(obs, row, now)
	if ok, _ := m.skippable(row, *obs, now); ok {
		return m.skip(ctx, h, row)
	}
	return false
}

// skip moves serving past the served ticket, conditioned on the row being as observed,
// ending the ticket's entries (a tombstone), and passes the lock on as a release does.
func (m *Mutex) skip(ctx context.Context, h *mutexHold, row mutexRow) bool {
	now := m.cfg.clock.Now()
	cond := expression.And(
		expression.Equal(name(attrState), value(stateFair)),
		expression.Equal(name(attrServing), value(row.serving)),
		expression.Equal(name(attrRev), value(row.rev)),
		expression.Equal(name(attrLife), value(row.life)))
	nextLease := m.cfg.lease
	if d := row.leaseOf(row.serving + 1); d > 0 {
		nextLease = d
	}
	upd := expression.Set(name(attrServing), value(row.serving+1)).
		Set(name(attrSkip), value(row.serving)).
		Set(name(m.cfg.names.TTL), value(m.cfg.ttlAt(now, max(nextLease, m.cfg.lease)+m.cfg.ttlGrace))).
		Add(name(attrRev), value(1)).
		Remove(name(attrHOwner))
	if id := row.entryID(row.serving); id != "" {
		// A tombstone, not a removal: the skipped ticket's take may have failed
		// ambiguously, and a late copy of it would otherwise issue a new ticket under
		// the same entry id, which the skipped lease's renewals, releases and guards
		// (serving = its entry) would then take for their own. Old tombstones are
		// removed by later releases.
		upd = upd.Set(name(waiterPrefix+id), value(tombstone(now))).Remove(name(detailPrefix + id))
	}
	if row.next > row.serving {
		upd = upd.Set(name(attrHFor), value(row.serving+1)).
			Set(name(attrHUntil), value(now.Add(nextLease).UnixMilli())).
			Set(name(attrHSince), value(now.UnixMilli()))
	} else {
		upd = upd.Remove(name(attrHFor)).Remove(name(attrHUntil)).Remove(name(attrHSince))
	}
	e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
	_, err := m.db.UpdateItem(ctx, conditionalUpdate(m.table, m.keyOf(h.key, h.ns), e, types.ReturnValueNone), noSDKRetry)
	return err == nil
}

// wait waits in the row's line until our ticket is served (waitTurn), then enters.
func (m *Mutex) wait(ctx context.Context, h *mutexHold, row mutexRow, sent time.Time, ac *acquireConfig, start time.Time, st *acqStats) (*Lease, error) {
	pk := m.pk(h.key, h.ns)
	obs := m.cfg.seen.load(pk)
	defer func() { m.cfg.seen.store(pk, obs) }()
	w := lineWait{cfg: m.cfg, pacing: &m.pacing, pk: pk, key: h.key, what: "acquire", ticket: h.ticket, ac: ac, start: start, obs: &obs, plan: true}
	row, lastBefore, err := waitTurn(ctx, mutexLine{m, h, st}, w, row, sent)
	if err != nil {
		return nil, err
	}
	h.next = row.next
	return m.enter(ctx, h, row, lastBefore, ac, start)
}

// mutexLine is the Mutex's wait line: the lock row, state "fair".
type mutexLine struct {
	m  *Mutex
	h  *mutexHold
	st *acqStats
}

func (l mutexLine) gone(r mutexRow) bool {
	return !r.exists || r.format != fmtFair || r.life != l.h.life
}

func (l mutexLine) skippable(r mutexRow, obs observer, now time.Time) (bool, bool) {
	return l.m.skippable(r, obs, now)
}

func (l mutexLine) skip(ctx context.Context, r mutexRow, stalled bool) bool {
	if !l.m.skip(ctx, l.h, r) {
		return false
	}
	if stalled {
		l.h.skippedStalled = true
		l.st.takeover = true
	}
	return true
}

func (l mutexLine) skipAt(r mutexRow, obs observer) time.Time {
	if l.m.cfg.takeover.wallClock && r.hFor == r.serving && r.hUntil > 0 {
		return time.UnixMilli(r.hUntil).Add(l.m.cfg.takeover.skew) // decides alone (skippable)
	}
	return obs.since.Add(max(r.servedLease(), time.Millisecond))
}

func (l mutexLine) read(ctx context.Context, consistent bool) (mutexRow, error) {
	it, err := getItem(ctx, l.m.db, l.m.table, l.m.keyOf(l.h.key, l.h.ns), consistent)
	return parseMutexRow(it, l.h.wattr), err
}

func (l mutexLine) withdraw(ctx context.Context) { l.m.withdraw(ctx, l.h) }

// enter makes a served ticket a lease: its validity counts from lastBefore, the send time
// of the last request that still showed an earlier ticket served (in wall-clock mode, at
// most until the recorded lease end the handoff wrote for it); it is renewed at once if
// much of it went by unnoticed or the row's TTL is too close. A row without a fence
// epoch gets one.
func (m *Mutex) enter(ctx context.Context, h *mutexHold, row mutexRow, lastBefore time.Time, ac *acquireConfig, start time.Time) (*Lease, error) {
	now := m.cfg.clock.Now()
	valid := lastBefore
	if m.cfg.takeover.wallClock && row.hFor == h.ticket && row.hUntil > 0 {
		// Waiters skip us once hUntil + skew lies behind their wall clocks.
		valid = minTime(valid, now.Add(time.UnixMilli(row.hUntil).Sub(now)).Add(-ac.lease))
	}
	l := newLease(h, m.cfg, ac.lease, h.key, h.ns, h.leaseID(), 0, valid)
	h.forced.see(row.ticketRow) // row shows our ticket served (see settleRelease)
	renew := l.Remaining() < ac.lease/2 || m.cfg.ttlTooEarly(m.rowTTL(row), ac.lease+m.cfg.ttlGrace)
	return enterLine(ctx, l, row.ticketRow, h.ticket, renew, ac,
		func(ctx context.Context) (int64, error) { return m.startEpoch(ctx, h) },
		func(err error) error { return m.giveUp(ctx, h, row, start, err) },
		func() { h.since, h.shared = m.cfg.clock.Now(), row.holdMs })
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// giveUp withdraws the ticket and explains why the wait ended (cause nil: the wait
// policy's time ran out).
func (m *Mutex) giveUp(ctx context.Context, h *mutexHold, row mutexRow, start time.Time, cause error) error {
	return giveUp(ctx, mutexLine{m: m, h: h}, lineWait{cfg: m.cfg, key: h.key, start: start}, row, cause)
}

// withdraw gives up a ticket: it removes the ticket's entries while the ticket is not
// served yet, or releases it if it just was.
func (m *Mutex) withdraw(ctx context.Context, h *mutexHold) {
	e := expr(expression.NewBuilder().
		WithCondition(expression.And(
			expression.LessThan(name(attrServing), name(h.wattr)),
			expression.Equal(name(attrLife), value(h.life)))).
		WithUpdate(endEntry(expression.Remove(name(h.dattr)), h.wattr, h.tomb, m.cfg.clock.Now())))
	withdrawal(ctx, m.db, m.table, m.keyOf(h.key, h.ns), e,
		func(ctx context.Context) (item, error) { return m.read(ctx, h.key, h.ns) },
		func(ctx context.Context, old item) *expression.Expression {
			row := parseMutexRow(old, h.wattr)
			if row.format == fmtFair && row.life == h.life && row.ownEntry && row.serving == row.ownTicket {
				l := &Lease{key: h.key, namespace: h.ns, id: h.leaseID(), owner: m.cfg.owner, clock: m.cfg.clock, duration: m.cfg.lease}
				_ = h.release(ctx, l) // served meanwhile: pass it on
			}
			return nil
		})
}

// withdrawUnknown withdraws a ticket request whose outcome is unknown: a tombstone if it
// has not landed (so that it never will), the ticket's withdrawal if it has (see the
// tombstones of TicketLock).
func (m *Mutex) withdrawUnknown(ctx context.Context, h *mutexHold) {
	now := m.cfg.clock.Now()
	e := expr(expression.NewBuilder().
		WithCondition(expression.AttributeNotExists(name(h.wattr))).
		WithUpdate(expression.Set(name(h.wattr), value(tombstone(now))).
			Set(name(m.cfg.names.TTL), expression.IfNotExists(name(m.cfg.names.TTL), value(m.cfg.ttlAt(now, m.cfg.lease+m.cfg.ttlGrace))))))
	withdrawal(ctx, m.db, m.table, m.keyOf(h.key, h.ns), e,
		func(ctx context.Context) (item, error) { return m.read(ctx, h.key, h.ns) },
		func(ctx context.Context, old item) *expression.Expression {
			if row := parseMutexRow(old, h.wattr); row.ownEntry {
				h.ticket, h.life = row.ownTicket, row.life
				// Another copy of the request may still be on its way: leave a
				// tombstone, not a removed entry, for it to fail on.
				h.tomb = true
				m.withdraw(ctx, h)
			} // else our tombstone, from an earlier attempt
			return nil
		})
}

// startEpoch gives the row a fence epoch, for a holder that found none (the row's first
// life, or the first after TTL deleted it).
func (m *Mutex) startEpoch(ctx context.Context, h *mutexHold) (int64, error) {
	return startEpoch(ctx, m.db, m.cfg, m.table, "acquire", h.key, m.keyOf(h.key, h.ns), h.ours(),
		func(ctx context.Context) (item, error) { return m.read(ctx, h.key, h.ns) },
		func(old item) (int64, error) {
			row := parseMutexRow(old, h.wattr)
			if row.format == fmtFair && row.ownEntry && row.serving == row.ownTicket && row.hasEpoch {
				return row.epoch, nil // set by our earlier attempt, or by a holder before us
			}
			return 0, &LeaseError{Op: "acquire", Key: h.key, LeaseID: h.leaseID(), Current: row.holder(), Err: ErrLeaseLost}
		})
}

// failure explains a failed owner-checked write of the ticket format from the row that
// failed it. legacy is true when the row is in the previous format and names the lease:
// the caller then falls back to the previous format's operation.
func (h *mutexHold) failure(op string, l *Lease, row mutexRow) (legacy bool, err error) {
	if row.format == fmtLegacyHeld || row.format == fmtLegacyReleased {
		if attrS(row.raw, attrLeaseID) == l.id {
			return true, nil
		}
	}
	if owner := row.details[row.ownTicket].owner; row.ownEntry && owner != "" && owner != l.owner {
		// A ticket of the first ticket-format release, which recorded its owner.
		return false, &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: row.holder(), Err: ErrNotOwner}
	}
	return false, &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: row.holder(), Err: ErrLeaseLost}
}

// renew implements leaseOps: the holder's heartbeat.
func (h *mutexHold) renew(ctx context.Context, l *Lease) error {
	m := h.m
	if err := checkOwner("renew", l); err != nil {
		return err
	}
	bo := backoff{base: m.cfg.backoffBase, cap: m.cfg.backoffCap}
	// The recorded lease end only moves forward: a late copy of an earlier renewal (sent,
	// timed out, retried, landing after a later renewal) must not set hUntil back to its
	// older value, or a waiter in wall-clock mode would skip us while our validity (from
	// the later renewal) still runs. Where the row records a later end for our ticket
	// (a handoff from a holder with a longer lease, a clock stepped back), the renewal
	// keeps it (keepUntil).
	keepUntil, flips := false, 0
	var until int64
	return holderWrite(ctx, m.cfg, "renew", h.key,
		func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
			now := m.cfg.clock.Now()
			until = now.Add(l.duration).UnixMilli()
			later := expression.Or(
				expression.AttributeNotExists(name(attrHUntil)),
				expression.NotEqual(name(attrHFor), name(attrServing)),
				expression.LessThanEqual(name(attrHUntil), value(until)))
			upd := expression.Add(name(attrRev), value(1)).
				Set(name(attrHFor), name(attrServing)).
				Set(name(attrHOwner), value(l.owner)).
				Set(name(h.m.cfg.names.TTL), value(m.cfg.ttlAt(now, l.duration+m.cfg.ttlGrace)))
			cond := expression.And(h.ours(), later)
			if keepUntil {
				cond = expression.And(h.ours(), expression.Not(later))
			} else {
				upd = upd.Set(name(attrHUntil), value(until))
			}
			e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
			return m.db.UpdateItem(ctx, conditionalUpdate(m.table, m.keyOf(h.key, h.ns), e, types.ReturnValueAllNew), noSDKRetry)
		},
		func(out *dynamodb.UpdateItemOutput) error {
			m.cfg.observeServer(out.ResultMetadata)
			// Waiters take over after the ticket's lease as the row records it, which
			// the acquisition set: an attached handle's client may use a longer one.
			row := parseMutexRow(out.Attributes, h.wattr)
			h.forced.see(row.ticketRow) // our ticket is served (an attached lease learns it here)
			if d := row.leaseOf(row.ownTicket); row.ownEntry && d > 0 && d < l.duration {
				l.renewsFor(d)
			} else {
				l.renewsFor(0)
			}
			return nil
		},
		func(ctx context.Context) (item, error) { return m.read(ctx, h.key, h.ns) },
		func(ctx context.Context, old item, _ bool) (bool, error) {
			row := parseMutexRow(old, h.wattr)
			if row.format == fmtFair && row.ownEntry && row.serving == row.ownTicket {
				// Still ours: the variant that fits the recorded end.
				keepUntil = row.hFor == row.serving && row.hUntil > until
				if flips++; flips > 2 {
					if serr := sleep(ctx, bo.next()); serr != nil {
						return false, fmt.Errorf("lockcore: renew %q: %w", h.key, serr)
					}
				}
				return true, nil
			}
			legacy, ferr := h.failure("renew", l, row)
			if legacy {
				return false, m.renew(ctx, l)
			}
			return false, ferr
		}, nil)
}

// release implements leaseOps: it serves the next ticket. When no later ticket was
// issued the row is kept for the retention period (it keeps its fencing counter);
// otherwise its TTL is a lease and the grace ahead, as an acquisition's, and the next
// ticket's wall-clock lease end is recorded.
func (h *mutexHold) release(ctx context.Context, l *Lease) error {
	m := h.m
	if err := checkOwner("release", l); err != nil {
		return err
	}
	var shared int64 // the hold time to publish (0: unknown, an attached lease)
	if !h.since.IsZero() {
		held := m.cfg.clock.Now().Sub(h.since)
		m.pacing.held(m.pk(h.key, h.ns), held)
		shared = max(held.Milliseconds(), 1)
		if h.shared > 0 {
			shared = max((7*h.shared+3*shared)/10, 1)
		}
	}
	idle := h.ticket == 0 || h.next <= h.ticket
	return holderWrite(ctx, m.cfg, "release", h.key,
		func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
			now := m.cfg.clock.Now()
			upd := expression.Set(name(attrServing), expression.Plus(name(attrServing), value(1))).
				Set(name(attrRel), name(attrServing)).
				Add(name(attrRev), value(1)).
				Remove(name(h.dattr)).
				Remove(name(attrHOwner))
			upd = endEntry(upd, h.wattr, h.tomb, now)
			if shared > 0 {
				upd = upd.Set(name(attrHoldMs), value(shared))
			}
			for _, tomb := range h.gc {
				upd = upd.Remove(name(tomb))
			}
			var cond expression.ConditionBuilder
			if idle {
				cond = expression.And(h.ours(), expression.Equal(name(attrFence), name(h.wattr)))
				upd = upd.Remove(name(attrHFor)).Remove(name(attrHUntil)).Remove(name(attrHSince)).
					Set(name(h.m.cfg.names.TTL), value(m.cfg.ttlAt(now, m.cfg.retention)))
			} else {
				cond = expression.And(h.ours(), expression.GreaterThan(name(attrFence), name(h.wattr)))
				upd = upd.Set(name(attrHFor), expression.Plus(name(attrServing), value(1))).
					Set(name(attrHUntil), value(now.Add(l.duration).UnixMilli())).
					Set(name(attrHSince), value(now.UnixMilli())).
					Set(name(h.m.cfg.names.TTL), value(m.cfg.ttlAt(now, max(l.duration, m.cfg.lease)+m.cfg.ttlGrace)))
			}
			e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
			return m.db.UpdateItem(ctx, conditionalUpdate(m.table, m.keyOf(h.key, h.ns), e, types.ReturnValueNone), noSDKRetry)
		},
		func(*dynamodb.UpdateItemOutput) error { return nil },
		func(ctx context.Context) (item, error) { return m.read(ctx, h.key, h.ns) },
		func(ctx context.Context, old item, uncertain bool) (bool, error) {
			row := parseMutexRow(old, h.wattr)
			if o := row.details[row.ownTicket].owner; row.ownEntry && row.serving == row.ownTicket && (o == "" || o == l.owner) {
				idle = !idle // still ours: the other variant fits (a ticket was issued meanwhile)
				return true, nil
			}
			legacy, ferr := h.failure("release", l, row)
			switch {
			case legacy:
				return false, m.release(ctx, l)
			case errors.Is(ferr, ErrNotOwner):
				return false, ferr
			}
			// Our ticket was passed: by our earlier attempt, if one may have landed, or by
			// a skip or a force-release. Later holders may have released since (rel names
			// theirs); a lease still valid by our clock is skipped by no waiter, and a
			// force-release since our ticket was last seen served is told by the row's
			// force record (settleRelease, shared with TicketLock).
			switch settleRelease(row.ticketRow, releaseSettle{uncertain: uncertain, ticket: h.ticket, life: h.life,
				leaseID: l.id, token: l.token, valid: l.Remaining() > 0, mark: &h.forced}) {
			case releaseLanded:
				return false, nil
			case releaseUnknown:
				return false, &LeaseError{Op: "release", Key: h.key, LeaseID: l.id, Current: row.holder(), Err: errLostUnknown}
			}
			return false, ferr
		}, nil)
}

// rowTTL is the row's TTL attribute (epoch seconds; 0 if absent).
func (m *Mutex) rowTTL(r mutexRow) int64 {
	ttl, _ := attrN(r.raw, m.cfg.names.TTL)
	return ttl
}
