package lockcore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"crypto/rand"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The fair locking read: a ticket lock on the data item itself (see ItemLocker for the
// protocol and its validity argument). This file holds the queue; itemlock.go the API,
// the writes and the write chain.
//
// Much of it mirrors TicketLock (ticket.go): the take with its settling entry, the
// tombstones, the paced polling and the skip rules. The two differ where the item
// differs from a lock row: holder attributes (lockedBy and friends) that old clients
// and callers' own transactions read, and a queue that must not grow the item much.

// marker is the lockedBy value of a ticket handed over (by a release or a skip) whose
// waiter has not written its lease id yet. It holds no '#', so it is never a lease id.
func marker(ticket int64) string { return "~" + strconv.FormatInt(ticket, 10) }

// newWaiterID returns the key of a waiter's entry in the Waiters map: 48 random bits
// in 8 characters, short because every entry lives on the data item.
func newWaiterID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// itemState is the queue and holder state of a data item.
type itemState struct {
	it         item
	exists     bool
	hasQueue   bool // the Waiters map exists
	hasServing bool
	hasRev     bool
	next       int64 // Fence: last ticket issued
	epoch      int64 // Epoch: start of this life of the item (0: none yet)
	serving    int64
	ticket     int64 // the ticket the holder attributes belong to
	rev        int64
	leaseMs    int64
	holdMs     int64 // the holders' published hold time (HoldMs; 0: none)
	until      int64
	lockedBy   string
	owner      string
	write      string
	waiters    map[int64]string // ticket → waiter id
	tombs      tombstones       // waiter id → ms: withdrawn before issued
	ownTicket  int64            // ticket of the entry asked about
	ownEntry   bool
}

func (il *ItemLocker) state(it item, wid string) itemState {
	a := il.attrs
	st := itemState{it: it, exists: it != nil, waiters: map[int64]string{}, tombs: map[string]int64{}}
	st.next, _ = attrN(it, a.Fence)
	st.epoch, _ = attrN(it, a.Epoch)
	st.serving, st.hasServing = attrN(it, a.Serving)
	st.ticket, _ = attrN(it, a.Ticket)
	st.rev, st.hasRev = attrN(it, a.Rev)
	st.leaseMs, _ = attrN(it, a.LeaseMs)
	st.holdMs, _ = attrN(it, a.HoldMs)
	st.until, _ = attrN(it, a.Until)
	st.lockedBy, st.owner, st.write = attrS(it, a.LockedBy), attrS(it, a.Owner), attrS(it, a.Write)
	if m, ok := it[a.Waiters].(*types.AttributeValueMemberM); ok {
		st.hasQueue = true
		for k, v := range m.Value {
			switch x := v.(type) {
			case *types.AttributeValueMemberN:
				t, err := strconv.ParseInt(x.Value, 10, 64)
				if err != nil {
					continue
				}
				st.waiters[t+1] = k
				if k == wid {
					st.ownTicket, st.ownEntry = t+1, true
				}
			case *types.AttributeValueMemberS:
				if ts, ok := strings.CutPrefix(x.Value, tombPrefix); ok {
					ms, _ := strconv.ParseInt(ts, 10, 64)
					st.tombs[k] = ms
				}
			}
		}
	}
	return st
}

// turnBegan is when the served ticket's turn began, as the item records it (zero: not
// recorded): the holder's lockTime, or for a ticket handed over to its marker (no
// lockTime yet) the lease end the handoff wrote less the lease it wrote. Heartbeats move
// both, so for a long hold it is the last heartbeat: timing only, never safety.
func (il *ItemLocker) turnBegan(st itemState) time.Time {
	if st.lockedBy == "" || st.ticket != st.serving {
		return time.Time{}
	}
	if ms, ok := attrN(st.it, il.attrs.LockTime); ok && ms > 0 {
		return time.UnixMilli(ms)
	}
	if st.until > 0 && st.leaseMs > 0 {
		return time.UnixMilli(st.until - st.leaseMs)
	}
	return time.Time{}
}

// served says what the served ticket is.
type servedKind int

const (
	servedFree servedKind = iota // nobody holds or waits
	servedGone                   // released by a write that left serving alone, or withdrawn: skip at once
	servedLive                   // a holder (ours, an old client's, or handed over): skip only when stalled
)

func (st itemState) served() servedKind {
	if st.lockedBy == "" {
		// serving == next: the last ticket issued was served and released by a write
		// that left serving alone (a caller's own transaction) — nobody waits, so the
		// item is free, as freeCond says. Calling it gone made a take that had started
		// in the queue form (this client found the item busy lately) loop between a
		// queue form refused because the item is free and a skip with nothing to skip,
		// until it gave up ("the item keeps changing under the take").
		if !st.hasServing || st.serving >= st.next {
			return servedFree
		}
		return servedGone
	}
	if st.lockedBy == marker(st.serving) {
		if _, ok := st.waiters[st.serving]; !ok {
			return servedGone
		}
	}
	return servedLive
}

// staleEntries returns (up to n) entries of tickets serving has passed: a waiter that was
// handed the item and unlocked it by its caller's own transaction before writing leaves
// its entry behind, and no ticket of this item's life can be served again once passed.
func (st itemState) staleEntries(n int) []string {
	var stale []string
	for t, w := range st.waiters {
		if t < st.serving && len(stale) < n {
			stale = append(stale, w)
		}
	}
	return stale
}

// holder describes the served ticket for errors and observers.
func (il *ItemLocker) stateHolder(st itemState) *Holder {
	if st.lockedBy == "" {
		return nil
	}
	h := &Holder{Owner: st.owner, LeaseID: st.lockedBy, Rev: st.rev,
		Lease: time.Duration(st.leaseMs) * time.Millisecond, Token: itemFence(st.epoch, st.ticket)}
	if st.until > 0 {
		h.Until = time.UnixMilli(st.until)
	}
	if st.hasServing {
		h.Token = itemFence(st.epoch, st.serving)
	}
	return h
}

// itemHold is one acquisition of an item: the leaseOps of its Lease.
type itemHold struct {
	il     *ItemLocker
	key    item
	label  string
	ticket int64  // 0: unknown (an attached lease)
	wid    string // our entry in the Waiters map ("" for a claim take: none)
	entry  bool   // our entry may still exist
	next   int64  // Fence as last seen: tickets issued after ours mean waiters
	gc     []string
	since  time.Time
	shared int64 // the item's published hold time (HoldMs) as last seen, 0: none

	// io serializes the heartbeat's renewals, the holder's writes and its release: each
	// records what it learns of the item (entry, next, gc) in the hold.
	io sync.Mutex

	skippedStalled bool

	// attached: a handle of ItemLocker.Attach. grant: the longest lease (ms) the item
	// granted the holder by another handle of this lease (read by an attached handle
	// before its first renewal, or learnt from a renewal refused for shortening it),
	// which this handle's renewals never shorten.
	attached bool
	grant    int64

	// tombWID: a take of this hold failed ambiguously and may still land (a retry took
	// the item): the waiter id it carried is left as a tombstone in the Waiters map when
	// our entry ends (or, for a claim, with the release), so that the late copy fails
	// its condition instead of locking the item for a lease nobody holds.
	tombWID string

	// init: SetIfAbsent attributes the item lacked when the lock was handed to us
	// (a queued take does not write them: it may not change an item another client
	// holds); the next renewal writes them, and item is the item it returned.
	init map[string]types.AttributeValue
	item item

	// size: the item's size as last returned to this hold, without the Room padding
	// (0: unknown); own: the part of it that the holder attributes lockedBy, lockOwner
	// and lockTime take (ours, or our ticket's marker, while we hold: our release removes
	// them); room: the padding was there; epoch: the life's epoch as last seen (see
	// itemFence).
	size, own int
	room      bool
	epoch     int64

	// lean: the item has no room for our lease id, owner and lock time (a waiter handed
	// an item that another writer filled nearly to DynamoDB's limit). The lease is held
	// by its ticket, as a handed-over lease is before its first write: renewals write
	// only what waiters watch (lockRev, lockUntil, lockLeaseMs), and writes do not claim.
	lean bool
}

// learn records what an item returned to the hold says about its size and life.
func (h *itemHold) learn(it item) {
	if it == nil {
		return
	}
	a := h.il.attrs
	h.size, h.own = itemBytes(it), 0
	var pad types.AttributeValue
	if pad, h.room = it[a.Room]; h.room {
		h.size -= len(a.Room) + valueBytes(pad) // room the holder may use
	}
	for _, k := range []string{a.LockedBy, a.Owner, a.LockTime} {
		if v, ok := it[k]; ok {
			h.own += len(k) + valueBytes(v)
		}
	}
	if e, ok := attrN(it, a.Epoch); ok {
		h.epoch = e
	}
	if v, ok := attrN(it, a.HoldMs); ok {
		h.shared = v
	}
}

// claimBytes bounds what the holder attributes of lease l take on the item.
func (h *itemHold) claimBytes(l *Lease) int {
	a := h.il.attrs
	return len(a.LockedBy) + len(l.id) + len(a.Owner) + len(l.owner) + len(a.LockTime) + numberBytes("1234567890123")
}

// passBytes bounds the holder attributes a release leaves on the item: on a handoff the
// next ticket's marker, ticket, lease end and length; and a digit more in serving and
// rev.
func (h *itemHold) passBytes(l *Lease, handoff bool) int {
	n := 2 + len(h.il.attrs.HoldMs) + numberBytes("12345678") // the published hold time
	if handoff {
		a := h.il.attrs
		n += len(a.LockedBy) + len(marker(h.ticket+1)) + len(a.Ticket) + numberBytes(strconv.FormatInt(h.ticket+1, 10)) +
			len(a.Until) + numberBytes("1234567890123") + len(a.LeaseMs) + numberBytes(strconv.FormatInt(l.duration.Milliseconds(), 10))
	}
	return n
}

// padding is the size of the Room padding (0: none) that a holder write adding about add
// bytes carries, when the write leaves own bytes of holder attributes on the item (ours,
// which our release removes; for a release, passBytes). A write carrying it fails as too large
// unless, once we have released, itemHeadroom stays free for the next holder's lock
// attributes — or, on an item that already had less free, unless it leaves the item no
// larger than it was (as far as the hold knows its size). The next renewal or holder
// write gives the padding back (room.go). Far from the size limit (below half of it, so
// that an update copying attributes still counts as near) none.
func (h *itemHold) padding(add, own int) int {
	base := h.size - h.own // the item once we have released, before this write
	if h.size+add < maxItemBytes/2 {
		return 0
	}
	p := itemHeadroom - own
	if base+itemHeadroom > maxItemBytes {
		p = maxItemBytes - base - own
	}
	if p > len(h.il.attrs.Room) {
		return p
	}
	return 0
}

// keepRoom adds the Room padding of pad bytes, name included, to u, or with pad 0
// removes it if the item had it.
func (h *itemHold) keepRoom(u expression.UpdateBuilder, pad int) expression.UpdateBuilder {
	a := h.il.attrs
	if pad <= 0 {
		if h.room {
			u = u.Remove(name(a.Room))
		}
		return u
	}
	return u.Set(name(a.Room), value(make([]byte, pad-len(a.Room))))
}

// tooLargeErr explains a write DynamoDB refused as too large (cause), or one that would
// leave less than keep bytes free.
func (h *itemHold) tooLargeErr(op string, keep int, cause error) error {
	return &ItemTooLargeError{Op: op, Key: h.label, Size: h.size, Keep: keep, Limit: maxItemBytes, Cause: cause}
}

// endEntry adds the end of our entry in the Waiters map to u: removed, or a tombstone
// where a late copy of our take could land (see tombWID).
func (h *itemHold) endEntry(u expression.UpdateBuilder) expression.UpdateBuilder {
	if h.tombWID != "" {
		u = u.Set(h.il.waiterPath(h.tombWID), value(tombstone(h.il.cfg.clock.Now())))
	}
	if h.wid != "" && h.entry && h.wid != h.tombWID {
		u = u.Remove(h.il.waiterPath(h.wid))
	}
	return u
}

// withdrawal is the update that withdraws our waiting entry: removed, or a tombstone
// where a late copy of our take could land (see tombWID).
func (h *itemHold) withdrawal() expression.UpdateBuilder {
	if h.tombWID != "" {
		return expression.Set(h.il.waiterPath(h.tombWID), value(tombstone(h.il.cfg.clock.Now())))
	}
	return expression.Remove(h.il.waiterPath(h.wid))
}

func (il *ItemLocker) waiterPath(wid string) expression.NameBuilder {
	return name(il.attrs.Waiters + "." + wid)
}

// freeCond holds when nobody holds or waits for the item: no holder attributes, and no
// ticket outstanding beyond the served one (which then was released by a write that left
// serving alone, as a caller's own transaction does).
func (il *ItemLocker) freeCond() expression.ConditionBuilder {
	a := il.attrs
	return expression.And(expression.AttributeNotExists(name(a.LockedBy)),
		expression.Or(expression.AttributeNotExists(name(a.Serving)),
			expression.GreaterThanEqual(name(a.Serving), name(a.Fence))))
}

// owns is the condition that the lease still holds the item: its lease id is in
// lockedBy (claimed), or its ticket is served, handed over to it and not withdrawn.
func (h *itemHold) owns(l *Lease) expression.ConditionBuilder {
	a := h.il.attrs
	claimed := expression.And(
		expression.Equal(name(a.LockedBy), value(l.id)),
		expression.Equal(name(a.Owner), value(l.owner)))
	if h.ticket == 0 || h.wid == "" {
		return claimed
	}
	return expression.Or(claimed, expression.And(
		expression.Equal(name(a.Serving), value(h.ticket)),
		expression.Equal(name(a.LockedBy), value(marker(h.ticket))),
		expression.AttributeExists(h.il.waiterPath(h.wid))))
}

func (h *itemHold) ownsState(l *Lease, st itemState) bool {
	if st.lockedBy == l.id && st.owner == l.owner {
		return true
	}
	if h.ticket == 0 || h.wid == "" {
		return false
	}
	_, entry := st.waiters[h.ticket]
	return st.serving == h.ticket && st.lockedBy == marker(h.ticket) && entry && st.waiters[h.ticket] == h.wid
}

// claim writes the lease's identity into the holder attributes (and drops its entry).
func (h *itemHold) claim(u expression.UpdateBuilder, l *Lease) expression.UpdateBuilder {
	a := h.il.attrs
	u = u.Set(name(a.LockedBy), value(l.id)).Set(name(a.Owner), value(l.owner))
	if h.ticket > 0 {
		u = u.Set(name(a.Ticket), value(h.ticket))
	}
	return h.endEntry(u)
}

// handsOver tells which release form to try first: a handoff when tickets were issued
// after ours, else a release that frees the item.
func (h *itemHold) handsOver() bool { return h.ticket > 0 && h.next > h.ticket }

// releaseUpdate adds the release to u: serving moves on, and the holder attributes
// either name the next ticket (handoff: Fence > ticket) or go (free: Fence = ticket).
// cond gets the matching condition on Fence.
func (h *itemHold) releaseUpdate(u expression.UpdateBuilder, l *Lease, handoff bool) (expression.UpdateBuilder, expression.ConditionBuilder) {
	a := h.il.attrs
	t := h.ticket
	now := h.il.cfg.clock.Now()
	u = h.endEntry(h.publishHold(u.Set(name(a.Serving), value(t+1)).Add(name(a.Rev), value(1))))
	for _, tomb := range h.gc {
		u = u.Remove(h.il.waiterPath(tomb))
	}
	if handoff {
		u = u.Set(name(a.LockedBy), value(marker(t+1))).Set(name(a.Ticket), value(t+1)).
			Set(name(a.Until), value(now.Add(l.duration).UnixMilli())).
			Set(name(a.LeaseMs), value(l.duration.Milliseconds())).
			Remove(name(a.Owner)).Remove(name(a.LockTime))
		return u, expression.GreaterThan(name(a.Fence), value(t))
	}
	u = u.Remove(name(a.LockedBy)).Remove(name(a.Owner)).Remove(name(a.Until)).
		Remove(name(a.LockTime)).Remove(name(a.Ticket))
	return u, expression.Equal(name(a.Fence), value(t))
}

// passedOn tells, after an attempt to release whose outcome is unknown, that it landed:
// serving moved past our ticket while our lease was certainly valid. Nobody else can
// move it then (a skip needs the ticket withdrawn, released, or silent for longer than
// the validity counted), so it was our release — even when the next holder has already
// overwritten the release's write id.
func (h *itemHold) passedOn(l *Lease, st itemState) bool {
	return h.ticket > 0 && st.exists && st.hasServing && st.serving > h.ticket && st.next >= h.ticket && l.Remaining() > 0
}

// learnTicket reads the ticket of an attached lease (claimed: its lease id is in
// lockedBy). It leaves the hold unchanged when the item says nothing.
func (h *itemHold) learnTicket(ctx context.Context, l *Lease) {
	if h.ticket != 0 {
		return
	}
	it, err := h.il.read(ctx, h.key)
	if err != nil {
		return
	}
	st := h.il.state(it, "")
	if st.lockedBy == l.id && st.ticket > 0 {
		h.ticket, h.next = st.ticket, st.next
	}
}

// renew implements leaseOps: the heartbeat, which also claims a handed-over ticket.
func (h *itemHold) renew(ctx context.Context, l *Lease) error {
	h.io.Lock()
	defer h.io.Unlock()
	il := h.il
	a := il.attrs
	if h.attached && h.grant == 0 {
		// An attached handle never shortens the lease the item grants its holder
		// (waiters count it from every renewal, whichever handle sends it): writing its
		// own client's shorter lease would let them take over while the acquiring
		// handle still counts its own.
		it, err := il.read(ctx, h.key)
		if err != nil {
			return fmt.Errorf("lockcore: renew %s: %w", l.key, err)
		}
		h.grant = il.state(it, "").leaseMs
		h.learn(it)
	}
	flips := 0
	var d time.Duration // what waiters grant from this renewal on (our validity: l.duration)
	return holderWrite(ctx, il.cfg, "renew", l.key,
		func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
			now := il.cfg.clock.Now()
			d = max(l.duration, time.Duration(h.grant)*time.Millisecond)
			// A heartbeat also gives back the Room padding of a holder write (its room is
			// ours to use), and gives an item life begun by a previous release's client
			// its epoch.
			u := expression.Set(name(a.Until), value(now.Add(d).UnixMilli())).
				Set(name(a.LeaseMs), value(d.Milliseconds())).
				Add(name(a.Rev), value(1)).
				Set(name(a.Epoch), expression.IfNotExists(name(a.Epoch), value(itemEpoch(now))))
			u = h.keepRoom(u, 0)
			if !h.lean {
				u = h.claim(u.Set(name(a.LockTime), value(now.UnixMilli())), l)
			}
			// Nor does any handle shorten a lease that another handle of this lease
			// (lockedBy = its id) granted: an attached handle whose client uses a longer
			// lease counts that lease from its renewal, and waiters would take over after
			// ours.
			shorter := expression.And(
				expression.Equal(name(a.LockedBy), value(l.id)),
				expression.GreaterThan(name(a.LeaseMs), value(d.Milliseconds())))
			e := expr(expression.NewBuilder().WithCondition(expression.And(h.owns(l), expression.Not(shorter))).WithUpdate(initAttrs(u, h.init)))
			return il.db.UpdateItem(ctx, conditionalUpdate(il.table, h.key, e, types.ReturnValueAllNew), noSDKRetry)
		},
		func(out *dynamodb.UpdateItemOutput) error {
			if !h.lean {
				h.entry = false
			}
			h.next, _ = attrN(out.Attributes, a.Fence)
			h.learn(out.Attributes)
			if h.init != nil {
				h.init, h.item = nil, out.Attributes
			}
			return nil
		},
		func(ctx context.Context) (item, error) { return il.read(ctx, h.key) },
		func(_ context.Context, old item, _ bool) (bool, error) {
			if st := il.state(old, h.wid); st.lockedBy == l.id && st.owner == l.owner && st.leaseMs > d.Milliseconds() && flips < 4 {
				flips++
				h.grant = st.leaseMs // granted by another handle: keep it
				return true, nil
			}
			return false, il.classifyOld("renew", l, old)
		},
		func(err error) (bool, error) {
			switch {
			case !tooLarge(err):
				return false, nil
			case !h.lean:
				// No room for our lease id, owner and lock time: hold the item by our
				// ticket (or the lease id already there) and renew with what waiters
				// watch only, which grows the item by a few bytes at most. The lease is
				// not lost for want of room that nobody else took.
				h.lean = true
				return true, nil
			}
			return false, h.tooLargeErr("renew", 0, err)
		})
}

