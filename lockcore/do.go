package lockcore

import (
	"context"
	"errors"
	"fmt"
)

// Locker is what Do needs of a lock: Mutex, TicketLock and Queue implement it.
type Locker interface {
	Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error)
}

var (
	_ Locker = (*Mutex)(nil)
	_ Locker = (*TicketLock)(nil)
	_ Locker = (*Queue)(nil)
)

// Do acquires key, runs fn under the lease and releases it: the call most code wants.
//
// fn's context ends when the lease is lost (its heartbeat failed, or its local validity
// ran out), when it is released, or when ctx ends; context.Cause tells which. Work that
// writes protected data should pass the lease's token or GuardCheck along with it.
//
// The error is the acquisition's (nothing ran), or fn's, joined with the release's when
// that failed too. When fn succeeded but the release reports the lease lost, Do returns
// that error (matching ErrLeaseLost): fn's work may have overlapped another holder's.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context, lease *Lease) error, opts ...AcquireOption) error {
	if l == nil {
		return invalidOption("locker", "must not be nil")
	}
	if fn == nil {
		return invalidOption("fn", "must not be nil")
	}
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	lctx, cancel := lease.Context(ctx)
	ferr := run(lctx, lease, fn)
	cancel()
	// Release on a context of its own: fn may have ended because ctx did.
	rctx, rcancel := detached(ctx)
	defer rcancel()
	rerr := lease.Release(rctx)
	switch {
	case ferr == nil:
		return rerr
	case rerr == nil:
		return ferr
	default:
		return errors.Join(ferr, rerr)
	}
}

// run calls fn, turning a panic into an error so that the lease is still released.
func run(ctx context.Context, lease *Lease, fn func(context.Context, *Lease) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("lockcore: Do: function panicked under lease %s: %v", lease.ID(), p)
		}
	}()
	return fn(ctx, lease)
}
