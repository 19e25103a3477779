package lockcore

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with full jitter: the n-th delay is uniform in
// [0, min(cap, base·2^n)).
type backoff struct {
	base, cap time.Duration
	n         int
}

func (b *backoff) next() time.Duration {
	d := b.base << min(b.n, 30)
	if d > b.cap || d <= 0 {
		d = b.cap
	}
	b.n++
	return time.Duration(jitterN(int64(d)) + 1)
}

// jitterN draws backoff jitter in [0, n). The simulator (sim_test.go) replaces it with
// a seeded source so that a run replays exactly.
var jitterN = rand.Int64N

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
