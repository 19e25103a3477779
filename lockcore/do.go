package lockcore

import (
	"context"
	"errors"
	"reflect"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Locker is what Do needs of a lock: Mutex, TicketLock and Queue implement it. Their
// Acquire on a nil client (or a zero one, not made by its constructor) returns an
// *OptionError naming "locker". An ItemLocker's Acquire takes an item key and returns
// an *ItemLease, so it is no Locker: DoItem is its Do.
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
// A nil l (also a nil *Mutex, *TicketLock or *Queue) or fn is an *OptionError
// (ErrInvalidOption) naming "locker" or "fn".
//
// The lease is released however fn ends — with WithBypass, kept for the next call only
// when fn returned nil (else ReleaseTenure). When fn panics, Do releases the lease and
// lets the panic go on with its value (as a deferred call would; the caller's recover
// sees fn's value, and the stack trace shows fn's panic); when fn calls runtime.Goexit
// (t.FailNow in a test does), Do releases the lease and the goroutine goes on exiting.
// The release's error is lost then; a lost lease is still reported to the Observer.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context, lease *Lease) error, opts ...AcquireOption) error {
	if l == nil {
		return invalidOption("locker", "must not be nil")
	}
	if v := reflect.ValueOf(l); v.Kind() == reflect.Pointer && v.IsNil() {
		return invalidOption("locker", "must not be a nil %T", l)
	}
	if fn == nil {
		return invalidOption("fn", "must not be nil")
	}
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	// fn failed (or panicked): a write of it may have an unknown outcome and still land,
	// so the tenure ends (WithBypass would otherwise keep the lease, token and all, for
	// the next call's fn: see ReleaseTenure).
	release := func(ctx context.Context, ok bool) error {
		if ok {
			return lease.Release(ctx)
		}
		return lease.ReleaseTenure(ctx)
	}
	return hold(ctx, lease, release, func(ctx context.Context) error { return fn(ctx, lease) })
}

// DoItem is Do for the locking read: it locks and reads the item with key, runs fn
// under the lease and releases it (a lease fn already released, by UpdateAndRelease
// say, is released once only). Errors, panics and runtime.Goexit in fn are handled as
// by Do. A nil il or fn is an *OptionError naming "locker" or "fn".
func DoItem(ctx context.Context, il *ItemLocker, key map[string]types.AttributeValue, fn func(ctx context.Context, lease *ItemLease) error, opts ...AcquireOption) error {
	if il == nil {
		return invalidOption("locker", "must not be a nil *ItemLocker")
	}
	if fn == nil {
		return invalidOption("fn", "must not be nil")
	}
	lease, err := il.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	return hold(ctx, lease.Lease, func(ctx context.Context, _ bool) error { return lease.Release(ctx) },
		func(ctx context.Context) error { return fn(ctx, lease) })
}

// hold runs fn under lease and releases it on every way out of fn (ok: fn returned nil).
// The release is deferred, without recover, so that it also runs when fn panics or calls
// runtime.Goexit: an unreleased lease would be renewed until ctx ends — forever with
// context.Background — and a panic recovered here would lose fn's stack.
func hold(ctx context.Context, lease *Lease, release func(ctx context.Context, ok bool) error, fn func(context.Context) error) (err error) {
	lctx, cancel := lease.Context(ctx)
	returned := false
	defer func() {
		cancel()
		// Release on a context of its own: fn may have ended because ctx did.
		rctx, rcancel := detached(ctx)
		rerr := release(rctx, returned && err == nil)
		rcancel()
		if !returned {
			return // a panic or Goexit goes on
		}
		switch {
		case err == nil:
			err = rerr
		case rerr != nil:
			err = errors.Join(err, rerr)
		}
	}()
	err = fn(lctx)
	returned = true
	return err
}
