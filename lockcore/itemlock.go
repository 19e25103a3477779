package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ItemAttributes names the lock attributes a locking read keeps on the data item.
type ItemAttributes struct {
	LockedBy string // lease id of the holder; absent when unlocked (default "lockedBy")
	LockTime string // wall-clock ms of the last acquisition or renewal (default "lockTime")
	Owner    string // owner name of the holder (default "lockOwner")
	Until    string // holder's wall-clock lease end in ms (default "lockUntil")
	LeaseMs  string // holder's lease duration in ms (default "lockLeaseMs")
	Rev      string // lease version, +1 per acquisition and renewal (default "lockRev")
	Fence    string // tickets issued in this life of the item: the ticket counter (default "lockFence")
	Write    string // id of the last write made under a lease, to settle ambiguous writes (default "lockWrite")

	// The fair queue (left empty, each takes its default).
	Serving string // ticket allowed in (default "lockServing"); Fence is the last ticket issued
	Ticket  string // the ticket the holder attributes belong to (default "lockTicket")
	Waiters string // map of waiter id → ticket − 1, one short entry per waiting ticket (default "lockWaiters")

	// Left empty, each takes its default.
	Epoch string // start of this life of the item, µs since 1970: its tokens' epoch (default "lockEpoch")
	Room  string // padding that keeps room for the next holder on an item near the size limit (default "lockRoom")
	// HoldMs is the holders' hold time in ms, a moving average each release writes: what
	// a waiter new to the item plans its reads with (default "lockHoldMs").
	HoldMs string
}

// DefaultItemAttributes are the attribute names used unless WithItemAttributes says otherwise.
var DefaultItemAttributes = ItemAttributes{
	LockedBy: "lockedBy", LockTime: "lockTime", Owner: "lockOwner", Until: "lockUntil",
	LeaseMs: "lockLeaseMs", Rev: "lockRev", Fence: "lockFence", Write: "lockWrite",
	Serving: "lockServing", Ticket: "lockTicket", Waiters: "lockWaiters",
	Epoch: "lockEpoch", Room: "lockRoom", HoldMs: "lockHoldMs",
}

func (a ItemAttributes) all() []string {
	return []string{a.LockedBy, a.LockTime, a.Owner, a.Until, a.LeaseMs, a.Rev, a.Fence, a.Write, a.Serving, a.Ticket, a.Waiters, a.Epoch, a.Room, a.HoldMs}
}

// withDefaults fills the names left empty that ItemAttributes written before them did not
// have (those name only the first eight, eleven or thirteen).
func (a ItemAttributes) withDefaults() ItemAttributes {
	d := DefaultItemAttributes
	for _, f := range []struct {
		v *string
		d string
	}{
		{&a.Serving, d.Serving}, {&a.Ticket, d.Ticket}, {&a.Waiters, d.Waiters}, {&a.Epoch, d.Epoch}, {&a.Room, d.Room},
		{&a.HoldMs, d.HoldMs},
	} {
		if *f.v == "" {
			*f.v = f.d
		}
	}
	return a
}

// WithItemAttributes renames an ItemLocker's lock attributes. Every name must be
// non-empty and distinct; Serving, Ticket, Waiters, Epoch, Room and HoldMs left empty take
// their defaults. Other strategies refuse it.
func WithItemAttributes(a ItemAttributes) Option {
	return func(c *config) error {
		c.only("itemAttributes", StrategyItem)
		a = a.withDefaults()
		seen := map[string]bool{}
		for _, n := range a.all() {
			if err := validateAttrName("itemAttributes", n); err != nil {
				return err
			}
			if seen[n] {
				return invalidOption("itemAttributes", "attribute name %q used twice", n)
			}
			seen[n] = true
		}
		c.item.attrs = &a
		return nil
	}
}

// WithRequiredItem makes an ItemLocker's Acquire fail with ErrItemNotFound when the item
// does not exist, instead of creating it with only its key and lock attributes. Other
// strategies refuse it.
func WithRequiredItem() Option { return RequireItem() }

// RequireItem is WithRequiredItem.
//
// Deprecated: client options are named With...; use WithRequiredItem.
func RequireItem() Option {
	return func(c *config) error { c.only("requireItem", StrategyItem); c.item.require = true; return nil }
}

