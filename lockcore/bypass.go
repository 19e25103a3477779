package lockcore

import (
	"context"
	"sync"
	"time"
)

// WithBypass trades strict arrival order for throughput, for a client that locks the
// same key again and again (a worker looping over work for one key). Off by default.
//
// A lease this client releases is renewed instead (one call, where a release and the
// next acquisition cost two or more) and kept, still held in the table, for up to
// linger; if this client's next Acquire of the same key comes meanwhile, it continues
// the lease at once, without a DynamoDB call, instead of queueing behind the waiters.
// A lease is kept only while its tenure — the time since the acquisition that first
// took the lock, before any continuation — is shorter than bound; the Release after
// that hands the lock on as always. So a holder passes its waiters by for at most bound
// plus one critical section, ticket order among the waiters is kept, and a waiter's wait
// grows by at most bound per holder ahead of it: bounded bypass, never starvation.
// Jain's index and the waits are measured in docs/performance.md.
//
// A continued lease is the same lease: the same lease id and the same fencing token as
// the one released (the tenure goes on; tokens still grow from one tenure to the next).
// So the token does not fence the critical sections of one tenure from each other: a
// write of an earlier one whose outcome is unknown (sent, its response lost) may still
// land during a later one and overwrite it. After such a write, end the tenure with
// ReleaseTenure instead of Release: the next acquisition then takes a new token, and
// the late write fails its fence condition.
// A Release that keeps the lease renews it first, so it reports a lease lost (an
// operator's ForceRelease, say) as a Release always does. A kept lease force-released
// before its continuation is the ForceRelease exception, as for a holder force-released
// in its critical section: it may be continued and works on until its heartbeat or its
// next Release finds it lost — its token is below the next holder's, so fenced writes
// stop it.
//
// A kept lease is continued only when its Acquire asks for the same namespace and lease, with
// no data, and when at least a quarter of its lease is left; otherwise the kept lease
// is released and the Acquire takes the lock as usual. A lease that is not continued
// within linger is released by a background goroutine, so a process that stops right
// after a Release (a Lambda handler returning: its environment is frozen) leaves its
// lock held until a waiter takes it over after a lease of silence. Use it in long-running
// workers, not in handlers that release and return.
//
// Valid forms: bound > 0, 0 < linger ≤ bound; Mutex and TicketLock only (an Acquire
// of AcquireAll continues each of its keys the same way).
func WithBypass(bound, linger time.Duration) Option {
	return func(c *config) error {
		if bound <= 0 {
			return invalidOption("bypass bound", "must be positive, got %s", bound)
		}
		if linger <= 0 || linger > bound {
			return invalidOption("bypass linger", "must be positive and at most the bound (%s), got %s", bound, linger)
		}
		c.bypass = &bypassLot{bound: bound, linger: linger}
		return nil
	}
}

// bypassLot keeps a client's released leases for re-entry (WithBypass).
type bypassLot struct {
	bound, linger time.Duration

	mu     sync.Mutex
	parked map[string]*parkedLease // lock (pk) → the lease kept for it
}

type parkedLease struct {
	l     *Lease
	obs   *Observer // the lease's observer, silent while it is kept
	timer *time.Timer
}

// parker returns the Release hook of a lease on lock pk (nil: no bypass).
func (b *bypassLot) parker(pk string) func(context.Context, *Lease) bool {
	if b == nil {
		return nil
	}
	return func(ctx context.Context, l *Lease) bool { return b.park(ctx, pk, l) }
}