// heldFor records how long this tenure held the item, at its release (Release or
// UpdateAndRelease, both): this client's waiters plan their reads with it (pacing.turn).
// Without it they plan with no turn at all, and a waiter served while asleep on a long
// plan (up to a tenth of the lease) leaves the item idle.
func (h *itemHold) heldFor() {
	if !h.since.IsZero() {
		h.il.pacing.held(h.il.pacingKey(h.label), h.il.cfg.clock.Now().Sub(h.since))
	}
}

// publishHold adds to u the item's published hold time (HoldMs): this tenure's, averaged
// with the one the item carried (as a Mutex row's holdMs). Waiters new to the item plan
// with it (pacing.turnShared); without one, they read by position.
// Nothing for a tenure whose start is unknown (an attached lease).
func (h *itemHold) publishHold(u expression.UpdateBuilder) expression.UpdateBuilder {
	if h.since.IsZero() {
		return u
	}
	v := max(h.il.cfg.clock.Now().Sub(h.since).Milliseconds(), 1)
	if h.shared > 0 {
		v = max((7*h.shared+3*v)/10, 1)
	}
	return u.Set(name(h.il.attrs.HoldMs), value(v))
}

// unlock adds to u the release of a lease without a ticket to pass on (an old client's,
// or one released in the caller's own write: ReleaseUpdate): the holder attributes go,
// the hold time is published.
func (h *itemHold) unlock(u expression.UpdateBuilder) expression.UpdateBuilder {
	return h.publishHold(h.il.unlock(u))
}