// ItemLocker implements the locking read: the lock lives in attributes of the data item
// itself. Acquire locks the item and returns its current contents in one UpdateItem
// (ReturnValues ALL_NEW); UpdateAndRelease writes the caller's changes and unlocks in one
// more, conditioned on the lease. Two calls per uncontended critical section, and the
// write is self-fencing: it cannot land once another client holds the item.
//
// It is fair: waiters enter strictly in the order they took their tickets, from a ticket
// lock kept on the item (as TicketLock keeps one on its lock row).
//
// Attributes (names configurable with WithItemAttributes):
//
//	lockFence     last ticket issued in this life of the item (acquisitions since it
//	              was created)
//	lockEpoch     start of this life of the item, µs since 1970, written by the take that
//	              began it: the fencing token is lockEpoch<<10 + ticket
//	lockServing   ticket allowed in
//	lockWaiters   map of waiter id (8 characters) → ticket − 1, one entry per waiting
//	              ticket, written by the update that issued it
//	lockedBy      the served ticket's holder: its lease id, or "~N" while ticket N has
//	              been handed over and its waiter has not written its lease id yet;
//	              absent when nobody holds the item
//	lockTicket    the ticket lockedBy belongs to
//	lockOwner, lockUntil, lockTime, lockLeaseMs   the holder's owner name, wall-clock
//	              lease end, last acquisition or renewal, lease duration
//	lockRev       bumps on every acquisition, handoff, skip and heartbeat
//	lockWrite     id of the last write, to settle ambiguous writes (the write chain)
//	lockHoldMs    the holders' hold time (ms, a moving average each release writes):
//	              what waiters new to the item plan their reads with
//	lockRoom      padding a holder's write to an item near DynamoDB's size limit leaves
//	              for the next holder's lock attributes; the next renewal, holder write
//	              or take that needs it removes it
//
// Protocol:
//
//	take (free)   one UpdateItem if nobody holds or waits: ADD lockFence 1, serving = the
//	              new ticket, lockedBy = our lease id, lockEpoch = now if absent, …;
//	              ALL_NEW is the item: held and read in one call.
//	take (queue)  one UpdateItem if the item is busy: ADD lockFence 1 and our entry
//	              (lockWaiters.<id> = old lockFence). Each form fails its condition when
//	              the other applies; the item returned with the failure says which, and
//	              a client that found the item busy lately starts with the queue form.
//	wait          GetItem polls timed by queue position and pace (reusing TicketLock's
//	              pacer), until serving = our ticket and lockedBy = "~<ticket>": that
//	              read is the item as the previous holder's write-and-release left it.
//	              The next in line reads strongly consistently; waiters further back
//	              eventually consistently (half an RCU), confirming anything that would
//	              move them with a consistent read, and only consistent reads count for
//	              the validity below.
//	release       serving = ticket + 1 and lockedBy = "~<ticket+1>" if tickets were
//	              issued after ours, else (lockFence = ticket) the holder attributes go;
//	              with UpdateAndRelease, together with the caller's update (one call).
//	write         Update and every heartbeat write our lease id into lockedBy (and drop
//	              our entry): a handed-over lease is then held like one taken free.
//
// Room. DynamoDB refuses to make an item larger than 400 KB, and the caller's data may
// fill the item. The lock keeps itemHeadroom (2 KiB, the Mutex's too) free for its
// holders' lock attributes: a queued take that leaves less withdraws its ticket, a claim
// take that leaves no room for its heartbeats releases the item, and either fails with an
// ItemTooLargeError (as does a take the engine refuses as too large); a holder's Update,
// UpdateAndRelease or Release to an item past half the limit carries a lockRoom padding
// sized so that the engine refuses it unless, once the holder's own attributes are gone,
// 2 KiB stay free (or, on an item that had less, unless it does not grow the item): such
// a write fails with an ItemTooLargeError, nothing written (a Release then goes without
// the padding). The next holder's first renewal or write removes the padding and uses its
// room. A waiter handed an item without room for its lease id anyway (filled by another
// writer) keeps holding it by its ticket: its heartbeats write only lockRev, lockUntil and
// lockLeaseMs, and its writes do not claim; its lease id never reaches the item, so
// Attach cannot find it.
//
// Every write of a holder is conditioned on owning the item: lockedBy = its lease id and
// lockOwner = its owner name, or — before it wrote its lease id — serving = its ticket,
// lockedBy = "~<ticket>" and its own entry present. Nobody can thus release, renew or
// overwrite another owner's lease, and a write cannot land once serving moved on.
//
// Validity. A waiter whose ticket comes up counts its lease from the send time of its
// last read that still showed an earlier ticket served, for no longer than the lease the
// handoff wrote (lockLeaseMs). That read was processed before the write that served our
// ticket, so before any other client can have seen the new (serving, rev, lockedBy). A
// served ticket is skipped only (a) at once when its waiter withdrew (no entry) or its
// holder attributes were removed by a write that left serving alone (a caller's own
// transaction unlocking the item as the shop's order decision does: that write is
// conditioned on the lease id, so it is the holder's own release), or (b) after the
// skipper saw the same (serving, rev, lockedBy) for that lease on its own monotonic
// clock, or (c) in the wall-clock mode, when lockTicket = serving and lockUntil + skew
// lies in the past by the skipper's clock (every handoff, skip, claim and heartbeat
// writes lockUntil for the ticket it serves, and a handed-over lease never counts past
// it). Every skip is conditioned on the item being as observed. No claim write is needed
// to enter: two calls per critical section under contention too, plus the polls.
//
// A ticket whose waiter gave up is withdrawn (its entry removed, or, when the take's
// outcome was unknown, a tombstone that makes a late take fail); a served ticket without
// an entry is skipped at once. A take whose response was lost is settled by re-reading
// the item (our lease id in lockedBy, or our entry), as is every write (the write chain:
// its write id, whatever the item shows besides) and a plain Release (its write id, or
// serving moved past our ticket while our lease was valid — nobody else can move it
// then, short of deleting the item).
//
// Rolling deploys. Clients of the previous release take the item with a conditional
// write on attribute_not_exists(lockedBy) (or a stale or expired lockedBy) and release it
// by removing lockedBy. This protocol keeps lockedBy present whenever any ticket is
// served — our lease id, or the "~N" marker of a handoff — and removes it only when the
// item is free (no ticket issued after the released one), so an old client can take the
// item only when a new one could take it free; new clients' heartbeats and handoffs bump
// lockRev and refresh lockUntil, so an old client's takeover rules see them alive.
// An item life an old client began has no lockEpoch: its old clients' tokens are their
// tickets, and the first new client to take or renew writes the epoch, so tokens only
// grow (old clients' tokens then lie below new ones: their fenced writes to other
// resources are refused while new clients lock the item). Conversely, an old client's
// take increments lockFence like a ticket and writes its lease id into lockedBy: new
// clients see that ticket served with a holder that is not theirs, and wait until
// lockedBy is removed (then skip it at once) or stays unchanged
// for its lease. Both protocols condition every holder write on lockedBy, so neither can
// write under the other's lease.
//
// Takeover: ObserveTakeover (default) and WallClockTakeover(skew) as in (b) and (c).
// A take whose response is lost and that lands after its client gave up and re-read is
// released by that client when it can see it; one that lands later still holds the item
// without a heartbeat and is skipped after a lease.
type ItemLocker struct {
	db          DynamoDB
	table       string
	cfg         *config
	attrs       ItemAttributes
	requireItem bool

	pacing pacing   // per item: this client's hold times, the queue's pace
	busy   itemBusy // per item: when this client last found it busy
}

