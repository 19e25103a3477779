package lockcore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// observations remembers, per lock, the lease version a client last saw and since when,
// across calls: a Lambda that retries an order a minute later (in the same warm
// container) can then take over a lease it already watched go stale, instead of
// starting to watch again. Forgetting an entry is always safe (it only delays a
// takeover), so the cache is bounded by dropping arbitrary entries.
type observations struct {
	mu sync.Mutex
	m  map[string]observer
}

const maxObservations = 4096

func (o *observations) load(key string) observer {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[key]
}

func (o *observations) store(key string, ob observer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]observer)
	}
	boundedStore(o.m, key, ob)
}

func (o *observations) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, key)
}

// observer implements the clock-skew-safe takeover: it remembers the lease version a
// waiter saw and since when (on the waiter's own clock, measured when the answer came
// back, so never before the holder's renewal was sent).
type observer struct {
	leaseID string
	rev     int64
	lease   time.Duration
	since   time.Time
}

func (o *observer) see(h *Holder, now time.Time) {
	if h.LeaseID != o.leaseID || h.Rev != o.rev {
		*o = observer{leaseID: h.LeaseID, rev: h.Rev, lease: h.Lease, since: now}
	}
}

// stale returns the observed lease if it has been unchanged for a full lease.
func (o *observer) stale(now time.Time) *Holder {
	if o.leaseID == "" || now.Sub(o.since) < o.lease {
		return nil
	}
	return &Holder{LeaseID: o.leaseID, Rev: o.rev}
}

// attemptFunc makes one acquisition attempt. stale, when not nil, is a lease the waiter
// has seen unchanged for a full lease and may take over. It returns won, or the holder
// that blocked it (nil when the attempt learned nothing, e.g. it was throttled), or an
// error that ends the wait.
type attemptFunc func(ctx context.Context, stale *Holder) (won bool, holder *Holder, err error)

// waitFor runs attempt until it wins, the wait policy's time runs out, or ctx ends.
// Between attempts it sleeps with capped exponential backoff and full jitter, but wakes
// early when a takeover becomes possible.
//
// obsKey identifies the lock in the client's observation memory.
func (c *config) waitFor(ctx context.Context, key, obsKey string, p WaitPolicy, attempt attemptFunc) error {
	start := c.clock.Now()
	obs := c.seen.load(obsKey)
	defer func() { c.seen.store(obsKey, obs) }()
	var last *Holder
	bo := backoff{base: c.backoffBase, cap: c.backoffCap}
	for {
		var stale *Holder
		if !c.takeover.wallClock {
			stale = obs.stale(c.clock.Now())
		}
		won, holder, err := attempt(ctx, stale)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return c.ended(key, last, start, cerr)
			}
			return err
		}
		if won {
			obs = observer{}
			return nil
		}
		now := c.clock.Now()
		if holder != nil {
			obs.see(holder, now)
			last = holder
		}
		waited := now.Sub(start)
		if !p.forever && waited >= p.max {
			return &HeldError{Key: key, Holder: last, Waited: waited, TimedOut: p.max > 0}
		}
		d := bo.next()
		if last != nil {
			// Wake when a takeover becomes possible. When this attempt saw the holder
			// and the moment passed while it was in flight (its condition used the
			// clock at its start), try again now, not after a full backoff step; an
			// attempt that learnt nothing (throttled, say) backs off as usual.
			wake := func(r time.Duration) {
				if r < 0 && holder != nil {
					d = min(d, c.backoffBase)
				}
				if r >= 0 && r < d {
					d = r + time.Millisecond
				}
			}
			if c.takeover.wallClock {
				wake(last.Until.Add(c.takeover.skew).Sub(c.clock.Now()))
			} else if obs.leaseID != "" {
				wake(obs.since.Add(obs.lease).Sub(now))
				// Look often enough to see the holder's last renewal soon after it
				// lands: the takeover clock starts when we first see it.
				d = min(d, max(obs.lease/10, c.backoffBase))
			}
		}
		if !p.forever {
			d = min(d, p.max-waited)
		}
		if err := sleep(ctx, d); err != nil {
			return c.ended(key, last, start, err)
		}
	}
}

// ended explains a wait that the context ended: a *HeldError when someone was seen
// holding the lock, else the context's error alone (the lock may well be free: the
// caller cancelled, nobody held it).
func (c *config) ended(key string, last *Holder, start time.Time, cause error) error {
	if last == nil {
		return fmt.Errorf("lockcore: acquire %q: %w", key, cause)
	}
	return &HeldError{Key: key, Holder: last, Waited: c.clock.Now().Sub(start), Cause: cause}
}

// conditionalAttempt is one conditional acquisition of a Mutex or an ItemLocker: the item
// it won, or the holder that blocked it (nil if it learnt nothing), and whether its
// outcome was ambiguous (it may have landed without our knowing).
type conditionalAttempt func(ctx context.Context, stale *Holder) (won item, holder *Holder, ambiguous bool, err error)

// acquireItem runs attempt under the wait policy p and returns the item won and the start
// of the lease's validity: the send time of the winning attempt, or of the first
// ambiguous one when that was earlier (the write that won may be that attempt's).
// tookOver tells whether a won item replaced another's lease. When the wait fails after
// an ambiguous attempt, abandon releases the lease that attempt may have taken.
func (c *config) acquireItem(ctx context.Context, key, obsKey string, p WaitPolicy, st *acqStats,
	attempt conditionalAttempt, tookOver func(won item, stale *Holder) bool, abandon func()) (item, time.Time, error) {
	var got item
	var start, firstUncertain time.Time
	uncertain := false
	err := c.waitFor(ctx, key, obsKey, p, func(ctx context.Context, stale *Holder) (bool, *Holder, error) {
		start = c.clock.Now()
		it, holder, amb, err := attempt(ctx, stale)
		if amb && !uncertain {
			uncertain, firstUncertain = true, start
		}
		st.contended = st.contended || holder != nil
		st.takeover = it != nil && tookOver(it, stale)
		got = it
		return it != nil, holder, err
	})
	if uncertain && firstUncertain.Before(start) {
		start = firstUncertain
	}
	if err != nil {
		if uncertain {
			abandon()
		}
		return nil, time.Time{}, err
	}
	return got, start, nil
}
