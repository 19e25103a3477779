package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Lock-table attribute names. The table's key is pk (lock key) and sk (namespace);
// expiresAt is its TTL attribute.
const (
	attrPK         = "pk"
	attrSK         = "sk"
	attrState      = "state"      // "held" or "released"
	attrOwner      = "owner"      // owner name of the holder
	attrLeaseID    = "leaseId"    // unique id of the acquisition
	attrRev        = "rev"        // lease version: +1 on every acquisition and renewal
	attrFence      = "fence"      // acquisitions during this row's life
	attrEpoch      = "epoch"      // fence epoch of this row's life (see fenceKeeper)
	attrLeaseMs    = "leaseMs"    // lease duration in ms
	attrUntil      = "until"      // holder's wall-clock lease end, ms since the epoch
	attrExpiresAt  = "expiresAt"  // TTL, seconds since the epoch
	attrAcquiredAt = "acquiredAt" // ms since the epoch
	attrData       = "data"       // caller's opaque data
	attrPrevLease  = "prevLease"  // lease id the last acquisition replaced
	attrPrevState  = "prevState"  // state the last acquisition found: released or held (a takeover)

	stateHeld     = "held"
	stateReleased = "released"
)

// Mutex is a fair, lease-based mutual-exclusion lock on rows of a lock table (partition
// key "pk", sort key "sk" = namespace, TTL attribute "expiresAt", or the names given
// WithTableAttributes; CreateLockTable makes one). Waiters are served in arrival order: the lock row is a ticket lock, as
// TicketLock's, and also records the lease's data and the holder's owner.
//
// Row (see fairmutex.go for the attributes): state "fair"; fence, the last ticket
// issued; serving, the ticket allowed in; rev, bumped by every handoff, skip and
// heartbeat; life, the row life's random id; epoch, its fence epoch; leaseMs, the
// longest lease of the tickets issued since the lock was last free (clients with
// different leases may share a lock: the row keeps one lease, not one per ticket); per
// issued, unfinished ticket a w#<id> entry (the ticket) written by the update that
// issued it, where "<owner>#<id>" is the lease id, and for an acquisition with data a
// d#<id> entry (the data); the served ticket's wall-clock lease end and owner (hUntil,
// hOwner, with hFor naming the ticket), recorded by the writes that happen anyway: a take
// served at once and every heartbeat (a handoff records hUntil only).
//
// Protocol:
//
//	acquire    one UpdateItem returning the row. When nobody holds or waits (or the row
//	           is absent, or released by a client of the previous release) the ticket is
//	           served at once: fence + 1 = serving = our ticket, hUntil = now + lease,
//	           hOwner = our owner, leaseMs = our lease. Otherwise add a ticket behind the
//	           others, raising leaseMs to our lease if it is shorter. Uncontended: one
//	           call.
//	wait       GetItem of the row (strongly consistent for the next in line, eventually
//	           consistent further back), timed by position and measured pace (pace.go),
//	           until serving reaches the ticket.
//	release    serving + 1 and our entries removed, if serving = our ticket (one
//	           UpdateItem). With a ticket behind us it records that ticket's hUntil
//	           (hOwner removed); with none the row is kept for the retention period.
//	heartbeat  rev + 1, hUntil = now + lease, hOwner = our owner, if the ticket is still
//	           served.
//	skip       serving + 1, conditioned on (serving, rev, life) as observed: at once for a
//	           served ticket without an entry (withdrawn); after leaseMs (at least the
//	           served ticket's lease) of unchanged (serving, rev) on the waiter's clock
//	           (ObserveTakeover); or once hUntil + skew lies behind the waiter's wall clock,
//	           hFor naming the served ticket (WallClockTakeover). The skipped ticket's
//	           entry becomes a tombstone, so that a late copy of its take cannot issue
//	           a ticket under the same id (which the skipped lease would take for its own).
//
// An uncontended critical section costs two calls (acquire, release) plus heartbeats; a
// contended one two writes plus a few reads, however many wait. The first acquisition
// of a row life costs two more calls to start a fence epoch. Rows grow by about 13
// bytes per waiting client (plus its data, if any), as TicketLock's: DynamoDB charges a
// write one WCU per started KB of the row, and a row with 64 waiters without data stays
// under 1 KB. A take that would leave the row less than 2 KiB short of DynamoDB's 400 KB
// item limit (waiters' data can fill it) gives its ticket back and waits for room, so
// that the holder's heartbeats and handoffs always fit (see Data).
//
// Validity. A ticket served at once counts its lease from the send time of its acquire.
// A waiter whose ticket comes up counts it from the send time of its last strongly
// consistent read that still showed an earlier ticket served. That read was processed
// before the write that served our ticket, so before any other client can have seen the
// new (serving, rev); a waiter skips a served ticket only after seeing the same (serving,
// rev) for the row's leaseMs on its own clock — at least our lease, since our take set or
// raised it and nothing lowers it before the lock is free again — and every heartbeat
// changes rev. So no client skips us while our
// lease is valid by our clock (clocks ticking at about the
// same rate; wall clocks play no part). In wall-clock mode a handed-off holder also ends
// its validity at the hUntil written for it (by its own wall clock), so a waiter whose
// clock is within the skew allowance of ours skips us only after that. Tickets are served
// in increasing order, so the fencing token epoch<<32 | ticket strictly increases; a row
// deleted by TTL and created again starts a new epoch (fence.go).
//
// Owner check: renew, release and GuardCheck are conditioned on serving = the lease's
// w# entry, and are refused before any write (ErrNotOwner) unless the client's owner is
// the owner part of the lease id, so another owner that knows the lease id (Attach)
// changes nothing. The row records no owner per ticket: a client is trusted for its own
// owner name, as it was when the row's owner was compared with the name it sent.
//
// Ambiguous writes: an acquire is retried with the same entry id, so an earlier attempt
// that landed fails the retry's condition and is recognised by its entry; a client that
// gives up while an attempt may still land writes a tombstone under its id (see
// TicketLock). A release whose response was lost is settled as TicketLock's is
// (settleRelease, shared): by rel (the last ticket released), skip, or the row's force
// record; or, while the lease is valid by the holder's clock, by the row naming the same
// last force-release as when the ticket was last seen served (no waiter skips a valid
// lease, so only the release itself can have passed it); otherwise it reports
// ErrLeaseLost with ErrUnknownOutcome.
//
// TTL. Acquisitions served at once, heartbeats, handoffs and skips set expiresAt a lease
// and the TTL grace ahead (a queued acquisition leaves it to the holder); a release with
// nobody behind sets the retention period. A holder that crashes with nobody waiting
// leaves a row that TTL removes at its lease end plus the grace, and the janitor finds
// its data in the served ticket's d# entry and its owner (hence the lease id) in hOwner
// when recorded for it.
//
// Rolling deploys. Clients of the previous release (one conditional put per attempt:
// acquire if the row is absent, state = released, its until + skew is past, or its
// (leaseId, rev) was watched unchanged for a lease; release and renew conditioned on
// leaseId, owner and state = held) may run beside these on the same rows. Neither can
// take a row the other holds:
//
//   - A row in the ticket format has state "fair", never "held" or "released", and no
//     until or leaseId attribute, so every condition of an old acquisition fails on it,
//     held or not, and an old client never watches it as a lease (it reports it held and
//     waits); old renewals, releases, epoch writes and guards fail too.
//   - This client's acquisition succeeds only on an absent row, a state = released row
//     (old format), a "fair" row with serving > fence (nobody holds or waits), or, after
//     watching an old lease's (leaseId, rev) unchanged for its lease (or, in wall-clock
//     mode, its until + skew past), a state = held row still showing that lease; every
//     other queue update requires state "fair". So a row an old client holds is taken
//     only as the previous release itself would take it over, and the conversion keeps
//     the row's epoch and continues its fence counter (tokens keep rising).
//
// Old clients cannot acquire a row once it is in the ticket format: they wait until they
// are replaced. TestMutexMixedWithPreviousRelease plays both sides.
type Mutex struct {
	db    DynamoDB
	table string
	cfg   *config

	pacing pacing      // per lock: this client's hold times, the queue's pace
	memory mutexMemory // per lock: whether this client last found it busy
}