// NewItemLocker returns an ItemLocker on table, a table of the caller's. Besides the
// common options it takes WithItemAttributes and RequireItem.
func NewItemLocker(db DynamoDB, table string, opts ...Option) (*ItemLocker, error) {
	cfg, err := clientConfig(db, table, StrategyItem, opts)
	if err != nil {
		return nil, err
	}
	il := &ItemLocker{db: guarded(db), table: table, cfg: cfg, attrs: DefaultItemAttributes, requireItem: cfg.item.require}
	if cfg.item.attrs != nil {
		il.attrs = *cfg.item.attrs
	}
	return il, nil
}

// ItemLease is a lease on a data item together with the item as it was when locked.
type ItemLease struct {
	*Lease
	locker *ItemLocker
	item   item
	ikey   item
	hold   *itemHold
	chain  writeChain
	ticket int64
}

// Update writes update to the locked item and keeps the lock; cond is an extra
// condition of the caller's (the zero ConditionBuilder: none). It is ItemLocker.Update.
func (l *ItemLease) Update(ctx context.Context, update expression.UpdateBuilder, cond expression.ConditionBuilder) (map[string]types.AttributeValue, error) {
	return l.write(ctx, update, cond, false)
}

// UpdateAndRelease writes update to the locked item and releases the lock in the same
// call; cond as for Update. It is ItemLocker.UpdateAndRelease (see there for the errors).
func (l *ItemLease) UpdateAndRelease(ctx context.Context, update expression.UpdateBuilder, cond expression.ConditionBuilder) (map[string]types.AttributeValue, error) {
	return l.write(ctx, update, cond, true)
}

// Release releases the lock without writing (owner-checked); see Lease.Release.
func (l *ItemLease) Release(ctx context.Context) error {
	if l == nil || l.Lease == nil {
		return invalidOption("lease", "must not be nil")
	}
	return l.Lease.Release(ctx)
}

func (l *ItemLease) write(ctx context.Context, update expression.UpdateBuilder, cond expression.ConditionBuilder, release bool) (map[string]types.AttributeValue, error) {
	if l == nil || l.Lease == nil || l.locker == nil {
		return nil, invalidOption("lease", "must be a lease returned by ItemLocker.Acquire or Attach")
	}
	var c *expression.ConditionBuilder
	if cond.IsSet() {
		c = &cond
	}
	return l.locker.write(ctx, l, update, c, release)
}

// HeldCondition is the condition that this lease still holds its item, for a write of
// the item in the caller's own TransactWriteItems (a decision that also unlocks the
// item, say): the lease's id and owner are in the holder attributes, or — for a lease
// the fair queue handed over and that has not written since — its ticket is the one
// served and the holder attributes name that ticket. Build such conditions with it, not
// from the holder attributes: a lease that waited for the item holds it by its ticket
// until its first write (a renewal, Update) claims it.
func (l *ItemLease) HeldCondition() expression.ConditionBuilder {
	if l.hold == nil {
		a := l.locker.attrs
		return expression.And(expression.Equal(name(a.LockedBy), value(l.id)),
			expression.Equal(name(a.Owner), value(l.owner)))
	}
	return l.hold.owns(l.Lease)
}

// ReleaseUpdate adds the release of this lease to update, for a write of the item that
// the caller sends itself — one item of its own TransactWriteItems, conditioned on
// HeldCondition (a decision that also unlocks the item, say) — instead of
// UpdateAndRelease. The holder attributes go (lockedBy, lockOwner, lockUntil, lockTime:
// the item is then free, or its next waiter skips the released ticket at once) and the
// hold time is published (HoldMs) for the waiters, and recorded in this client's
// pacing. Stop the lease's heartbeat before the write is sent (cancel the context
// Acquire was given): a renewal racing it would fail the write's condition. update is
// not modified.
//
// Unlike UpdateAndRelease it settles nothing: a write whose outcome is unknown is the
// caller's to settle (read the item: holder attributes gone with the lease's effects
// there means it landed). Until the write lands, the lease still holds the item, without
// a heartbeat.
func (l *ItemLease) ReleaseUpdate(update expression.UpdateBuilder) expression.UpdateBuilder {
	if l == nil || l.Lease == nil || l.locker == nil {
		return update
	}
	h := l.hold
	if h == nil {
		return l.locker.unlock(cloneUpdate(update))
	}
	h.io.Lock()
	defer h.io.Unlock()
	h.heldFor()
	return h.unlock(cloneUpdate(update))
}

