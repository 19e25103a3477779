package chaos

import (
	"context"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// Idle periods. Closed-loop workers almost never leave a lock idle, yet some defects need
// one: an uncontended take of an idle lock, then waiters arriving at once (while a
// lagging replica still shows the idle row). Two knobs give the workload idle spells:
//
//   - think time: after each section a worker waits a gap drawn by thinkTime — zero
//     half the time, else exponential with mean Config.Think (capped at 8×): often
//     none, sometimes longer than a whole section;
//   - bursts: per strategy, every Config.BurstEvery on average (exponential), the
//     workers stop after their current section and park; once all are parked (or after
//     burstGather), the strategy's locks stay idle a little longer (burstIdle), then
//     every parked worker is let go at once, within a few milliseconds of each other, on
//     the same key(s): one uncontended take and a queue of waiters behind it.
//
// A third, Config.Hold, gives the sections work time under the lock (drawn as think
// time), so that waiters arriving behind a holder find it still holding.

// thinkTime draws one worker's gap between two sections.
func thinkTime(rng *mrand.Rand, mean time.Duration) time.Duration {
	if mean <= 0 || rng.IntN(2) == 0 {
		return 0
	}
	return min(time.Duration(rng.ExpFloat64()*float64(mean)), 8*mean)
}

// burstGather bounds how long a burst waits for its workers to park (one may be in a
// long acquire); burstIdle draws how long the locks then stay idle; burstSpread is the
// most a released worker waits before it goes.
const (
	burstGather = 10 * time.Second
	burstSpread = 20 * time.Millisecond
)

func burstIdle(rng *mrand.Rand, think time.Duration) time.Duration {
	return 20*time.Millisecond + time.Duration(rng.Int64N(int64(max(think, 50*time.Millisecond))*2))
}

// burst coordinates the bursts of one strategy's workers.
type burst struct {
	mu      sync.Mutex
	cur     *round // the burst being called (workers park at their next section), or nil
	workers int
}

// round is one burst.
type round struct {
	parked  int
	all     chan struct{} // closed when every worker parked
	release chan struct{} // closed to let the parked workers go
	keys    []int         // the keys of the released workers' next section, set before release
}

func newBurst(workers int) *burst { return &burst{workers: workers} }

// gate is called by a worker before each section. Outside a burst it returns nil at
// once; during one it parks the worker until the burst is released and returns the
// keys its next section must use (nil if ctx ended).
func (b *burst) gate(ctx context.Context) []int {
	b.mu.Lock()
	r := b.cur
	if r == nil {
		b.mu.Unlock()
		return nil
	}
	if r.parked++; r.parked == b.workers {
		close(r.all)
	}
	b.mu.Unlock()
	select {
	case <-r.release:
		return r.keys
	case <-ctx.Done():
		return nil
	}
}

// run calls bursts until ctx ends; pick chooses a burst's keys. It returns the number of
// bursts released.
func (b *burst) run(ctx context.Context, rng *mrand.Rand, every, think time.Duration, pick func() []int) int {
	n := 0
	for {
		if !sleepCtx(ctx, time.Duration(rng.ExpFloat64()*float64(every))) {
			return n
		}
		r := &round{all: make(chan struct{}), release: make(chan struct{})}
		b.mu.Lock()
		b.cur = r
		b.mu.Unlock()
		t := time.NewTimer(burstGather)
		select {
		case <-r.all:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		// No more parking: a worker still in its section goes on as usual.
		b.mu.Lock()
		b.cur = nil
		b.mu.Unlock()
		r.keys = pick()
		sleepCtx(ctx, burstIdle(rng, think))
		close(r.release)
		n++
	}
}
