package lockcore

import (
	"context"
	"errors"
	"log"
	"runtime/debug"
	"time"
)

// Observer receives lock events, for metrics and logs (see WithObserver). Every field
// is optional. The functions run synchronously on the goroutine that caused the event
// (the caller's, or a lease's heartbeat), so they must return quickly and must not call
// back into the lock. ctx is the context of the call that caused the event (for lease
// events: of the Acquire that took the lease), so per-request loggers and metric sinks
// carried in it can be used.
//
// A panic in a function is the observer's bug and never breaks a lock or the process:
// lockcore recovers it, logs it once with its stack through the standard log package
// (log.Printf, as net/http does for a handler's panic), and goes on as if the function
// had returned: the Acquire returns its lease, a Release its result, a heartbeat keeps
// renewing. A function that calls runtime.Goexit is not stopped.
type Observer struct {
	// Acquired reports a successful acquisition.
	Acquired func(context.Context, AcquireEvent)
	// AcquireFailed reports an acquisition that ended without a lease: the lock was
	// held (NoWait), the wait timed out, the context ended, or an error occurred.
	AcquireFailed func(context.Context, AcquireEvent)
	// Released reports a lease released cleanly by its holder.
	Released func(context.Context, LeaseEvent)
	// LeaseLost reports a lease found lost: by its heartbeat, a renewal, a release or a
	// guarded write (Err says which). Work done under it may have overlapped another
	// holder's.
	LeaseLost func(context.Context, LeaseEvent)
	// UnknownOutcome reports a write whose outcome could not be settled (ErrUnknownOutcome).
	UnknownOutcome func(context.Context, LeaseEvent)
}

// AcquireEvent describes one acquisition.
type AcquireEvent struct {
	Strategy  Strategy      // StrategyMutex, StrategyItem, StrategyTicket or StrategyQueue
	Key       string        // lock key (for the locking read: the item's key, as "name=value,...")
	Namespace string        // lock namespace, where the strategy has one
	Wait      time.Duration // from the call to its end
	Contended bool          // another holder or waiter was seen
	Takeover  bool          // the lease replaced an abandoned one (or skipped a stalled ticket)
	Token     Fence         // the new lease's fencing token (Acquired only)
	Err       error         // why it failed (AcquireFailed only)
}

// LeaseEvent describes the end of a lease, or a write under it.
type LeaseEvent struct {
	Strategy  Strategy
	Key       string
	Namespace string
	LeaseID   string
	Token     Fence
	Held      time.Duration // from the acquisition to the event
	Err       error         // LeaseLost and UnknownOutcome only
}

// WithObserver reports the client's lock events to o (acquisitions with their wait and
// contention, releases with their hold time, lost leases, unknown outcomes).
func WithObserver(o Observer) Option {
	return func(c *config) error { c.observer = o; return nil }
}

func (o Observer) any() bool {
	return o.Acquired != nil || o.AcquireFailed != nil || o.Released != nil || o.LeaseLost != nil || o.UnknownOutcome != nil
}

// leaseStrategy names a lease's strategy for events.
func leaseStrategy(ops leaseOps) Strategy {
	switch ops.(type) {
	case *Mutex:
		return StrategyMutex
	case *itemHold:
		return StrategyItem
	case *Queue:
		return StrategyQueue
	case *ticketHold:
		return StrategyTicket
	}
	return "unknown"
}

// acqStats is what an acquisition learnt on its way, for its event.
type acqStats struct{ contended, takeover bool }

// acquired reports the end of an acquisition.
func (c *config) acquired(ctx context.Context, strategy Strategy, key, ns string, start time.Time, st acqStats, l *Lease, err error) {
	if !c.observer.any() {
		return
	}
	ev := AcquireEvent{Strategy: strategy, Key: key, Namespace: ns, Wait: c.clock.Now().Sub(start),
		Contended: st.contended, Takeover: st.takeover, Err: err}
	switch {
	case err == nil && c.observer.Acquired != nil:
		ev.Token = l.Token()
		notify(ctx, "Acquired", c.observer.Acquired, ev)
	case err != nil && c.observer.AcquireFailed != nil:
		notify(ctx, "AcquireFailed", c.observer.AcquireFailed, ev)
	}
}

// notify calls one Observer function, the only place lockcore does. It recovers a panic
// in it: a panicking Acquired would otherwise leave the caller without the lease it
// took, renewed until the Acquire's context ends, and a panicking LeaseLost on a
// heartbeat's goroutine would end the process.
func notify[E any](ctx context.Context, event string, f func(context.Context, E), ev E) {
	defer func() {
		if p := recover(); p != nil {
			log.Printf("lockcore: Observer.%s panicked (recovered, the lock carries on): %v\n%s", event, p, debug.Stack())
		}
	}()
	f(ctx, ev)
}

// leaseEvent reports how a lease ended (err nil: released) or a write's unknown outcome.
func (l *Lease) report(err error) {
	l.mu.Lock()
	// A Queue sets both once the waiting row became the caller's lease.
	o, acquired := l.observer, l.acquired
	l.mu.Unlock()
	if o == nil {
		return
	}
	ctx := l.obsCtx
	if ctx == nil {
		ctx = context.Background() // an attached lease
	}
	ev := LeaseEvent{Strategy: leaseStrategy(l.ops), Key: l.key, Namespace: l.namespace, LeaseID: l.id,
		Token: l.token, Held: l.clock.Now().Sub(acquired), Err: err}
	switch {
	case err == nil:
		if o.Released != nil {
			notify(ctx, "Released", o.Released, ev)
		}
	case errors.Is(err, ErrUnknownOutcome):
		if o.UnknownOutcome != nil {
			notify(ctx, "UnknownOutcome", o.UnknownOutcome, ev)
		}
		if errors.Is(err, ErrLeaseLost) && o.LeaseLost != nil {
			notify(ctx, "LeaseLost", o.LeaseLost, ev)
		}
	case errors.Is(err, ErrLeaseLost):
		if o.LeaseLost != nil {
			notify(ctx, "LeaseLost", o.LeaseLost, ev)
		}
	}
}