// Token returns the fencing token of this acquisition: epoch<<10 + n, where n is its
// ticket (the tickets the item has issued in this life, its Fence attribute) and epoch
// the start of the item's life in µs since 1970 (its Epoch attribute). Tokens strictly
// increase while the item exists. Deleting the item deletes both; the take that creates
// it again (or locks an item put again without lock attributes) begins a new life with
// a later epoch, so tokens keep increasing across the item's lives and may fence other
// resources (FenceCondition) as a Mutex's do — with one assumption a Mutex's tokens do
// not make: across lives the order rests on the wall clocks of the clients that begin
// them. A life's tokens exceed an earlier life's as long as the take that began it was
// sent later, by its client's clock, than the take that began the earlier one by that
// client's clock: as long as the clocks disagree by less than the time between the
// beginnings of two consecutive lives (at least the earlier life's span, from its first
// acquisition to its deletion), and no such take was on its way for that long. The
// locking read's own writes need no token: they are conditioned on the lease itself. An
// attached lease's token is zero.
func (il *ItemLease) Token() Fence { return il.Lease.Token() }

// Ticket returns this acquisition's ticket: the item's Fence (tickets issued in this life
// of the item) when it was taken, Token without its epoch. An attached lease's is zero.
func (il *ItemLease) Ticket() int64 { return il.ticket }

// Item returns the item's attributes without the lock attributes. It is nil when the
// item did not exist before Acquire (without RequireItem).
func (il *ItemLease) Item() map[string]types.AttributeValue { return il.item }

// Acquire locks the item with the given primary key and reads it, in one call. key must
// hold exactly the table's key attributes (string, number or binary values).
func (il *ItemLocker) Acquire(ctx context.Context, key map[string]types.AttributeValue, opts ...AcquireOption) (lease *ItemLease, err error) {
	if il == nil || il.cfg == nil {
		return nil, unusableLocker(il == nil, "*ItemLocker", "NewItemLocker")
	}
	ac, err := il.cfg.acquireConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := il.validateKey(key); err != nil {
		return nil, err
	}
	if err := ac.refuse("an ItemLocker", true, true); err != nil {
		return nil, err
	}
	for k := range ac.init {
		if _, isKey := key[k]; isKey || il.isLockAttr(k) {
			return nil, invalidOption("setIfAbsent", "may not name the item's key or lock attribute %q", k)
		}
	}
	label := keyLabel(key)
	if err := notStarted(ctx, "item lock", label); err != nil {
		return nil, err
	}
	t0 := il.cfg.clock.Now()
	var st acqStats
	defer func() {
		var l *Lease
		if lease != nil {
			l = lease.Lease
		}
		il.cfg.acquired(ctx, StrategyItem, label, "", t0, st, l, err)
	}()
	for {
		// A lease id per take: a delayed renewal of a ticket given up (its lease lost
		// before Acquire returned) cannot then land on the next take's claim.
		leaseID := newLeaseID(il.cfg.owner)
		h := &itemHold{il: il, key: key, label: label, wid: newWaiterID()}
		tr, err := il.take(ctx, h, leaseID, ac, t0)
		if err != nil {
			if errors.Is(err, ErrLockHeld) {
				st.contended = true
			}
			return nil, err
		}
		if tr.claimed && h.tombWID != "" {
			il.entomb(ctx, h)
		}
		if err := il.roomAfterTake(ctx, h, leaseID, tr, ac); err != nil {
			return nil, err
		}
		wr := waitResult{st: tr.st, claimed: true, start: tr.sent, lease: ac.lease}
		if !tr.claimed {
			st.contended = true
			wr, err = il.wait(ctx, h, leaseID, tr, ac, t0)
			st.takeover = st.takeover || h.skippedStalled
			if errors.Is(err, errTicketSkipped) {
				continue // our ticket was skipped while we were away: queue again
			}
			if err != nil {
				return nil, err
			}
		}
		h.next = wr.st.next
		h.learn(wr.st.it)
		if tr.claimed {
			// Old tombstones go with our release, as a queued holder's take arranges:
			// an item only ever claimed would otherwise keep every tombstone it got.
			for _, w := range tr.st.tombs.old(il.cfg.clock.Now()) {
				if w != h.tombWID {
					h.gc = append(h.gc, w)
				}
			}
		}
		for _, w := range wr.st.staleEntries(maxTombGC) {
			if w != h.wid && w != h.tombWID {
				h.gc = append(h.gc, w) // removed with our release
			}
		}
		l := newLease(h, il.cfg, ac.lease, label, "", leaseID, itemFence(h.epoch, h.ticket), wr.start)
		l.ikey = key
		// The lease is not the caller's until Acquire returns it: a renewal that finds
		// it lost reports no lease event.
		obs := l.observer
		l.observer = nil
		lease = &ItemLease{Lease: l, locker: il, item: il.strip(wr.st.it, key), ikey: key, hold: h,
			chain: writeChain{known: true, last: wr.st.write}}
		if !tr.claimed {
			// Waited: the SetIfAbsent attributes the item lacks are written now, by a
			// renewal that also claims the lease.
			h.init = missingAttrs(wr.st.it, ac.init)
		}
		if l.Remaining() < ac.lease/2 || len(h.init) > 0 || h.epoch == 0 {
			// Much of a handed-over lease went by unnoticed, or SetIfAbsent attributes
			// are missing, or the item's life has no epoch yet (begun by a client of the
			// previous release): claim it now (a renewal writes the epoch).
			if err := l.Renew(ctx); err != nil {
				if errors.Is(err, ErrLeaseLost) {
					continue
				}
				rctx, cancel := detached(ctx)
				_ = l.Release(rctx)
				cancel()
				return nil, err
			}
		}
		if h.item != nil {
			lease.item = il.strip(h.item, key)
			h.item = nil
		}
		l.token, lease.ticket = itemFence(h.epoch, h.ticket), h.ticket
		h.since = il.cfg.clock.Now()
		l.observer = obs
		l.startHeartbeat(ctx, ac.heartbeat)
		return lease, nil
	}
}

