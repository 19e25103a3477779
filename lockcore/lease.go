package lockcore

import (
	"context"
	"errors"
	"sync"
	"time"
)

// leaseOps is what a strategy does to renew or release one of its leases.
type leaseOps interface {
	// renew extends the lease; it returns ErrLeaseLost / ErrNotOwner (wrapped) when the
	// lease is no longer the caller's.
	renew(ctx context.Context, l *Lease) error
	// release gives the lease up. Releasing an already released lease returns nil.
	release(ctx context.Context, l *Lease) error
}

// Lease is one successful acquisition. It is safe for concurrent use.
//
// A Lease renews itself in the background when the client was configured with a
// heartbeat (the default: every half lease) until Release, until the context given to
// Acquire ends, or until a renewal finds the lease gone. Done is closed then; Err says
// why. Code working under a lease should watch Done (or use Context) and stop writing
// when it closes.
type Lease struct {
	key, namespace, id, owner string
	token                     Fence
	duration                  time.Duration
	clock                     Clock
	ops                       leaseOps
	ikey                      item // data item key (locking read only)
	observer                  *Observer
	obsCtx                    context.Context // the acquiring call's context, for observer events
	acquired                  time.Time       // when the caller got it (a Queue sets it at entry, under mu)

	// WithBypass (bypass.go), set under mu: when the tenure began (the acquisition
	// before any continuation), the hook that may keep the lease on Release, and
	// whether it was acquired with data (never continued).
	tenure  time.Time
	park    func(context.Context, *Lease) bool
	hasData bool

	mu         sync.Mutex
	validUntil time.Time     // local clock: start of the last successful acquire/renew + duration
	renewFor   time.Duration // a renewal's validity when shorter than duration (0: duration)
	finished   bool          // released or lost
	releasing  int           // Release calls under way: they decide how the lease ended
	watching   bool          // a failed Release left a validity watcher (watchValidity)
	ranOut     bool          // lost by the local clock alone: the table may still name it
	err        error
	done       chan struct{}
	stopHB     context.CancelFunc
	hbDone     chan struct{}
	hbParent   context.Context // the heartbeat's context, to resume it after a pause
	hbInterval time.Duration
}

func newLease(ops leaseOps, cfg *config, lease time.Duration, key, ns, id string, token Fence, start time.Time) *Lease {
	l := &Lease{
		key: key, namespace: ns, id: id, owner: cfg.owner, token: token,
		duration: lease, clock: cfg.clock, ops: ops,
		validUntil: start.Add(lease),
		done:       make(chan struct{}),
		acquired:   cfg.clock.Now(),
	}
	if o := cfg.observer; o.any() {
		l.observer = &o
	}
	return l
}

// Key returns the locked key.
func (l *Lease) Key() string { return l.key }

// Namespace returns the lock's namespace (the lock row's sort key) where the strategy has one.
func (l *Lease) Namespace() string { return l.namespace }

// ID returns the lease id: the owner name plus a random suffix, unique per acquisition.
func (l *Lease) ID() string { return l.id }

// Owner returns the owner name of the client that acquired the lease.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token of this acquisition.
func (l *Lease) Token() Fence { return l.token }

// Duration returns the lease duration.
func (l *Lease) Duration() time.Duration { return l.duration }

// Done is closed when the lease is released or lost.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held or after a clean Release, and an error
// matching ErrLeaseLost once the lease was lost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Remaining returns how long the lease is certainly valid by the local clock: the lease
// duration counted from the start of the last successful acquire or renew call. Zero
// means the holder must assume the lease is gone.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished {
		return 0
	}
	return max(0, l.validUntil.Sub(l.clock.Now()))
}