// release implements leaseOps: it passes the item on to the next ticket, or frees it.
func (h *itemHold) release(ctx context.Context, l *Lease) error {
	// Serialized with the holder's writes (Update, UpdateAndRelease), as renewals are:
	// both read and record what they learn of the item (ticket, next, entry, gc) in h.
	h.io.Lock()
	defer h.io.Unlock()
	il := h.il
	h.heldFor()
	h.learnTicket(ctx, l)
	releaseID := randomHex(8)
	handoff := h.handsOver()
	flips := 0
	// Near the size limit, keep room for the next holder's lock attributes (room.go);
	// but a release never fails for it: without room the next holder holds by its
	// ticket (itemHold.lean).
	pad := h.padding(0, h.passBytes(l, handoff))
	return holderWrite(ctx, il.cfg, "release", l.key,
		func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
			cond := h.owns(l)
			u := h.keepRoom(expression.Set(name(il.attrs.Write), value(releaseID)), pad)
			if h.ticket > 0 {
				var fc expression.ConditionBuilder
				u, fc = h.releaseUpdate(u, l, handoff)
				cond = expression.And(cond, fc)
			} else {
				u = h.unlock(u) // a lease of an old client's making: no ticket to pass on
			}
			e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(u))
			return il.db.UpdateItem(ctx, conditionalUpdate(il.table, h.key, e, types.ReturnValueNone), noSDKRetry)
		},
		func(*dynamodb.UpdateItemOutput) error { return nil },
		func(ctx context.Context) (item, error) { return il.read(ctx, h.key) },
		func(_ context.Context, old item, uncertain bool) (bool, error) {
			st := il.state(old, h.wid)
			if st.write == releaseID || (uncertain && h.passedOn(l, st)) {
				return false, nil // our earlier attempt released it
			}
			if h.ownsState(l, st) && flips < 4 {
				flips++
				h.next = st.next
				handoff = h.handsOver()
				pad = h.padding(0, h.passBytes(l, handoff))
				return true, nil
			}
			lerr := il.classifyOld("release", l, old)
			if uncertain && errors.Is(lerr, ErrLeaseLost) {
				lerr = &LeaseError{Op: "release", Key: l.key, LeaseID: l.id, Current: il.holderOf(old), Err: errLostUnknown}
			}
			return false, lerr
		},
		func(err error) (bool, error) {
			switch {
			case !tooLarge(err):
				return false, nil
			case pad > 0:
				pad = 0
				return true, nil
			}
			return false, h.tooLargeErr("release", 0, err)
		})
}