// roomAfterTake refuses a take that left the item without the room its lock needs
// (room.go): a queued take must leave itemHeadroom free for the lock attributes of the
// holders before it (it withdraws its ticket), a claim take room for its own heartbeats
// (it releases the item). Either fails with an ItemTooLargeError.
func (il *ItemLocker) roomAfterTake(ctx context.Context, h *itemHold, leaseID string, tr takeResult, ac *acquireConfig) error {
	h.learn(tr.st.it)
	keep := itemHeadroom
	if tr.claimed {
		keep = renewRoom
	}
	if h.size+keep <= maxItemBytes {
		return nil
	}
	if !tr.claimed {
		il.withdraw(ctx, h, leaseID)
		return h.tooLargeErr("acquire", keep, nil)
	}
	rctx, cancel := detached(ctx)
	defer cancel()
	h.next = tr.st.next
	l := &Lease{key: h.label, id: leaseID, owner: il.cfg.owner, clock: il.cfg.clock, duration: ac.lease}
	_ = h.release(rctx, l)
	return h.tooLargeErr("acquire", keep, nil)
}

// missingAttrs returns the attributes of init that it lacks (nil: none).
func missingAttrs(it item, init map[string]types.AttributeValue) map[string]types.AttributeValue {
	var m map[string]types.AttributeValue
	for k, v := range init {
		if _, ok := it[k]; !ok {
			if m == nil {
				m = map[string]types.AttributeValue{}
			}
			m[k] = v
		}
	}
	return m
}

// TryAcquire is Acquire with NoWait.
func (il *ItemLocker) TryAcquire(ctx context.Context, key map[string]types.AttributeValue, opts ...AcquireOption) (*ItemLease, error) {
	return il.Acquire(ctx, key, append(opts, NoWait())...)
}

func (il *ItemLocker) validateKey(key map[string]types.AttributeValue) error {
	if len(key) == 0 || len(key) > 2 {
		return invalidKey("key", "must hold the table's 1 or 2 key attributes, got %d", len(key))
	}
	for k, v := range key {
		if k == "" || strings.ContainsAny(k, ".[]") || !utf8.ValidString(k) {
			return invalidKey("key", "attribute name %q must be non-empty UTF-8 without '.', '[' or ']'", k)
		}
		var size int
		switch x := v.(type) {
		case *types.AttributeValueMemberS:
			size = len(x.Value)
		case *types.AttributeValueMemberB:
			size = len(x.Value)
		case *types.AttributeValueMemberN:
			size = len(x.Value)
		default:
			return invalidKey("key."+k, "must be a string, number or binary value, got %T", v)
		}
		if size == 0 {
			return invalidKey("key."+k, "must not be empty")
		}
		if size > MaxPartitionKeyBytes {
			return invalidKey("key."+k, "is %d bytes; DynamoDB key attributes hold at most %d", size, MaxPartitionKeyBytes)
		}
		for _, a := range il.attrs.all() {
			if k == a {
				return invalidKey("key."+k, "collides with lock attribute %q", a)
			}
		}
	}
	return nil
}

func keyLabel(key item) string {
	label := ""
	for _, k := range sortedKeys(key) {
		if label != "" {
			label += ","
		}
		switch x := key[k].(type) {
		case *types.AttributeValueMemberS:
			label += k + "=" + x.Value
		case *types.AttributeValueMemberN:
			label += k + "=" + x.Value
		default:
			label += k + "=<binary>"
		}
	}
	return label
}

func anyKeyName(key item) string { return sortedKeys(key)[0] }

func (il *ItemLocker) holderOf(it item) *Holder {
	a := il.attrs
	if it == nil || attrS(it, a.LockedBy) == "" {
		return nil
	}
	rev, _ := attrN(it, a.Rev)
	ms, _ := attrN(it, a.LeaseMs)
	until, _ := attrN(it, a.Until)
	fence, _ := attrN(it, a.Fence)
	epoch, _ := attrN(it, a.Epoch)
	return &Holder{
		Owner: attrS(it, a.Owner), LeaseID: attrS(it, a.LockedBy), Rev: rev,
		Lease: time.Duration(ms) * time.Millisecond, Until: time.UnixMilli(until), Token: itemFence(epoch, fence),
	}
}