// NewMutex returns a Mutex on table. It validates the options.
func NewMutex(db DynamoDB, table string, opts ...Option) (*Mutex, error) {
	cfg, err := clientConfig(db, table, StrategyMutex, opts)
	if err != nil {
		return nil, err
	}
	return &Mutex{db: guarded(db), table: table, cfg: cfg}, nil
}

// Owner returns this client's owner name.
func (m *Mutex) Owner() string { return m.cfg.owner }

// LockInfo is what Get reports about a lock.
type LockInfo struct {
	Key, Namespace string
	Held           bool    // a lease is recorded as held (it may have expired: see Expired)
	Expired        bool    // the recorded lease end lies in the past by this client's clock
	Holder         *Holder // nil when not held
	Data           []byte  // data stored with the lease
}

// Acquire takes the lock on key, waiting as the client's wait policy says (default:
// until ctx ends) unless overridden with Wait. On contention it returns a *HeldError
// (ErrLockHeld, plus ErrWaitTimeout or the context error when a wait ended).
//
// The lease's heartbeat runs until Release or until ctx ends, so pass a context that
// lives as long as the critical section (bound the wait with Wait(WaitUpTo(d)), not with
// a short-lived context).
func (m *Mutex) Acquire(ctx context.Context, key string, opts ...AcquireOption) (lease *Lease, err error) {
	if m == nil || m.cfg == nil {
		return nil, unusableLocker(m == nil, "*Mutex", "NewMutex")
	}
	ac, err := m.cfg.acquireConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := m.validate(key, ac.namespace); err != nil {
		return nil, err
	}
	if err := notStarted(ctx, "mutex", key); err != nil {
		return nil, err
	}
	t0 := m.cfg.clock.Now()
	var st acqStats
	defer func() { m.cfg.acquired(ctx, StrategyMutex, key, ac.namespace, t0, st, lease, err) }()
	pk := m.pk(key, ac.namespace)
	if l := m.cfg.bypass.reenter(ctx, pk, ac); l != nil {
		return l, nil
	}
	defer func() { m.cfg.bypass.bypassable(lease, pk, ac) }()
	for {
		h, row, sent, err := m.take(ctx, key, ac, t0, &st)
		if err != nil {
			return nil, err
		}
		if f := m.cfg.hooks.afterTicket; f != nil {
			f(key, h.ticket)
		}
		l, err := m.wait(ctx, h, row, sent, ac, t0, &st)
		if errors.Is(err, errTicketSkipped) {
			continue // our ticket was skipped while we were away: queue again
		}
		return l, err
	}
}

