package lockcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// MultiLease holds several keys of one Mutex, acquired together.
type MultiLease struct {
	leases []*Lease
}

// Leases returns the held leases in canonical (sorted) key order.
func (ml *MultiLease) Leases() []*Lease { return ml.leases }

// Token returns the fencing token for key (0 if key is not part of the set).
func (ml *MultiLease) Token(key string) Fence {
	for _, l := range ml.leases {
		if l.key == key {
			return l.token
		}
	}
	return 0
}

// Err returns the first lease-lost error among the held leases, or nil.
func (ml *MultiLease) Err() error {
	for _, l := range ml.leases {
		if err := l.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Release releases every lease and joins their errors. The releases run concurrently:
// each serves its key's next waiter, and a waiter wanting several of the keys should not
// wait one round trip per key (release order does not matter for deadlock freedom, which
// comes from the order of acquisition).
func (ml *MultiLease) Release(ctx context.Context) error {
	errs := make([]error, len(ml.leases))
	var wg sync.WaitGroup
	for i, l := range ml.leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Release(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// AcquireAll takes the locks on every key, all or nothing. Keys are deduplicated and
// taken in one canonical (byte-wise sorted) order, so two callers wanting overlapping
// sets can never deadlock: each waits only for keys ordered after every key it holds.
// Each key is a fair acquisition (a ticket, served in arrival order); while it holds
// earlier keys, a waiter times its reads of the next key close to its turn, so that it
// does not hold them needlessly long.
// The wait policy covers the whole set. On failure every lock already taken is released
// and the error names the key that could not be had; a key whose lease was lost while a
// later key was waited for fails the set too (ErrLeaseLost).
func (m *Mutex) AcquireAll(ctx context.Context, keys []string, opts ...AcquireOption) (*MultiLease, error) {
	if m == nil || m.cfg == nil {
		return nil, unusableLocker(m == nil, "*Mutex", "NewMutex")
	}
	if len(keys) == 0 {
		return nil, invalidKey("keys", "must not be empty")
	}
	ac, err := m.cfg.acquireConfig(opts)
	if err != nil {
		return nil, err
	}
	for i, k := range keys { // before sorting: the error names the caller's index
		if err := m.validate(k, ac.namespace); err != nil {
			return nil, fmt.Errorf("keys[%d]: %w", i, err)
		}
	}
	if ctx.Err() != nil { // as in Acquire: send nothing, write nothing
		return nil, fmt.Errorf("lockcore: acquire all (%d keys): not started: %w", len(keys), context.Cause(ctx))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	start := m.cfg.clock.Now()
	ml := &MultiLease{}
	for i, k := range sorted {
		policy := ac.wait
		spent := false // WaitUpTo's time went to earlier keys: this one is only tried
		if !policy.forever && policy.max > 0 {
			left := policy.max - m.cfg.clock.Now().Sub(start)
			spent = left <= 0
			policy = WaitUpTo(max(0, left))
		}
		kopts := append(slices.Clone(opts), policy)
		if i > 0 {
			// Holding earlier keys: wait for this one without far sleeps, so as not to
			// hold them past our turn here.
			kopts = append(kopts, acquireFunc(func(a *acquireConfig) error { a.urgent = true; return nil }))
		}
		l, err := m.Acquire(ctx, k, kopts...)
		if err != nil {
			var he *HeldError
			if spent && errors.As(err, &he) {
				// The caller asked to wait, and the set's time ran out.
				he.TimedOut, he.Waited = true, m.cfg.clock.Now().Sub(start)
			}
			return nil, ml.abandon(ctx, len(sorted), k, err)
		}
		ml.leases = append(ml.leases, l)
	}
	// A key taken earlier may have been lost while a later one was waited for: its
	// heartbeat found it gone, or, with heartbeats off, its validity ran out and a waiter
	// may have skipped it. Renew what has no validity left; the set is all or nothing.
	for _, l := range ml.leases {
		err := l.Err()
		if err == nil && l.Remaining() <= 0 {
			err = l.Renew(ctx)
		}
		if err != nil {
			return nil, ml.abandon(ctx, len(sorted), l.key, err)
		}
	}
	return ml, nil
}

// abandon releases the keys taken so far and explains why key could not be had.
func (ml *MultiLease) abandon(ctx context.Context, n int, key string, err error) error {
	rctx, cancel := detached(ctx)
	_ = ml.Release(rctx)
	cancel()
	return fmt.Errorf("lockcore: acquire all (%d keys): key %q: %w", n, key, err)
}