// itemBusy remembers, per item, when this client last found it busy: a take then joins
// the queue at once instead of first trying to take a free item (which would fail and
// cost a write). Forgetting is always safe.
type itemBusy struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (b *itemBusy) recent(key string, now time.Time, within time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.m[key]
	return ok && now.Sub(t) < within
}

func (b *itemBusy) set(key string, now time.Time, busy bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = make(map[string]time.Time)
	}
	if busy {
		boundedStore(b.m, key, now)
	} else {
		delete(b.m, key)
	}
}

func (il *ItemLocker) pacingKey(label string) string { return il.table + "\x00" + label }

var emptyMap = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}

// takeResult is what a take learnt: the item as the take left it, and whether the take
// made us the holder at once (a claim take).
type takeResult struct {
	st      itemState
	claimed bool
	sent    time.Time // send time of the first request that may have issued the ticket
}

// take issues a ticket: a claim take when the item is free (it takes the lock and its
// ticket in one write, with our lease id in lockedBy), else a queue take (a ticket and
// our entry). Each fails its condition when the other applies; the item's ALL_OLD then
// tells which, so a wrong guess costs one refused write.
func (il *ItemLocker) take(ctx context.Context, h *itemHold, leaseID string, ac *acquireConfig, start time.Time) (_ takeResult, retErr error) {
	a := il.attrs
	pk := il.pacingKey(h.label)
	nowait := noWait(ac.wait)
	claimForm := nowait || !il.busy.recent(pk, il.cfg.clock.Now(), 2*ac.lease)
	bo := backoff{base: il.cfg.backoffBase, cap: il.cfg.backoffCap}
	var first time.Time
	uncertainClaim, uncertainQueue := false, false
	freeRoom := false // the claim form gives back the Room padding (after a refusal for size)
	var last itemState
	defer func() {
		if retErr != nil && (uncertainClaim || uncertainQueue) {
			il.withdrawUnknown(ctx, h, leaseID, uncertainQueue)
		}
	}()
	for tries := 0; ; tries++ {
		now := il.cfg.clock.Now()
		var e expression.Expression
		if claimForm {
			// Not under a waiter id of ours: a late copy of an ambiguous take of ours
			// finds it as a tombstone (see itemHold.tombWID).
			cond := expression.And(il.freeCond(), expression.AttributeNotExists(il.waiterPath(h.wid)))
			if il.requireItem {
				cond = expression.And(expression.AttributeExists(name(anyKeyName(h.key))), cond)
			}
			tk := expression.Plus(expression.IfNotExists(name(a.Fence), value(0)), value(1))
			upd := expression.Add(name(a.Fence), value(1)).
				Set(name(a.Serving), tk).Set(name(a.Ticket), tk).
				Set(name(a.LockedBy), value(leaseID)).
				Set(name(a.Owner), value(il.cfg.owner)).
				Set(name(a.LockTime), value(now.UnixMilli())).
				Set(name(a.Until), value(now.Add(ac.lease).UnixMilli())).
				Set(name(a.LeaseMs), value(ac.lease.Milliseconds())).
				Add(name(a.Rev), value(1)).
				Set(name(a.Waiters), expression.IfNotExists(name(a.Waiters), value(emptyMap))).
				Set(name(a.Epoch), expression.IfNotExists(name(a.Epoch), value(itemEpoch(now))))
			if freeRoom {
				upd = upd.Remove(name(a.Room)) // the room a holder's write kept is ours
			}
			e = expr(expression.NewBuilder().WithCondition(cond).WithUpdate(initAttrs(upd, ac.init)))
		} else {
			cond := expression.And(
				expression.AttributeExists(name(a.Waiters)),
				expression.AttributeNotExists(il.waiterPath(h.wid)),
				expression.Not(il.freeCond()))
			// No SetIfAbsent attributes here: another client holds the item, and it may
			// have read them absent (they are written once the lock is ours).
			upd := expression.Add(name(a.Fence), value(1)).
				Set(il.waiterPath(h.wid), expression.IfNotExists(name(a.Fence), value(0)))
			for _, w := range last.staleEntries(maxTombGC) {
				if w != h.wid {
					upd = upd.Remove(il.waiterPath(w)) // as the item looked a moment ago
				}
			}
			e = expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
		}
		if first.IsZero() {
			first = now
		}
		out, err := il.db.UpdateItem(ctx, conditionalUpdate(il.table, h.key, e, types.ReturnValueAllNew), noSDKRetry)
		if err == nil {
			il.cfg.observeServer(out.ResultMetadata)
			st := il.state(out.Attributes, h.wid)
			if uncertainClaim || uncertainQueue {
				h.tombWID = h.wid
			}
			if claimForm {
				h.ticket, h.wid, h.entry = st.ticket, "", false
				il.busy.set(pk, now, false)
				return takeResult{st: st, claimed: true, sent: first}, nil
			}
			h.ticket, h.entry = st.ownTicket, true
			h.gc = st.tombs.old(now)
			il.busy.set(pk, now, true)
			return takeResult{st: st, sent: first}, nil
		}
		switch classify(err) {
		case errCondition:
			old, ok := conditionOld(err)
			if !ok {
				if old, err = il.read(ctx, h.key); err != nil {
					return takeResult{}, fmt.Errorf("lockcore: lock item %s: %w", h.label, err)
				}
			}
			st := il.state(old, h.wid)
			last = st
			switch {
			case uncertainClaim && st.lockedBy == leaseID:
				h.tombWID = h.wid
				h.ticket, h.wid, h.entry = st.ticket, "", false
				return takeResult{st: st, claimed: true, sent: first}, nil
			case st.ownEntry && uncertainQueue:
				h.tombWID = h.wid
				h.ticket, h.entry = st.ownTicket, true
				h.gc = st.tombs.old(now)
				return takeResult{st: st, sent: first}, nil
			case st.ownEntry, st.tombs[h.wid] != 0:
				h.wid = newWaiterID() // another waiter's id (48 random bits: rare)
				continue
			case old == nil && il.requireItem:
				return takeResult{}, fmt.Errorf("%w: %s in %s", ErrItemNotFound, h.label, il.table)
			}
			kind := st.served()
			if nowait {
				if kind == servedGone && tries < 8 && il.skip(ctx, h, st, "", ac.lease, 0) {
					continue
				}
				if kind == servedFree && tries < 8 {
					continue // freed meanwhile
				}
				il.busy.set(pk, now, true)
				return takeResult{}, &HeldError{Key: h.label, Holder: il.stateHolder(st), Waited: il.cfg.clock.Now().Sub(start)}
			}
			switch {
			case !st.hasQueue && kind != servedFree:
				// An item without a queue held by a client of the previous release (or a
				// caller's own lockedBy): give it one, the holder's ticket served.
				il.initQueue(ctx, h, st)
				claimForm = false
			case claimForm:
				il.busy.set(pk, now, true)
				claimForm = false
			default:
				claimForm = kind == servedFree
			}
			if tries > 50 {
				return takeResult{}, fmt.Errorf("lockcore: lock item %s: the item keeps changing under the take", h.label)
			}
			continue
		case errFatal:
			if tooLarge(err) && claimForm && !freeRoom {
				freeRoom = true // perhaps a holder's write kept room for us: use it
				continue
			}
			if tooLarge(err) {
				// No room for a ticket, let alone for our lease id (an engine may refuse
				// before it evaluates the condition, so the other form fares no better).
				h.learn(last.it)
				return takeResult{}, h.tooLargeErr("acquire", 0, err)
			}
			return takeResult{}, fmt.Errorf("lockcore: lock item %s: %w", h.label, err)
		case errAmbiguous:
			if claimForm {
				uncertainClaim = true
			} else {
				uncertainQueue = true
			}
			// Re-read before retrying: the item says whether the take landed.
			rctx, cancel := detached(ctx)
			cur, rerr := il.read(rctx, h.key)
			cancel()
			if rerr == nil {
				st := il.state(cur, h.wid)
				switch {
				case claimForm && st.lockedBy == leaseID:
					h.tombWID = h.wid
					h.ticket, h.wid, h.entry = st.ticket, "", false
					return takeResult{st: st, claimed: true, sent: first}, nil
				case !claimForm && st.ownEntry:
					h.tombWID = h.wid
					h.ticket, h.entry = st.ownTicket, true
					h.gc = st.tombs.old(now)
					return takeResult{st: st, sent: first}, nil
				}
				last = st
			}
			if ctx.Err() != nil {
				return takeResult{}, &HeldError{Key: h.label, Holder: il.stateHolder(last), Waited: il.cfg.clock.Now().Sub(start), Cause: ctx.Err()}
			}
		}
		if il.cfg.retrySpent(ac.wait, start) {
			return takeResult{}, fmt.Errorf("lockcore: lock item %s: %w", h.label, err)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return takeResult{}, &HeldError{Key: h.label, Holder: il.stateHolder(last), Waited: il.cfg.clock.Now().Sub(start), Cause: serr}
		}
	}
}