// Context returns a context that is cancelled when the lease is released or lost, when
// its local validity runs out without a renewal, or when parent ends. context.Cause
// tells which.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		for {
			rem := l.Remaining()
			if rem <= 0 {
				select {
				case <-l.done:
					cancel(l.causeOrReleased())
				default:
					cancel(&LeaseError{Op: "validity", Key: l.key, LeaseID: l.id, Err: ErrLeaseLost})
				}
				return
			}
			t := time.NewTimer(rem)
			select {
			case <-l.done:
				t.Stop()
				cancel(l.causeOrReleased())
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

var errReleased = errors.New("lockcore: lease released")

func (l *Lease) causeOrReleased() error {
	if err := l.Err(); err != nil {
		return err
	}
	return errReleased
}

// Renew extends the lease now. It returns an error matching ErrLeaseLost when the lease
// was taken over or expired and removed, ErrNotOwner when it belongs to another owner.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	if l.finished {
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = &LeaseError{Op: "renew", Key: l.key, LeaseID: l.id, Err: ErrLeaseLost}
		}
		return err
	}
	l.mu.Unlock()
	start := l.clock.Now()
	err := l.ops.renew(ctx, l)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			// A renewal that finds the lease gone while a Release is under way may have
			// found it released: the release reports how the lease ended.
			l.mu.Lock()
			releasing := l.releasing > 0
			l.mu.Unlock()
			if !releasing {
				l.finish(err)
			}
		}
		return err
	}
	l.mu.Lock()
	d := l.duration
	if l.renewFor > 0 && l.renewFor < d {
		d = l.renewFor
	}
	if v := start.Add(d); v.After(l.validUntil) {
		l.validUntil = v
	}
	l.mu.Unlock()
	return nil
}

// renewsFor bounds the validity a renewal gives to d (0: the lease's duration): what the
// lock's waiters grant its holder before they take over, when that is shorter than this
// handle's duration (an attached handle's client may use a longer lease than the
// acquiring one). Called by the strategies' renew, before Renew extends the validity.
func (l *Lease) renewsFor(d time.Duration) {
	l.mu.Lock()
	l.renewFor = d
	l.mu.Unlock()
}

// Release gives the lease up and stops its heartbeat. Releasing twice is harmless. It
// returns an error matching ErrLeaseLost when the lease had already been lost (the work
// done under it may have overlapped another holder's) and ErrNotOwner when the lease
// belongs to another owner. With WithBypass it may renew the lease instead and keep it
// for this client's next Acquire of the key (the handle is done all the same).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	park := l.park
	l.mu.Unlock()
	if park != nil && park(ctx, l) {
		return nil // kept for this client's next Acquire (WithBypass)
	}
	return l.releaseNow(ctx)
}

// ReleaseTenure is Release that never keeps the lease for a continuation (WithBypass):
// the lock is given up in the table, and this client's next Acquire begins a new tenure
// with a new, higher fencing token. Without WithBypass it is Release.
//
// With WithBypass, call it instead of Release when a write fenced with this lease's
// token may still land — its outcome unknown (a timeout, a lost response): a continuation
// shares the token (see WithBypass), so only a new tenure's token fences that write out
// of the critical sections that follow.
func (l *Lease) ReleaseTenure(ctx context.Context) error {
	if l == nil {
		return invalidOption("lease", "must not be nil")
	}
	return l.releaseNow(ctx)
}

// releaseNow is Release without WithBypass: the lease is given up in the table.
func (l *Lease) releaseNow(ctx context.Context) error {
	l.stopHeartbeat()
	l.mu.Lock()
	if l.finished {
		err, clear := l.err, l.ranOut
		l.ranOut = false
		l.mu.Unlock()
		if clear {
			// The lease ran out on the local clock (no renewal could be written), and
			// nobody may have taken the lock since: the table may still name it, and
			// would hold the lock for about one more lease until a waiter skipped it.
			// Release it there if it is still ours (the write is owner-checked); the
			// caller learns of the loss all the same.
			_ = l.ops.release(ctx, l)
		}
		return err
	}
	l.releasing++
	l.mu.Unlock()
	err := l.ops.release(ctx, l)
	l.mu.Lock()
	l.releasing--
	l.mu.Unlock()
	if errors.Is(err, ErrNotOwner) {
		// Another owner's lease (an Attach with a foreign id): nothing of this client's
		// changed, and its Renew and Release keep answering ErrNotOwner (a validity
		// watcher would end the handle as lost first).
		return err
	}
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		// Transient: the lease may still be held, but its heartbeat is
		// stopped. Report it lost once its validity runs out, as the heartbeat would
		// (unless a later Release ends it first), so that Done and Err never stay silent.
		l.watchValidity()
		return err
	}
	l.finish(err)
	return err
}