// strip removes the lock attributes; it returns nil for an item that held nothing but
// its key and lock attributes (it did not exist before the lock created it).
func (il *ItemLocker) strip(it, key item) item {
	out := make(item, len(it))
	data := false
	for k, v := range it {
		if il.isLockAttr(k) {
			continue
		}
		out[k] = v
		if _, isKey := key[k]; !isKey {
			data = true
		}
	}
	if !data {
		return nil
	}
	return out
}

func (il *ItemLocker) isLockAttr(k string) bool {
	for _, a := range il.attrs.all() {
		if k == a {
			return true
		}
	}
	return false
}

func (il *ItemLocker) read(ctx context.Context, key item) (item, error) {
	return readItem(ctx, il.db, il.table, key)
}

func (il *ItemLocker) unlock(u expression.UpdateBuilder) expression.UpdateBuilder {
	a := il.attrs
	return u.Remove(name(a.LockedBy)).Remove(name(a.Owner)).Remove(name(a.Until)).Remove(name(a.LockTime))
}

// updateBytes estimates what update adds to an item: its names and values. (An update
// that copies attributes adds more; see itemHold.padding.)
func updateBytes(update expression.UpdateBuilder) int {
	e, err := expression.NewBuilder().WithUpdate(cloneUpdate(update)).Build()
	if err != nil {
		return 0
	}
	n := 0
	for _, v := range e.Names() {
		n += len(v)
	}
	for _, v := range e.Values() {
		n += valueBytes(v)
	}
	return n
}

// ErrConditionFailed is returned by UpdateAndRelease when the caller's own condition
// failed. Nothing was written and the lease is still held.
var ErrConditionFailed = errors.New("lockcore: caller's condition failed")

// UpdateAndRelease applies update to the locked item and releases the lock in one
// conditional UpdateItem. cond, if not nil, is an extra condition of the caller's.
// It returns the item as written (without lock attributes). update and cond are not
// modified: the same builder may be used for several items.
//
// Errors:
//   - ErrLeaseLost (in a *LeaseError) when the lock was taken over meanwhile: nothing
//     was written.
//   - ErrUnknownOutcome together with ErrLeaseLost when an earlier attempt of this write
//     failed ambiguously and the item changed hands before that could be settled: the
//     write may or may not have landed.
//   - ErrConditionFailed when cond failed: nothing was written, the lease is still held
//     and its heartbeat still runs (call Release).
//   - ErrItemTooLarge (an *ItemTooLargeError) when the write would make the item larger
//     than DynamoDB allows or, on an item past half that limit, leave less than the room
//     the lock keeps for the next holder's lock attributes: nothing was written, the
//     lease is still held and its heartbeat still runs.
//   - any other error (a ValidationException, the context's end before anything was
//     sent) leaves the lease held with its heartbeat running; an error that matches
//     ErrUnknownOutcome means the write may still land while the lease is held.
func (il *ItemLocker) UpdateAndRelease(ctx context.Context, lease *ItemLease, update expression.UpdateBuilder, cond *expression.ConditionBuilder) (map[string]types.AttributeValue, error) {
	return il.write(ctx, lease, update, cond, true)
}

// Update applies update to the locked item and keeps the lock, conditioned on the lease.
// It returns the item as written. A write is applied at most once, also when a response
// is lost and the request is retried or lands late: every write names the write it
// follows (the item's write id), so a duplicate fails its condition and is recognised.
// Errors as for UpdateAndRelease.
func (il *ItemLocker) Update(ctx context.Context, lease *ItemLease, update expression.UpdateBuilder, cond *expression.ConditionBuilder) (map[string]types.AttributeValue, error) {
	return il.write(ctx, lease, update, cond, false)
}

// writeChain is what a lease knows of the item's write id (the Write attribute): the
// value it last saw, and the ids of its own writes whose outcome is unknown. A write is
// conditioned on the attribute holding one of those, and sets it to a fresh id; a
// landed write thus moves the chain on, and any duplicate of it, or of an earlier write,
// fails its condition.
type writeChain struct {
	mu      sync.Mutex // one write at a time per lease
	known   bool       // last is what the item holds (false for an attached lease until its first write reads it)
	last    string     // "" = no write id on the item
	pending []string   // our writes that may still land
}

const maxPendingWrites = 16

func (il *ItemLocker) chainCondition(w *writeChain, writeID string) expression.ConditionBuilder {
	attr := name(il.attrs.Write)
	if !w.known {
		// An attached lease does not know the chain: it can only refuse to apply this
		// very write twice.
		return expression.Or(expression.AttributeNotExists(attr), expression.NotEqual(attr, value(writeID)))
	}
	c := expression.AttributeNotExists(attr)
	if w.last != "" {
		c = expression.Equal(attr, value(w.last))
	}
	for _, p := range w.pending {
		c = expression.Or(c, expression.Equal(attr, value(p)))
	}
	return c
}

func (w *writeChain) allows(id string) bool {
	if !w.known || id == w.last {
		return true
	}
	for _, p := range w.pending {
		if p == id {
			return true
		}
	}
	return false
}

