package bench

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Percentile returns the p-th percentile (0..100) of ds by the nearest-rank method, or 0
// for no samples.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	rank = max(0, min(rank, len(s)-1))
	return s[rank]
}

// Mean returns the mean of ds, or 0 for no samples.
func Mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// Jain returns Jain's fairness index (Σx)² / (n·Σx²) of xs: 1 when all are equal, 1/n
// when one gets everything. It returns 0 when every x is 0.
func Jain(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// Overlap detects two holders inside a critical section at once.
type Overlap struct {
	cur    atomic.Int32
	events atomic.Int64 // entries that found another holder inside
	peak   atomic.Int32
}

// Enter marks a holder entering; it reports whether another holder was inside.
func (o *Overlap) Enter() bool {
	c := o.cur.Add(1)
	for {
		p := o.peak.Load()
		if c <= p || o.peak.CompareAndSwap(p, c) {
			break
		}
	}
	if c > 1 {
		o.events.Add(1)
		return true
	}
	return false
}

// Exit marks a holder leaving.
func (o *Overlap) Exit() { o.cur.Add(-1) }

// Events returns how many entries found another holder inside.
func (o *Overlap) Events() int64 { return o.events.Load() }

// Interval is one critical section on the shared timeline.
type Interval struct {
	Worker     int
	Start, End time.Time
}

// Timeline records critical sections of one run.
type Timeline struct {
	mu sync.Mutex
	iv []Interval
}

// Add records a critical section.
func (t *Timeline) Add(iv Interval) {
	t.mu.Lock()
	t.iv = append(t.iv, iv)
	t.mu.Unlock()
}

// Intervals returns the recorded sections ordered by start.
func (t *Timeline) Intervals() []Interval {
	t.mu.Lock()
	out := slices.Clone(t.iv)
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	return out
}

// Handoffs returns the gaps between the end of each critical section and the start of
// the next (by start time): the time the lock spent changing hands. Overlapping sections
// (which only optimistic strategies have) give no sample.
func Handoffs(iv []Interval) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(iv); i++ {
		if g := iv[i].Start.Sub(iv[i-1].End); g >= 0 {
			out = append(out, g)
		}
	}
	return out
}