// watchValidity reports the lease lost when its local validity runs out without a
// renewal (after a failed Release stopped its heartbeat). One watcher per lease.
func (l *Lease) watchValidity() {
	l.mu.Lock()
	if l.watching || l.finished {
		l.mu.Unlock()
		return
	}
	l.watching = true
	l.mu.Unlock()
	go func() {
		for {
			rem := l.Remaining()
			if rem <= 0 {
				l.mu.Lock()
				releasing := l.releasing > 0
				l.mu.Unlock()
				if !releasing {
					l.runOut(&LeaseError{Op: "validity", Key: l.key, LeaseID: l.id, Err: ErrLeaseLost})
					return
				}
				rem = 10 * time.Millisecond // a Release under way decides
			}
			t := time.NewTimer(rem)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// finish marks the lease released (err == nil) or lost.
func (l *Lease) finish(err error) {
	l.mu.Lock()
	if l.finished {
		l.mu.Unlock()
		return
	}
	l.finished, l.err = true, err
	close(l.done)
	l.mu.Unlock()
	l.report(err)
}

// runOut ends the lease as lost because its local validity ran out without a renewal:
// the table may still name it, so a later Release clears it there.
func (l *Lease) runOut(err error) {
	l.mu.Lock()
	if !l.finished {
		l.ranOut = true
	}
	l.mu.Unlock()
	l.finish(err)
}

func (l *Lease) stopHeartbeat() {
	l.mu.Lock()
	stop, done := l.stopHB, l.hbDone
	l.stopHB, l.hbDone = nil, nil
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// pauseHeartbeat stops the heartbeat for a write that may end the lease; the returned
// function starts it again if the lease is still held then, so that a failed write never
// leaves a lock held without renewals.
func (l *Lease) pauseHeartbeat() (resume func()) {
	l.mu.Lock()
	running := l.stopHB != nil
	parent, interval := l.hbParent, l.hbInterval
	l.mu.Unlock()
	if !running {
		return func() {}
	}
	l.stopHeartbeat()
	return func() {
		l.mu.Lock()
		finished := l.finished
		l.mu.Unlock()
		if !finished && parent.Err() == nil {
			l.startHeartbeat(parent, interval)
		}
	}
}

// observe sets the context passed to the observer's lease events (the Acquire's, without
// its cancellation).
func (l *Lease) observe(ctx context.Context) {
	if l.observer != nil {
		l.obsCtx = context.WithoutCancel(ctx)
	}
}

// startHeartbeat renews the lease every interval until Release, ctx's end, or loss.
// A renewal that fails transiently is retried sooner; if the local validity runs out
// without a successful renewal, the lease is reported lost.
func (l *Lease) startHeartbeat(ctx context.Context, interval time.Duration) {
	if l.obsCtx == nil {
		l.observe(ctx) // startHeartbeat is the last step of every Acquire
	}
	if interval <= 0 {
		return
	}
	hbCtx, cancel := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	l.mu.Lock()
	l.stopHB, l.hbDone = cancel, hbDone
	l.hbParent, l.hbInterval = ctx, interval
	l.mu.Unlock()
	go func() {
		defer close(hbDone)
		// The first renewal is due one interval into the lease's validity.
		wait := max(0, l.Remaining()-(l.duration-interval))
		for {
			t := time.NewTimer(wait)
			select {
			case <-hbCtx.Done():
				t.Stop()
				return
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			rem := l.Remaining()
			if rem <= 0 {
				l.runOut(&LeaseError{Op: "heartbeat", Key: l.key, LeaseID: l.id, Err: ErrLeaseLost})
				return
			}
			callCtx, cancelCall := context.WithTimeout(hbCtx, rem)
			err := l.Renew(callCtx)
			cancelCall()
			switch {
			case err == nil:
				// Next renewal one interval after the start of this one (the validity
				// counts from there), however long the call took.
				wait = max(0, l.Remaining()-(l.duration-interval))
			case errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotOwner):
				l.finish(err)
				return
			case hbCtx.Err() != nil:
				return
			default:
				wait = max(interval/4, 10*time.Millisecond) // transient: try again soon
			}
		}
	}()
}