// TryAcquire takes the lock only if it is free now (NoWait).
func (m *Mutex) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return m.Acquire(ctx, key, append(opts, NoWait())...)
}

func (m *Mutex) validate(key, ns string) error {
	if err := validatePK("key", key); err != nil {
		return err
	}
	return validateSK("namespace", ns, 0)
}

func (m *Mutex) keyOf(key, ns string) item {
	return item{m.cfg.names.PartitionKey: s(key), m.cfg.names.SortKey: s(ns)}
}

func holderOf(it item) *Holder {
	if it == nil || attrS(it, attrState) != stateHeld {
		return nil
	}
	rev, _ := attrN(it, attrRev)
	ms, _ := attrN(it, attrLeaseMs)
	until, _ := attrN(it, attrUntil)
	epoch, _ := attrN(it, attrEpoch)
	fence, _ := attrN(it, attrFence)
	return &Holder{
		Owner:   attrS(it, attrOwner),
		LeaseID: attrS(it, attrLeaseID),
		Rev:     rev,
		Lease:   time.Duration(ms) * time.Millisecond,
		Until:   time.UnixMilli(until),
		Token:   makeFence(epoch, fence),
	}
}

// lookup serves the Get of a lock-table strategy: it validates the call's options and
// key and reads the lock's row (nil: none), returning it with the namespace.
func lookup(ctx context.Context, c *config, key string, opts []AcquireOption,
	validate func(key, ns string) error, read func(ctx context.Context, key, ns string) (item, error)) (item, string, error) {
	ac, err := c.acquireConfig(opts)
	if err != nil {
		return nil, "", err
	}
	if err := validate(key, ac.namespace); err != nil {
		return nil, "", err
	}
	it, err := read(ctx, key, ac.namespace)
	if err != nil {
		return nil, "", fmt.Errorf("lockcore: get %q: %w", key, err)
	}
	return it, ac.namespace, nil
}

func ttlSeconds(t time.Time) int64 { return (t.UnixMilli() + 999) / 1000 }

func (m *Mutex) read(ctx context.Context, key, ns string) (item, error) {
	return readItem(ctx, m.db, m.table, m.keyOf(key, ns))
}