// park keeps l, being released, for re-entry: l is renewed and ends as released, and a
// continuation of it (the same lease in the table, renewed by its own heartbeat) waits
// in the lot for up to linger. It reports false, having stopped l's heartbeat and maybe
// renewed it, when l may not be kept: its tenure reached the bound, little of its
// validity is left, its renewal failed (it is lost, or the call did not get through),
// or another Release of it is under way.
func (b *bypassLot) park(ctx context.Context, pk string, l *Lease) bool {
	l.stopHeartbeat()
	keep := func() bool {
		now := l.clock.Now()
		return !l.finished && l.releasing == 0 && !l.watching && now.Sub(l.tenure) < b.bound && l.validUntil.Sub(now) >= l.duration/4
	}
	l.mu.Lock()
	ok := keep()
	l.mu.Unlock()
	// A Release says whether the lease was still ours: a renewal asks the table, as a
	// release would (an operator's ForceRelease, say, ended it), and gives the kept
	// lease a full validity. One call, where a release and the next take are two or more.
	if !ok || l.Renew(ctx) != nil {
		return false // released as usual: it reports the loss, or retries a failure
	}
	l.mu.Lock()
	if !keep() {
		l.mu.Unlock()
		return false
	}
	c := &Lease{
		key: l.key, namespace: l.namespace, id: l.id, owner: l.owner, token: l.token,
		duration: l.duration, clock: l.clock, ops: l.ops,
		tenure: l.tenure, park: l.park, hasData: l.hasData,
		validUntil: l.validUntil, renewFor: l.renewFor,
		done: make(chan struct{}),
	}
	interval := l.hbInterval
	l.finished = true
	close(l.done)
	l.mu.Unlock()
	l.report(nil)
	c.startHeartbeat(context.Background(), interval)

	// Kept, the lease is nobody's: its release, or its loss, is no event (the caller
	// saw it released); continued, it reports again.
	p := &parkedLease{l: c, obs: l.observer}
	b.mu.Lock()
	old := b.parked[pk]
	if b.parked == nil {
		b.parked = map[string]*parkedLease{}
	}
	b.parked[pk] = p
	p.timer = time.AfterFunc(b.linger, func() {
		if b.remove(pk, p) {
			releaseKept(context.Background(), c)
		}
	})
	b.mu.Unlock()
	if old != nil && old.timer.Stop() {
		// Another lease of the same lock kept before (a kept lease force-released and
		// continued while another acquisition of this client took the lock anew, both
		// released since): only one is kept.
		releaseKept(context.Background(), old.l)
	}
	return true
}

// releaseKept releases a kept lease in the table, on a context of its own (detached).
func releaseKept(ctx context.Context, l *Lease) {
	rctx, cancel := detached(ctx)
	defer cancel()
	_ = l.releaseNow(rctx)
}

// remove takes p out of the lot if it is still there.
func (b *bypassLot) remove(pk string, p *parkedLease) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.parked[pk] != p {
		return false
	}
	delete(b.parked, pk)
	return true
}

// reenter continues the lease kept for lock pk, if there is one and the acquisition
// (ac) may continue it: the same lease, no data, a quarter of its validity left. A kept
// lease that may not be continued is released (nil returned: acquire as usual).
func (b *bypassLot) reenter(ctx context.Context, pk string, ac *acquireConfig) *Lease {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	p := b.parked[pk]
	if p == nil || !p.timer.Stop() {
		b.mu.Unlock()
		return nil // none, or its linger ran out and it is being released
	}
	delete(b.parked, pk)
	b.mu.Unlock()
	c := p.l
	c.stopHeartbeat()
	now := c.clock.Now()
	c.mu.Lock()
	ok := !c.finished && c.validUntil.Sub(now) >= c.duration/4 && ac.lease == c.duration && ac.data == nil && !c.hasData
	if ok {
		c.acquired = now
	}
	c.mu.Unlock()
	if !ok {
		releaseKept(ctx, c)
		return nil
	}
	c.observer, c.obsCtx = p.obs, nil
	c.startHeartbeat(ctx, ac.heartbeat)
	return c
}

// bypassable sets up l, a lease just acquired on lock pk, for WithBypass: its tenure
// begins now, and its Release may keep it.
func (b *bypassLot) bypassable(l *Lease, pk string, ac *acquireConfig) {
	if b == nil || l == nil {
		return
	}
	l.mu.Lock()
	l.tenure, l.park, l.hasData = l.acquired, b.parker(pk), ac.data != nil
	l.mu.Unlock()
}
