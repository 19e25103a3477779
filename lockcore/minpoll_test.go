package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// MinPollInterval bounds a waiter's reads: a waiter behind a 1.5 s hold reads at most
// once per interval (plus the read that finds its turn), whatever the pacer would do, on
// every strategy that queues. The bound is on counts, so a slow machine only makes it
// easier to meet.
func TestMinPollIntervalBoundsReads(t *testing.T) {
	t.Parallel()
	const hold, every = 1500 * time.Millisecond, 300 * time.Millisecond
	type acquirer func(db lockcore.DynamoDB, owner string, opts ...lockcore.AcquireOption) (release func(context.Context) error, err error)
	e := newEnv(t)
	strategies := map[string]acquirer{
		"mutex": func(db lockcore.DynamoDB, owner string, opts ...lockcore.AcquireOption) (func(context.Context) error, error) {
			m, _ := lockcore.NewMutex(db, e.locks, fast(owner)...)
			l, err := m.Acquire(context.Background(), "mp-mutex", opts...)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		"ticket": func(db lockcore.DynamoDB, owner string, opts ...lockcore.AcquireOption) (func(context.Context) error, error) {
			tl, _ := lockcore.NewTicketLock(db, e.locks, fast(owner)...)
			l, err := tl.Acquire(context.Background(), "mp-ticket", opts...)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		"item": func(db lockcore.DynamoDB, owner string, opts ...lockcore.AcquireOption) (func(context.Context) error, error) {
			il, _ := lockcore.NewItemLocker(db, e.data, fast(owner)...)
			l, err := il.Acquire(context.Background(), dataKey("mp-item"), opts...)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
	}
	for name, acquire := range strategies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reads := func(opts ...lockcore.AcquireOption) int32 {
				release, err := acquire(e.db, "holder")
				if err != nil {
					t.Fatal(err)
				}
				c := &counting{DynamoDB: e.db}
				type result struct {
					calls int32
					err   error
				}
				done := make(chan result, 1)
				go func() {
					rel, err := acquire(c, "waiter", append(opts, lockcore.WaitUpTo(10*time.Second))...)
					n := c.calls.Load() // the take(s) and the reads of the wait
					if err == nil {
						err = rel(context.Background())
					}
					done <- result{n, err}
				}()
				time.Sleep(hold)
				if err := release(context.Background()); err != nil {
					t.Fatal(err)
				}
				r := <-done
				if r.err != nil {
					t.Fatal(r.err)
				}
				return r.calls
			}
			plain := reads()
			patient := reads(lockcore.MinPollInterval(every))
			t.Logf("calls of a wait behind a %s hold: %d by default, %d with MinPollInterval(%s)", hold, plain, patient, every)
			// Two takes at most (a claim that finds the lock held, then the queue take),
			// a read per interval, the read that finds the turn and a confirming one.
			if limit := int32(2 + hold/every + 2); patient > limit {
				t.Errorf("%d calls with MinPollInterval(%s), want at most %d", patient, every, limit)
			}
		})
	}
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("x")...)
	for _, bad := range []time.Duration{0, -time.Second, 2 * time.Minute} {
		if _, err := m.Acquire(ctxT(t, 5*time.Second), "mp-bad", lockcore.MinPollInterval(bad)); !errors.Is(err, lockcore.ErrInvalidOption) {
			t.Errorf("MinPollInterval(%s): %v, want ErrInvalidOption", bad, err)
		}
	}
}