func (il *ItemLocker) write(ctx context.Context, lease *ItemLease, update expression.UpdateBuilder, cond *expression.ConditionBuilder, release bool) (item, error) {
	if lease == nil || lease.Lease == nil {
		return nil, invalidOption("lease", "must not be nil")
	}
	l := lease.Lease
	h := lease.hold
	if h == nil {
		return nil, invalidOption("lease", "must be a lease returned by ItemLocker.Acquire or Attach")
	}
	w := &lease.chain
	w.mu.Lock()
	defer w.mu.Unlock()
	op := "update"
	if release {
		op = "update-and-release"
		// No renewal may race the unlock (a renewal failing after it would report the
		// lease lost); the heartbeat resumes if the lease stays held.
		defer l.pauseHeartbeat()()
	}
	// After the pause: a paused heartbeat has finished its renewal, a running one waits.
	h.io.Lock()
	defer h.io.Unlock()
	if err := l.Err(); err != nil {
		return nil, err
	}
	if release {
		h.heldFor()
		h.learnTicket(ctx, l)
	}
	if !w.known {
		// An attached handle learns the write chain before its first write. Conditioned
		// only on not repeating itself, a first write whose request was delayed and then
		// retried would land again once a later write had changed the write id.
		cur, err := il.read(ctx, lease.ikey)
		if err != nil {
			return nil, fmt.Errorf("lockcore: %s %s: read the item's write id: %w", op, l.key, err)
		}
		w.known, w.last = true, attrS(cur, il.attrs.Write)
		h.learn(cur)
	}
	// Every write carries a fresh id in the Write attribute: after an ambiguous failure
	// the item itself says whether this write landed.
	writeID := randomHex(8)
	// Near the size limit the write carries the Room padding: it fails, with nothing
	// written, unless it leaves room for the next holder's lock attributes (room.go).
	add, own := updateBytes(update), 0
	switch {
	case release:
		own = h.passBytes(l, h.handsOver()) // again whenever the release form flips
	case h.lean:
		own = h.own // our ticket's marker stays
	default:
		own = h.claimBytes(l) // this write claims, if it has not yet
	}
	pad, reread := h.padding(add, own), false
	handoff := h.handsOver()
	landed := func(it item) (item, error) {
		w.known, w.last, w.pending = true, writeID, nil
		if release || !h.lean {
			h.entry = false // removed by the release, or by the claim
		}
		h.learn(it)
		if n, ok := attrN(it, il.attrs.Fence); ok {
			h.next = n
		}
		if release {
			l.finish(nil)
		}
		return il.strip(it, lease.ikey), nil
	}
	uncertain := false // an attempt may have landed without our knowing
	unknown := func(err error) error {
		if uncertain && len(w.pending) < maxPendingWrites {
			w.pending = append(w.pending, writeID)
			uerr := fmt.Errorf("lockcore: %s %s: %w: %w", op, l.key, ErrUnknownOutcome, err)
			l.report(uerr)
			return uerr
		}
		return fmt.Errorf("lockcore: %s %s: %w", op, l.key, err)
	}
	bo := backoff{base: il.cfg.backoffBase, cap: il.cfg.backoffCap}
	adopted, flips := 0, 0
	for {
		c := expression.And(h.owns(l), il.chainCondition(w, writeID))
		u := h.keepRoom(cloneUpdate(update).Set(name(il.attrs.Write), value(writeID)), pad)
		switch {
		case release && h.ticket > 0:
			var fc expression.ConditionBuilder
			u, fc = h.releaseUpdate(u, l, handoff)
			c = expression.And(c, fc)
		case release:
			u = h.unlock(u) // a lease without a ticket (an old client's): just unlock
		case !h.lean: // a lean hold does not claim: there is no room for it
			u = h.claim(u, l)
		}
		if cond != nil {
			c = expression.And(c, *cond)
		}
		e, err := expression.NewBuilder().WithCondition(c).WithUpdate(u).Build()
		if err != nil {
			return nil, invalidOption("update", "%v", err)
		}
		out, err := il.db.UpdateItem(ctx, conditionalUpdate(il.table, lease.ikey, e, types.ReturnValueAllNew), noSDKRetry)
		if err == nil {
			return landed(out.Attributes)
		}
		switch classify(err) {
		case errCondition:
			old, ok := conditionOld(err)
			if !ok {
				var rerr error
				if old, rerr = il.read(ctx, lease.ikey); rerr != nil {
					if uncertain {
						return nil, unknown(rerr)
					}
					return nil, fmt.Errorf("lockcore: %s %s: condition failed and re-read failed: %w", op, l.key, rerr)
				}
			}
			// Serving past our ticket does not settle a write as landed (as it settles
			// Release): the item may have been deleted and created again, its new
			// tickets served meanwhile. Only the write id does; else the outcome is
			// unknown (conflict).
			if release && h.ticket > 0 && flips < 4 && attrS(old, il.attrs.Write) != writeID && h.ownsState(l, il.state(old, h.wid)) {
				// Still ours: perhaps the release form was wrong (tickets were issued
				// after ours, or none were).
				n, _ := attrN(old, il.attrs.Fence)
				if (n > h.ticket) != handoff {
					flips++
					h.next = n
					handoff = h.handsOver()
					own = h.passBytes(l, handoff)
					pad = h.padding(add, own)
					continue
				}
			}
			ok, adopt, cerr := il.conflict(lease, old, op, writeID, uncertain)
			switch {
			case ok:
				return landed(old) // an earlier attempt of this write landed
			case adopt != "" && adopted < 3:
				adopted++
				w.known, w.last, w.pending = true, adopt, nil
				continue
			case adopt != "":
				return nil, fmt.Errorf("lockcore: %s %s: the item's write id keeps changing under this lease: %w", op, l.key, ErrConditionFailed)
			}
			return nil, cerr
		case errFatal:
			if tooLarge(err) && !uncertain {
				if pad > 0 && !reread {
					// The padding was sized from the item as we last saw it: learn its
					// size (waiters may have joined since) and try once more with the
					// padding that calls for.
					reread = true
					if cur, rerr := il.read(ctx, lease.ikey); rerr == nil {
						h.learn(cur)
						pad = h.padding(add, own)
						continue
					}
				}
				return nil, h.tooLargeErr(op, pad, err)
			}
			return nil, unknown(err)
		case errAmbiguous:
			uncertain = true
			if cur, done, aerr := il.reread(ctx, lease, op, writeID, release, err); done {
				if aerr != nil {
					return nil, aerr
				}
				return landed(cur)
			}
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return nil, unknown(fmt.Errorf("%w (last error: %v)", serr, err))
		}
	}
}