// Get reads the lock's state with a strongly consistent read. It never changes anything.
// The holder is the served ticket's. Its owner and lease id are recorded by a take served
// at once and by every heartbeat: a holder that entered by a handoff is reported until
// its first heartbeat without owner and with lease id "ticket N", as TicketLock's are.
// Its Until is the recorded wall-clock lease end.
func (m *Mutex) Get(ctx context.Context, key string, opts ...AcquireOption) (*LockInfo, error) {
	it, ns, err := lookup(ctx, m.cfg, key, opts, m.validate, m.read)
	if err != nil {
		return nil, err
	}
	row := parseMutexRow(it, "")
	info := &LockInfo{Key: key, Namespace: ns, Holder: row.holder()}
	switch {
	case row.format == fmtLegacyHeld:
		info.Held = true
		info.Data = attrB(it, attrData)
	case row.busy() && row.servedEntry:
		info.Held = true
		info.Data = row.details[row.serving].data
	default:
		info.Holder = nil
	}
	if info.Held {
		info.Expired = !info.Holder.Until.IsZero() && info.Holder.Until.Before(m.cfg.clock.Now())
	}
	return info, nil
}

// IsLocked reports whether a lease on key is recorded as held and not yet past its end
// by this client's clock (plus the skew allowance in wall-clock mode). It is a snapshot
// for monitoring; never use it to decide to write, use Acquire.
func (m *Mutex) IsLocked(ctx context.Context, key string, opts ...AcquireOption) (bool, error) {
	info, err := m.Get(ctx, key, opts...)
	if err != nil {
		return false, err
	}
	if !info.Held {
		return false, nil
	}
	return info.Holder.Until.IsZero() || info.Holder.Until.Add(m.cfg.takeover.skew).After(m.cfg.clock.Now()), nil
}

// Attach returns a handle on a lease acquired elsewhere (say, by another process that
// passed its lease id along), so that this client can renew or release it. The owner
// check still applies: a lease acquired under another owner name fails with
// ErrNotOwner. The handle's Token is zero and it has no heartbeat. It claims no validity
// (Remaining is zero) until its first successful Renew: it cannot know when the lease
// was last renewed; a renewal then gives it at most the lease the acquisition recorded,
// which is what waiters grant before they take over.
func (m *Mutex) Attach(key, leaseID string, opts ...AcquireOption) (*Lease, error) {
	ac, err := m.cfg.acquireConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := m.validate(key, ac.namespace); err != nil {
		return nil, err
	}
	if leaseID == "" {
		return nil, invalidOption("leaseID", "must not be empty")
	}
	id := leaseID
	if i := strings.LastIndex(leaseID, nsSeparator); i >= 0 {
		id = leaseID[i+1:]
	}
	h := m.newHold(key, ac.namespace, id)
	return newLease(h, m.cfg, ac.lease, key, ac.namespace, leaseID, 0, m.cfg.clock.Now().Add(-ac.lease)), nil
}

// renew implements leaseOps.
func (m *Mutex) renew(ctx context.Context, l *Lease) error {
	bo := backoff{base: m.cfg.backoffBase, cap: m.cfg.backoffCap}
	for {
		now := m.cfg.clock.Now()
		until := now.Add(l.duration)
		e := expr(expression.NewBuilder().
			WithCondition(m.ownedBy(l)).
			WithUpdate(expression.Set(name(attrUntil), value(until.UnixMilli())).
				Set(name(m.cfg.names.TTL), value(m.cfg.ttlAt(now, l.duration+m.cfg.ttlGrace))).
				Add(name(attrRev), value(1))))
		out, err := m.db.UpdateItem(ctx, conditionalUpdate(m.table, m.keyOf(l.key, l.namespace), e, types.ReturnValueNone), noSDKRetry)
		switch {
		case err == nil:
			m.cfg.observeServer(out.ResultMetadata)
			return nil
		case classify(err) == errCondition:
			return m.leaseFailure(ctx, "renew", l, err)
		case classify(err) == errFatal:
			return fmt.Errorf("lockcore: renew %q: %w", l.key, err)
		}
		// Throttled or ambiguous: a renewal is safe to repeat, but only a call that
		// certainly succeeded may extend the local validity, so try again.
		if serr := sleep(ctx, bo.next()); serr != nil {
			return fmt.Errorf("lockcore: renew %q: %w (last error: %v)", l.key, serr, err)
		}
	}
}

