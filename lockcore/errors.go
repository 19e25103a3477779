package lockcore

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error lockcore returns for these conditions matches one of them
// with errors.Is; the typed errors below carry the details and match with errors.As.
var (
	// ErrLockHeld means another owner holds the lock (or is ahead in the queue).
	ErrLockHeld = errors.New("lockcore: lock held by another owner")
	// ErrWaitTimeout means the wait policy's time ran out before the lock was free.
	// It is always returned together with ErrLockHeld.
	ErrWaitTimeout = errors.New("lockcore: timed out waiting for lock")
	// ErrLeaseLost means a lease this client held has expired and may have been taken
	// over: a renewal, release or guarded write was refused. Work done under the lease
	// must be treated as unsafe.
	ErrLeaseLost = errors.New("lockcore: lease lost")
	// ErrNotOwner means the caller tried to release or renew a lease that belongs to
	// another owner. Nothing was changed.
	ErrNotOwner = errors.New("lockcore: lease belongs to another owner")
	// ErrInvalidOption reports an invalid option at construction or call time.
	ErrInvalidOption = errors.New("lockcore: invalid option")
	// ErrInvalidKey reports an empty or oversized key.
	ErrInvalidKey = errors.New("lockcore: invalid key")
	// ErrConflict means an optimistic update lost every retry to concurrent writers.
	ErrConflict = errors.New("lockcore: optimistic update conflict")
	// ErrItemNotFound means a locking read required an existing item and there was none.
	ErrItemNotFound = errors.New("lockcore: item not found")
	// ErrUnknownOutcome means a write failed ambiguously (a timeout, reset or 5xx after
	// the request may have reached DynamoDB) and no re-read could tell whether it landed,
	// because other writers changed the item since. On a lease it comes with ErrLeaseLost:
	// the caller must assume both that the write may have happened and that the lease is
	// gone. From Inspector.ForceRelease it means a lease may have been ended (see Show's
	// Audit).
	ErrUnknownOutcome = errors.New("lockcore: outcome of write unknown")
	// ErrItemTooLarge means the item a lock lives on has no room for a write the lock
	// needs: DynamoDB's item size limit (400 KB), less the room the lock keeps for its
	// holders' writes (see ItemTooLargeError). Nothing was written.
	ErrItemTooLarge = errors.New("lockcore: item too large for the lock")
)

// errLostUnknown matches both ErrLeaseLost and ErrUnknownOutcome.
var errLostUnknown = fmt.Errorf("%w; %w", ErrLeaseLost, ErrUnknownOutcome)

// Holder describes the current holder of a lock as last seen in the table.
type Holder struct {
	Owner   string        // owner name given by the holder's client
	LeaseID string        // unique id of the holder's acquisition
	Rev     int64         // lease version: bumps on every acquisition and renewal
	Lease   time.Duration // lease duration the holder asked for
	Until   time.Time     // holder's wall-clock lease end (informational)
	Token   Fence         // holder's fencing token
}

// HeldError is returned when a lock could not be acquired because someone else holds it.
// It matches ErrLockHeld, and ErrWaitTimeout when a wait ran out, and the context's error
// when the context ended the wait.
type HeldError struct {
	Key      string        // lock key
	Holder   *Holder       // current holder; nil if the engine did not say and it was gone on re-read
	Waited   time.Duration // how long this call waited
	TimedOut bool          // the wait policy's time ran out
	Cause    error         // context error that ended the wait, if any
}

func (e *HeldError) Error() string {
	msg := fmt.Sprintf("lockcore: lock %q held", e.Key)
	if e.Holder != nil {
		msg += fmt.Sprintf(" by %q (lease %s)", e.Holder.Owner, e.Holder.LeaseID)
	}
	if e.Waited > 0 {
		msg += fmt.Sprintf(" after waiting %s", e.Waited.Round(time.Millisecond))
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap lets errors.Is match ErrLockHeld, ErrWaitTimeout and the context error.
func (e *HeldError) Unwrap() []error {
	errs := []error{ErrLockHeld}
	if e.TimedOut {
		errs = append(errs, ErrWaitTimeout)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// LeaseError is returned when an operation on a lease failed because the lease is no
// longer this caller's. It matches ErrLeaseLost or ErrNotOwner.
type LeaseError struct {
	Op      string  // "release", "renew", "update", "heartbeat", ...
	Key     string  // lock key
	LeaseID string  // the lease the caller presented
	Current *Holder // who holds the lock now, if anyone
	Err     error   // ErrLeaseLost or ErrNotOwner
}

func (e *LeaseError) Error() string {
	msg := fmt.Sprintf("lockcore: %s %q (lease %s): %v", e.Op, e.Key, e.LeaseID, e.Err)
	if e.Current != nil {
		msg += fmt.Sprintf("; now held by %q (lease %s)", e.Current.Owner, e.Current.LeaseID)
	}
	return msg
}

func (e *LeaseError) Unwrap() error { return e.Err }

// OptionError names an invalid option or argument. It matches ErrInvalidOption or
// ErrInvalidKey.
type OptionError struct {
	Field  string // option or argument name, e.g. "lease", "key"
	Reason string
	Err    error // ErrInvalidOption or ErrInvalidKey
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("%v: %s: %s", e.Err, e.Field, e.Reason)
}

func (e *OptionError) Unwrap() error { return e.Err }

func invalidOption(field, format string, args ...any) error {
	return &OptionError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidOption}
}

func invalidKey(field, format string, args ...any) error {
	return &OptionError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidKey}
}

// unusableLocker is the error of an acquisition on a nil lock client (a typed nil passed
// as a Locker, say) or on a zero one not made by its constructor: an *OptionError naming
// "locker", as Do's for a nil Locker, instead of a nil-pointer panic.
func unusableLocker(isNil bool, typ, ctor string) error {
	if isNil {
		return invalidOption("locker", "must not be a nil %s", typ)
	}
	return invalidOption("locker", "%s must be made by %s", typ, ctor)
}