// reread settles a write that failed ambiguously (cause) by reading the item: done with
// the item when the write landed, done with an error when the lease changed hands (the
// write may have landed and been overwritten, or not: nobody can tell; the lease is
// finished), not done when the item is still ours and unwritten (retrying the same write
// is safe: its condition refuses a second landing) or the read failed.
func (il *ItemLocker) reread(ctx context.Context, lease *ItemLease, op, writeID string, release bool, cause error) (item, bool, error) {
	l := lease.Lease
	rctx, cancel := detached(ctx)
	cur, err := il.read(rctx, lease.ikey)
	cancel()
	switch {
	case err != nil:
		return nil, false, nil
	case attrS(cur, il.attrs.Write) == writeID:
		return cur, true, nil
	case lease.hold.ownsState(l, il.state(cur, lease.hold.wid)):
		return nil, false, nil
	}
	lerr := &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: il.holderOf(cur),
		Err: fmt.Errorf("%w (last error: %v)", errLostUnknown, cause)}
	l.finish(lerr)
	return nil, true, lerr
}

// conflict decides a write whose condition failed from the item that failed it: an earlier
// attempt of this write landed (landed); the lease is still ours and the caller's
// condition failed (ErrConditionFailed), or another handle of this lease wrote (adopt: the
// write id to follow from); or the lease is gone (ErrLeaseLost, with ErrUnknownOutcome when
// an earlier attempt may have landed first; the lease is finished).
func (il *ItemLocker) conflict(lease *ItemLease, old item, op, writeID string, uncertain bool) (landed bool, adopt string, err error) {
	l := lease.Lease
	cur := attrS(old, il.attrs.Write)
	if cur == writeID {
		return true, "", nil
	}
	if lease.hold.ownsState(l, il.state(old, lease.hold.wid)) {
		if lease.chain.allows(cur) {
			return false, "", fmt.Errorf("lockcore: %s %s: %w", op, l.key, ErrConditionFailed)
		}
		return false, cur, nil
	}
	lerr := il.classifyOld(op, l, old)
	if uncertain && errors.Is(lerr, ErrLeaseLost) {
		// Our earlier attempt may have landed before the lease changed hands.
		lerr = &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: il.holderOf(old), Err: errLostUnknown}
	}
	if errors.Is(lerr, ErrLeaseLost) {
		l.finish(lerr)
	}
	return false, "", lerr
}

func (il *ItemLocker) classifyOld(op string, l *Lease, old item) error {
	if attrS(old, il.attrs.LockedBy) == l.id && attrS(old, il.attrs.Owner) != l.owner {
		return &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: il.holderOf(old), Err: ErrNotOwner}
	}
	return &LeaseError{Op: op, Key: l.key, LeaseID: l.id, Current: il.holderOf(old), Err: ErrLeaseLost}
}

// Attach returns a handle on a lease acquired elsewhere on the item with key, so that
// this client can release or renew it (owner-checked). Its Token is zero. The lease
// must have written its lease id to the item (every acquisition that did not wait does
// so at once, a handed-over one with its first write or heartbeat — unless the item had
// no room for it: see ItemLocker). The handle claims
// no validity (Remaining is zero) until its first successful Renew: it cannot know when
// the lease was last renewed, and a write whose outcome is unknown is settled as landed
// only while the lease is certainly valid.
func (il *ItemLocker) Attach(key map[string]types.AttributeValue, leaseID string) (*ItemLease, error) {
	if err := il.validateKey(key); err != nil {
		return nil, err
	}
	if leaseID == "" {
		return nil, invalidOption("leaseID", "must not be empty")
	}
	label := keyLabel(key)
	h := &itemHold{il: il, key: key, label: label, attached: true}
	l := newLease(h, il.cfg, il.cfg.lease, label, "", leaseID, 0, il.cfg.clock.Now().Add(-il.cfg.lease))
	l.ikey = key
	return &ItemLease{Lease: l, locker: il, ikey: key, hold: h}, nil
}
