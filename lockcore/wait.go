package lockcore

import (
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

// retrySpent reports whether a take that keeps failing transiently (throttled, a
// conflicting transaction, an unknown outcome) since start has used up what its wait
// policy allows: the policy's wait, and at least the backoff cap, so that NoWait still
// rides over a short throttle as the SDK's own retries would. Without this bound a
// throttled table kept a NoWait or WaitUpTo acquisition retrying until its context
// ended — in a Lambda, the invocation's deadline, past the time kept for cleanup.
func (c *config) retrySpent(p WaitPolicy, start time.Time) bool {
	return !p.forever && c.clock.Now().Sub(start) >= max(p.max, c.backoffCap)
}