// initAttrs adds SetIfAbsent's attributes to a take: each only where the item lacks it.
func initAttrs(u expression.UpdateBuilder, init map[string]types.AttributeValue) expression.UpdateBuilder {
	for _, k := range sortedKeys(init) {
		u = u.Set(name(k), expression.IfNotExists(name(k), value(init[k])))
	}
	return u
}

// initQueue gives an item held under the previous release's protocol (lockedBy, no
// queue) an empty Waiters map, its serving counter at the holder's ticket (Fence, which
// that protocol's take also increments).
func (il *ItemLocker) initQueue(ctx context.Context, h *itemHold, st itemState) {
	a := il.attrs
	// Only on an item that exists: deleted meanwhile, it must not be created again (with
	// a queue and a serving counter that a queued take then locks, RequireItem or not).
	cond := expression.And(expression.AttributeExists(name(anyKeyName(h.key))), expression.AttributeNotExists(name(a.Waiters)))
	upd := expression.Set(name(a.Waiters), value(emptyMap))
	if !st.hasServing {
		upd = upd.Set(name(a.Serving), expression.IfNotExists(name(a.Fence), value(0)))
	}
	e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
	_, _ = il.db.UpdateItem(ctx, conditionalUpdate(il.table, h.key, e, types.ReturnValueNone), noSDKRetry)
}