// release implements leaseOps.
func (m *Mutex) release(ctx context.Context, l *Lease) error {
	bo := backoff{base: m.cfg.backoffBase, cap: m.cfg.backoffCap}
	uncertain := false // an earlier attempt may have landed
	for {
		now := m.cfg.clock.Now()
		e := expr(expression.NewBuilder().
			WithCondition(m.ownedBy(l)).
			WithUpdate(expression.Set(name(attrState), value(stateReleased)).
				Set(name(m.cfg.names.TTL), value(m.cfg.ttlAt(now, m.cfg.retention))).
				Remove(name(attrData)).
				Remove(name(attrUntil))))
		_, err := m.db.UpdateItem(ctx, conditionalUpdate(m.table, m.keyOf(l.key, l.namespace), e, types.ReturnValueNone), noSDKRetry)
		if err == nil {
			return nil
		}
		switch classify(err) {
		case errCondition:
			old, ok := conditionOld(err)
			if !ok {
				var rerr error
				if old, rerr = m.read(ctx, l.key, l.namespace); rerr != nil {
					return fmt.Errorf("lockcore: release %q: condition failed and re-read failed: %w", l.key, rerr)
				}
			}
			return m.releaseOutcome(l, old, uncertain)
		case errFatal:
			return fmt.Errorf("lockcore: release %q: %w", l.key, err)
		case errAmbiguous:
			uncertain = true
			rctx, cancel := detached(ctx)
			cur, rerr := m.read(rctx, l.key, l.namespace)
			cancel()
			if rerr == nil && (attrS(cur, attrLeaseID) != l.id || attrS(cur, attrState) != stateHeld) {
				return m.releaseOutcome(l, cur, uncertain)
			}
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return fmt.Errorf("lockcore: release %q: %w (last error: %v)", l.key, serr, err)
		}
	}
}

// releaseOutcome decides a release from the row as it is now, the lease no longer held
// under our id: released by us (possibly re-acquired since: prevLease says so), taken
// over (ErrLeaseLost), or, after an ambiguous attempt with the row changed twice since,
// unknowable.
func (m *Mutex) releaseOutcome(l *Lease, cur item, uncertain bool) error {
	if attrS(cur, attrPrevLease) == l.id && attrS(cur, attrLeaseID) != l.id {
		if attrS(cur, attrPrevState) == stateReleased {
			return nil // our release landed; someone acquired after it
		}
		return &LeaseError{Op: "release", Key: l.key, LeaseID: l.id, Current: holderOf(cur), Err: ErrLeaseLost}
	}
	err := m.classifyOld("release", l, cur)
	if uncertain && errors.Is(err, ErrLeaseLost) {
		return &LeaseError{Op: "release", Key: l.key, LeaseID: l.id, Current: holderOf(cur), Err: errLostUnknown}
	}
	return err
}

func (m *Mutex) ownedBy(l *Lease) expression.ConditionBuilder {
	return expression.And(
		expression.Equal(name(attrLeaseID), value(l.id)),
		expression.Equal(name(attrOwner), value(l.owner)),
		expression.Equal(name(attrState), value(stateHeld)),
	)
}

// leaseFailure explains a failed owner-checked write from the item that failed it.
func (m *Mutex) leaseFailure(ctx context.Context, op string, l *Lease, err error) error {
	old, ok := conditionOld(err)
	if !ok {
		var rerr error
		if old, rerr = m.read(ctx, l.key, l.namespace); rerr != nil {
			return fmt.Errorf("lockcore: %s %q: condition failed and re-read failed: %w", op, l.key, rerr)
		}
	}
	return m.classifyOld(op, l, old)
}

func (m *Mutex) classifyOld(op string, l *Lease, old item) error {
	if attrS(old, attrLeaseID) == l.id {
		if attrS(old, attrOwner) != l.owner {
			return &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: holderOf(old), Err: ErrNotOwner}
		}
		if attrS(old, attrState) == stateReleased && op == "release" {
			return nil // already released (an earlier attempt of ours landed)
		}
	}
	return &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: holderOf(old), Err: ErrLeaseLost}
}

// GuardCheck returns a TransactWriteItems entry that fails the caller's transaction
// unless this lease is still held (its ticket is served; for a lease of the previous row
// format attached with Attach: the row names the lease as held). A lease attached under
// another owner's lease id gets a *LeaseError with ErrNotOwner instead. Add it to a transaction that writes data protected by the lock, so
// that a holder that lost its lease (paused past it, say) cannot write.
// It returns an *OptionError naming the lease when l is nil.
func (m *Mutex) GuardCheck(l *Lease) (types.TransactWriteItem, error) {
	if l == nil {
		return types.TransactWriteItem{}, invalidOption("lease", "must not be nil")
	}
	if err := checkOwner("guard", l); err != nil {
		return types.TransactWriteItem{}, err
	}
	cond := m.ownedBy(l) // the previous format: never true of a row in the ticket format
	if h, ok := l.ops.(*mutexHold); ok {
		cond = expression.Or(h.ours(), cond)
	}
	e := expr(expression.NewBuilder().WithCondition(cond))
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                           aws.String(m.table),
		Key:                                 m.keyOf(l.key, l.namespace),
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, nil
}