// skip moves serving past the served ticket, conditioned on the item being as observed
// (serving, rev and lockedBy). The next ticket gets the holder attributes: ours when it
// is our ticket (h with leaseID; a claim), else a handoff marker; with no next ticket
// the item is freed. lease is the lease a handed-over ticket may count on.
func (il *ItemLocker) skip(ctx context.Context, h *itemHold, st itemState, leaseID string, lease time.Duration, ticket int64) bool {
	a := il.attrs
	s := st.serving
	now := il.cfg.clock.Now()
	cond := expression.Equal(name(a.Serving), value(s))
	if st.hasRev {
		cond = expression.And(cond, expression.Equal(name(a.Rev), value(st.rev)))
	} else {
		cond = expression.And(cond, expression.AttributeNotExists(name(a.Rev)))
	}
	if st.lockedBy != "" {
		cond = expression.And(cond, expression.Equal(name(a.LockedBy), value(st.lockedBy)))
	} else {
		cond = expression.And(cond, expression.AttributeNotExists(name(a.LockedBy)))
	}
	upd := expression.Set(name(a.Serving), value(s+1)).Add(name(a.Rev), value(1))
	if w, ok := st.waiters[s]; ok {
		upd = upd.Remove(il.waiterPath(w))
	}
	switch {
	case ticket > 0 && s+1 == ticket:
		if h.wid != "" {
			// Only while our ticket stands: a copy landing after we gave up (our entry
			// withdrawn, or a tombstone) must not lock the item for a lease nobody holds.
			cond = expression.And(cond, expression.AttributeType(il.waiterPath(h.wid), expression.Number))
		}
		upd = upd.Set(name(a.LockedBy), value(leaseID)).Set(name(a.Owner), value(il.cfg.owner)).
			Set(name(a.Ticket), value(ticket)).
			Set(name(a.LockTime), value(now.UnixMilli())).
			Set(name(a.Until), value(now.Add(lease).UnixMilli())).
			Set(name(a.LeaseMs), value(lease.Milliseconds()))
		upd = h.endEntry(upd)
	case s+1 <= st.next:
		upd = upd.Set(name(a.LockedBy), value(marker(s+1))).Set(name(a.Ticket), value(s+1)).
			Set(name(a.Until), value(now.Add(lease).UnixMilli())).
			Set(name(a.LeaseMs), value(lease.Milliseconds())).
			Remove(name(a.Owner)).Remove(name(a.LockTime))
	default:
		cond = expression.And(cond, expression.Equal(name(a.Fence), value(s)))
		upd = upd.Remove(name(a.LockedBy)).Remove(name(a.Owner)).Remove(name(a.Until)).
			Remove(name(a.LockTime)).Remove(name(a.Ticket))
	}
	e := expr(expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
	_, err := il.db.UpdateItem(ctx, conditionalUpdate(il.table, h.key, e, types.ReturnValueNone), noSDKRetry)
	if err != nil && tooLarge(err) && ticket > 0 && s+1 == ticket {
		// No room for our lease id: hand the item to our ticket instead (as a release
		// would), and hold it by the ticket (itemHold.lean).
		return il.skip(ctx, h, st, "", lease, 0)
	}
	return err == nil
}

// waitResult is a wait that reached our turn.
type waitResult struct {
	st      itemState
	claimed bool      // our own skip wrote our lease id
	start   time.Time // start of the lease's validity
	lease   time.Duration
}

// wait waits in the item's line (waitTurn) until our ticket is served: handed over, or
// claimed by our own skip (see ItemLocker for the rules).
func (il *ItemLocker) wait(ctx context.Context, h *itemHold, leaseID string, tr takeResult, ac *acquireConfig, start time.Time) (waitResult, error) {
	var claimSent time.Time // first send of a skip that may have made us the holder
	ly := itemLine{il: il, h: h, leaseID: leaseID, lease: ac.lease, claimSent: &claimSent}
	obs := observer{}
	if ac.seen != nil {
		// What the caller saw (Seen): if the item still shows that tenure and revision
		// when the wait begins, silence counts from then.
		r := ly.parse(ac.seen)
		obs = observer{leaseID: r.servedID(), rev: r.rev, lease: r.servedLease(), since: ac.seenAt}
	}
	w := lineWait{cfg: il.cfg, pacing: &il.pacing, pk: il.pacingKey(h.label), key: h.label, what: "lock item",
		ticket: h.ticket, ac: ac, start: start, obs: &obs, plan: true, fresh: ac.lease / 4, confirmTurn: true}
	row, lastBefore, err := waitTurn(ctx, ly, w, itemRow{itemState: tr.st, il: il, lease: ac.lease}, tr.sent)
	if err != nil {
		return waitResult{}, err
	}
	st, lease := row.itemState, ac.lease
	if st.lockedBy == leaseID {
		h.entry = false
		if claimSent.IsZero() {
			claimSent = lastBefore
		}
		return waitResult{st: st, claimed: true, start: claimSent, lease: lease}, nil
	}
	// Handed over: the lease counts from lastBefore, for no longer than the lease the
	// handoff wrote (waiters skip the ticket after that much silence), and in the
	// wall-clock mode not past the lease end it wrote.
	d := lease
	if st.leaseMs > 0 {
		d = min(d, time.Duration(st.leaseMs)*time.Millisecond)
	}
	s := lastBefore.Add(d - lease)
	if il.cfg.takeover.wallClock && st.until > 0 {
		if end := time.UnixMilli(st.until); end.Before(s.Add(lease)) {
			s = end.Add(-lease)
		}
	}
	return waitResult{st: st, start: s, lease: lease}, nil
}

// itemRow is the data item as the wait line sees it.
type itemRow struct {
	itemState
	il    *ItemLocker
	lease time.Duration // the waiter's lease: the served ticket's, where the item records none
}

func (r itemRow) line() ticketRow {
	return ticketRow{exists: r.exists, serving: r.serving, rev: r.rev, next: r.next}
}

func (r itemRow) servedLease() time.Duration {
	if r.leaseMs > 0 {
		return time.Duration(r.leaseMs) * time.Millisecond
	}
	return r.lease
}

// sharedHold: the hold time the item's holders publish (HoldMs; 0: none yet).
func (r itemRow) sharedHold() time.Duration { return time.Duration(r.holdMs) * time.Millisecond }
func (r itemRow) holder() *Holder           { return r.il.stateHolder(r.itemState) }
func (r itemRow) turnBegan() time.Time      { return r.il.turnBegan(r.itemState) }

// servedID: the served ticket and who holds it (its marker, then the lease id its claim
// wrote: a new tenure).
func (r itemRow) servedID() string { return strconv.FormatInt(r.serving, 10) + "\x00" + r.lockedBy }

// itemLine is the ItemLocker's lineLayout: the line lives on the data item.
type itemLine struct {
	il        *ItemLocker
	h         *itemHold
	leaseID   string
	lease     time.Duration
	claimSent *time.Time
}

func (l itemLine) parse(it item) itemRow {
	return itemRow{itemState: l.il.state(it, l.h.wid), il: l.il, lease: l.lease}
}

// gone: our entry is gone (withdrawn, skipped), unless our own skip claimed the item
// for us (the claim drops the entry); or our ticket is served to somebody else.
func (l itemLine) gone(r itemRow) bool {
	t := l.h.ticket
	ours := r.serving == t && (r.lockedBy == l.leaseID || r.lockedBy == marker(t))
	return !ours && (!r.ownEntry || r.serving == t)
}

func (l itemLine) skippable(r itemRow, obs observer, now time.Time) (ok, stalled bool) {
	switch r.served() {
	case servedGone:
		return true, false
	case servedLive:
		return !now.Before(l.skipAt(r, obs)), true
	}
	return false, false
}

// skipAt: a lease of silence, or in wall-clock mode the recorded lease end plus the
// allowance, whichever comes first.
func (l itemLine) skipAt(r itemRow, obs observer) time.Time {
	at := obs.since.Add(r.servedLease())
	if l.il.cfg.takeover.wallClock && r.ticket == r.serving && r.until > 0 {
		at = minTime(at, time.UnixMilli(r.until).Add(l.il.cfg.takeover.skew))
	}
	return at
}

func (l itemLine) skip(ctx context.Context, r itemRow, stalled bool) bool {
	if r.serving+1 == l.h.ticket && l.claimSent.IsZero() {
		*l.claimSent = l.il.cfg.clock.Now()
	}
	if !l.il.skip(ctx, l.h, r.itemState, l.leaseID, l.lease, l.h.ticket) {
		return false
	}
	if stalled {
		l.h.skippedStalled = true
	}
	return true
}

func (l itemLine) read(ctx context.Context, consistent bool) (itemRow, error) {
	it, err := getItem(ctx, l.il.db, l.il.table, l.h.key, consistent)
	return l.parse(it), err
}

func (l itemLine) withdraw(ctx context.Context) { l.il.withdraw(ctx, l.h, l.leaseID) }

// withdraw gives up a ticket: it removes our entry while the ticket is not served, or
// passes the item on if it just was (handed over, or claimed by our own skip).
func (il *ItemLocker) withdraw(ctx context.Context, h *itemHold, leaseID string) {
	e := expr(expression.NewBuilder().
		WithCondition(expression.And(
			expression.LessThan(name(il.attrs.Serving), value(h.ticket)),
			expression.AttributeExists(il.waiterPath(h.wid)))).
		WithUpdate(h.withdrawal()))
	withdrawal(ctx, il.db, il.table, h.key, e,
		func(ctx context.Context) (item, error) { return il.read(ctx, h.key) },
		func(ctx context.Context, old item) *expression.Expression {
			st := il.state(old, h.wid)
			l := &Lease{key: h.label, id: leaseID, owner: il.cfg.owner, clock: il.cfg.clock, duration: il.cfg.lease}
			if h.ownsState(l, st) {
				h.next = st.next
				_ = h.release(ctx, l) // served meanwhile: pass it on
			}
			return nil
		})
}

// entomb writes the tombstone of a claim take that landed after an ambiguous attempt
// (h.tombWID) at once, not only with our release: a holder that is skipped never
// releases, and a late copy of the take, landing once the item is free again, would lock
// it under our lease id, whose renewals and writes would then pass their conditions
// after later holders wrote. Best effort while the detached context lasts (5 s).
func (il *ItemLocker) entomb(ctx context.Context, h *itemHold) {
	e := expr(expression.NewBuilder().
		WithCondition(expression.AttributeExists(name(il.attrs.Waiters))).
		WithUpdate(expression.Set(il.waiterPath(h.tombWID), value(tombstone(il.cfg.clock.Now())))))
	withdrawal(ctx, il.db, il.table, h.key, e,
		func(context.Context) (item, error) { return nil, nil }, // refused: nothing to do
		func(context.Context, item) *expression.Expression { return nil })
}

// withdrawUnknown withdraws a take whose outcome is unknown: a take that has landed is
// released (a claim) or withdrawn (a queue take), and either way its waiter id is left
// as a tombstone, so that another copy of the take still on its way fails its condition
// instead of locking the item for a lease nobody holds (a claim, too, is conditioned on
// its waiter id being absent from the Waiters map).
func (il *ItemLocker) withdrawUnknown(ctx context.Context, h *itemHold, leaseID string, queue bool) {
	rctx, cancel := detached(ctx)
	defer cancel()
	a := il.attrs
	l := &Lease{key: h.label, id: leaseID, owner: il.cfg.owner, clock: il.cfg.clock, duration: il.cfg.lease}
	release := func(st itemState) { // our claim landed: release it, leaving the tombstone
		hc := &itemHold{il: il, key: h.key, label: h.label, ticket: st.ticket, next: st.next, tombWID: h.wid}
		_ = hc.release(rctx, l)
	}
	if it, err := il.read(rctx, h.key); err == nil {
		if st := il.state(it, h.wid); st.lockedBy == leaseID {
			release(st)
			return
		}
	}
	if h.wid == "" {
		return
	}
	now := il.cfg.clock.Now()
	notOurs := expression.Or(expression.AttributeNotExists(name(a.LockedBy)), expression.NotEqual(name(a.LockedBy), value(leaseID)))
	e := expr(expression.NewBuilder().
		WithCondition(expression.And(expression.AttributeExists(name(a.Waiters)), expression.AttributeNotExists(il.waiterPath(h.wid)), notOurs)).
		WithUpdate(expression.Set(il.waiterPath(h.wid), value(tombstone(now)))))
	// An item never locked has no Waiters map yet: a claim may still land there. The
	// tombstone then comes with a new map, on an existing item nobody holds (an item that
	// does not exist is not created for it).
	fresh := expr(expression.NewBuilder().
		WithCondition(expression.And(expression.AttributeExists(name(anyKeyName(h.key))),
			expression.AttributeNotExists(name(a.Waiters)), expression.AttributeNotExists(name(a.LockedBy)))).
		WithUpdate(expression.Set(name(a.Waiters), value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			h.wid: &types.AttributeValueMemberS{Value: tombstone(now)}}}))))
	withdrawal(rctx, il.db, il.table, h.key, e,
		func(ctx context.Context) (item, error) { return il.read(ctx, h.key) },
		func(ctx context.Context, old item) *expression.Expression {
			st := il.state(old, h.wid)
			switch {
			case st.lockedBy == leaseID: // our claim landed meanwhile
				release(st)
			case st.ownEntry:
				h.ticket, h.entry = st.ownTicket, true
				il.withdraw(ctx, h, leaseID)
			case !queue && st.exists && !st.hasQueue:
				return &fresh
			} // else our tombstone from an earlier attempt, or a queue take on no queue
			return nil
		})
}
