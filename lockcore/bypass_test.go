package lockcore_test

// Tests of WithBypass: a released lease kept for the client's own next Acquire of the
// key, within the tenure bound; never two holders, tokens never going back, every
// waiter served.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// A client with bypass that releases and acquires again continues its lease without a
// call: the same lease id and token; the released handle is done, cleanly. A lease not
// continued within linger is released in the table.
func TestBypassContinuesWithoutACall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	for _, kind := range []string{"mutex", "ticket"} {
		t.Run(kind, func(t *testing.T) {
			c := &counting{DynamoDB: e.db}
			var released, acquired atomic.Int32
			opts := fast("a", lockcore.WithBypass(time.Minute, 300*time.Millisecond), lockcore.WithObserver(lockcore.Observer{
				Released: func(context.Context, lockcore.LeaseEvent) { released.Add(1) },
				Acquired: func(context.Context, lockcore.AcquireEvent) { acquired.Add(1) },
			}))
			lk, other := newLocker(t, kind, c, e, opts...), newLocker(t, kind, e.db, e, fast("b")...)
			first, err := lk.Acquire(ctx, "bp")
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-first.Done():
			default:
				t.Fatal("a released handle is not done")
			}
			if first.Err() != nil {
				t.Fatalf("released handle: Err = %v", first.Err())
			}
			c.calls.Store(0)
			second, err := lk.Acquire(ctx, "bp")
			if err != nil {
				t.Fatal(err)
			}
			if n := c.calls.Load(); n != 0 {
				t.Fatalf("continuing the lease made %d calls, want 0", n)
			}
			if second.ID() != first.ID() || second.Token() != first.Token() {
				t.Fatalf("continued lease %s/%d, released %s/%d: want the same lease", second.ID(), second.Token(), first.ID(), first.Token())
			}
			// Held in the table meanwhile: another client cannot have it.
			if _, err := other.Acquire(ctx, "bp", lockcore.NoWait()); !errors.Is(err, lockcore.ErrLockHeld) {
				t.Fatalf("while continued: other client's try = %v, want ErrLockHeld", err)
			}
			if err := second.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Not continued: released within linger (and a little for the call).
			deadline := time.Now().Add(20 * time.Second)
			for {
				l, err := other.Acquire(ctx, "bp", lockcore.NoWait())
				if err == nil {
					if l.Token() <= second.Token() {
						t.Fatalf("next holder's token %d, kept lease's %d: want it to grow", l.Token(), second.Token())
					}
					_ = l.Release(ctx)
					break
				}
				if !errors.Is(err, lockcore.ErrLockHeld) || time.Now().After(deadline) {
					t.Fatalf("after linger: other client's try = %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if acquired.Load() != 2 || released.Load() != 2 {
				t.Fatalf("observer: %d acquired, %d released; want 2 and 2", acquired.Load(), released.Load())
			}
		})
	}
}

// A lease is not continued past its tenure bound, nor for an acquisition with data or
// another lease: the kept lease is released and the lock taken as usual (a new token).
func TestBypassNotContinued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct {
		name  string
		bound time.Duration
		opts  []lockcore.AcquireOption
	}{
		{"bound reached", 200 * time.Millisecond, nil},
		{"data", time.Minute, []lockcore.AcquireOption{lockcore.Data([]byte("x"))}},
		{"other lease", time.Minute, []lockcore.AcquireOption{lockcore.LeaseDuration(4 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithBypass(tc.bound, tc.bound))...)
			if err != nil {
				t.Fatal(err)
			}
			key := "nc-" + tc.name
			first, err := m.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // past the short bound
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			second, err := m.Acquire(ctx, key, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Release(ctx)
			if second.Token() <= first.Token() || second.ID() == first.ID() {
				t.Fatalf("second lease %s/%d after %s/%d: want a new acquisition", second.ID(), second.Token(), first.ID(), first.Token())
			}
		})
	}
}

// A continuation shares its lease's fencing token, so a write of the earlier critical
// section that lands late (sent, its response lost) passes the token's fence in the
// later one and overwrites it: the chaos harness found exactly that lost update. After
// such a write, ReleaseTenure ends the tenure: the next Acquire takes a new, higher
// token, and the late copy fails its fence condition.
func TestBypassReleaseTenureFencesALateWrite(t *testing.T) {
	t.Parallel()
	e, ctx, m := keepingMutex(t)
	write := func(key string, tok lockcore.Fence, n int) error {
		ex, err := expression.NewBuilder().
			WithCondition(lockcore.FenceCondition("fence", tok)).
			WithUpdate(lockcore.FenceUpdate(expression.Set(expression.Name("n"), expression.Value(n)), "fence", tok)).
			Build()
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(e.data), Key: dataKey(key), UpdateExpression: ex.Update(),
			ConditionExpression: ex.Condition(), ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
		})
		return err
	}
	for _, tc := range []struct {
		name      string
		release   func(*lockcore.Lease) error
		continued bool
	}{
		{"Release", func(l *lockcore.Lease) error { return l.Release(ctx) }, true},
		{"ReleaseTenure", func(l *lockcore.Lease) error { return l.ReleaseTenure(ctx) }, false},
	} {
		key := "late-" + tc.name
		first, err := m.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// The first section's write of n = 1 is "in flight": sent below, late.
		if err := tc.release(first); err != nil {
			t.Fatal(err)
		}
		second, err := m.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got := second.ID() == first.ID(); got != tc.continued {
			t.Fatalf("%s: continued = %v, want %v", tc.name, got, tc.continued)
		}
		if err := write(key, second.Token(), 2); err != nil {
			t.Fatalf("%s: the second section's write: %v", tc.name, err)
		}
		late := write(key, first.Token(), 1) // the first section's write lands now
		var ccf *types.ConditionalCheckFailedException
		switch {
		case tc.continued && late != nil:
			t.Errorf("%s: the late write was refused (%v): the continuation no longer shares the token, update the docs", tc.name, late)
		case !tc.continued && !errors.As(late, &ccf):
			t.Errorf("%s: the late write of token %d after a new tenure's %d: %v, want a failed fence condition", tc.name, first.Token(), second.Token(), late)
		}
		if err := second.ReleaseTenure(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Do keeps a bypass lease for the next call only when fn succeeded: a failed fn may have
// left a write in flight, so its tenure ends and the next fn runs under a new token.
func TestBypassDoEndsTheTenureWhenFnFails(t *testing.T) {
	t.Parallel()
	_, ctx, m := keepingMutex(t)
	var tokens []lockcore.Fence
	run := func(fail error) {
		err := lockcore.Do(ctx, m, "do-tenure", func(_ context.Context, l *lockcore.Lease) error {
			tokens = append(tokens, l.Token())
			return fail
		})
		if !errors.Is(err, fail) {
			t.Fatalf("Do: %v, want %v", err, fail)
		}
	}
	errWrite := errors.New("write: unknown outcome")
	run(nil)      // kept
	run(errWrite) // continued, then ended
	run(nil)      // a new tenure
	if tokens[1] != tokens[0] {
		t.Errorf("after a successful fn the next call's token is %d, want the continued %d", tokens[1], tokens[0])
	}
	if tokens[2] <= tokens[1] {
		t.Errorf("after a failed fn the next call's token is %d, want above %d (a new tenure)", tokens[2], tokens[1])
	}
}

// Workers with bypass hammer one key: never two holders, a read-modify-write counter
// loses nothing, tokens never go back (equal only within one tenure), and every
// worker is served again and again: a holder keeps the lock for its bound at most.
func TestBypassContention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, kind := range []string{"mutex", "ticket"} {
		t.Run(kind, func(t *testing.T) {
			ctx := ctxT(t, 3*time.Minute)
			const workers = 5
			const bound = 150 * time.Millisecond
			cnt := &counter{e: e, pk: "bypass-" + kind}
			var ov overlap
			var mu sync.Mutex
			var lastToken lockcore.Fence
			var lastID string
			perWorker := make([]int, workers)
			var wg sync.WaitGroup
			stop := time.Now().Add(3 * time.Second)
			for w := range workers {
				lk := newLocker(t, kind, e.db, e, fast(fmt.Sprintf("w%d", w), lockcore.WithBypass(bound, 20*time.Millisecond))...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) {
						l, err := lk.Acquire(ctx, cnt.pk)
						if err != nil {
							t.Error(err)
							return
						}
						ov.enter()
						mu.Lock()
						if l.Token() < lastToken || l.Token() == lastToken && l.ID() != lastID {
							t.Errorf("token %d (%s) after %d (%s)", l.Token(), l.ID(), lastToken, lastID)
						}
						lastToken, lastID = l.Token(), l.ID()
						perWorker[w]++
						mu.Unlock()
						cnt.write(t, ctx, cnt.read(t, ctx)+1)
						ov.exit()
						if err := l.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if m := ov.max.Load(); m > 1 {
				t.Fatalf("%d holders at once", m)
			}
			total := 0
			for w, n := range perWorker {
				total += n
				if n == 0 {
					t.Errorf("worker %d was never served (%v)", w, perWorker)
				}
			}
			// Let the last kept lease go, then check the counter.
			if got := cnt.read(t, ctx); got != int64(total) {
				t.Fatalf("counter %d after %d critical sections: lost updates", got, total)
			}
			t.Logf("critical sections per worker: %v", perWorker)
		})
	}
}

// A Release that would keep the lease asks the table first: a lease an operator
// force-released is reported lost, and not kept. A kept lease force-released before the
// client's next Acquire is the documented exception (as a holder force-released in its
// critical section works on until a write or heartbeat of its lease fails): it may be
// continued, its fencing token is below the new holder's, and its Release reports it lost.
func TestBypassForceRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	in := inspector(t, e)
	for _, kind := range []string{"mutex", "ticket"} {
		t.Run(kind, func(t *testing.T) {
			st := lockcore.StrategyMutex
			if kind == "ticket" {
				st = lockcore.StrategyTicket
			}
			key := "bpforce-" + kind
			force := func() {
				t.Helper()
				if _, err := in.ForceRelease(ctx, key, lockcore.ForceOptions{Strategy: st, Actor: "op", Reason: "test"}); err != nil {
					t.Fatal(err)
				}
			}
			lk := newLocker(t, kind, e.db, e, fast("a", lockcore.WithBypass(time.Minute, time.Minute))...)
			l, err := lk.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			force()
			if err := l.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
				t.Fatalf("Release of a force-released lease = %v, want ErrLeaseLost", err)
			}
			l2, err := lk.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if l2.Token() <= l.Token() {
				t.Fatalf("after a lost lease: token %d, want above %d (not continued)", l2.Token(), l.Token())
			}
			if err := l2.Release(ctx); err != nil { // kept
				t.Fatal(err)
			}
			force()
			other := newLocker(t, kind, e.db, e, fast("b")...)
			lb, err := other.Acquire(ctx, key, lockcore.NoWait())
			if err != nil {
				t.Fatalf("after the force-release, another client's try: %v", err)
			}
			l3, err := lk.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if l3.Token() >= lb.Token() {
				t.Fatalf("continued lease's token %d, new holder's %d: fencing would not stop it", l3.Token(), lb.Token())
			}
			if err := l3.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
				t.Fatalf("Release of a continued force-released lease = %v, want ErrLeaseLost", err)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// WithBypass validates its bounds and the strategy it is given to.
func TestBypassOptionErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name  string
		build func() error
		field string
	}{
		{"zero bound", func() error {
			_, err := lockcore.NewMutex(e.db, e.locks, lockcore.WithBypass(0, time.Millisecond))
			return err
		}, "bypass bound"},
		{"linger past bound", func() error {
			_, err := lockcore.NewTicketLock(e.db, e.locks, lockcore.WithBypass(time.Millisecond, time.Second))
			return err
		}, "bypass linger"},
		{"zero linger", func() error {
			_, err := lockcore.NewMutex(e.db, e.locks, lockcore.WithBypass(time.Second, 0))
			return err
		}, "bypass linger"},
		{"item locker", func() error {
			_, err := lockcore.NewItemLocker(e.db, e.data, lockcore.WithBypass(time.Second, time.Millisecond))
			return err
		}, "bypass"},
		{"queue", func() error {
			_, err := lockcore.NewQueue(e.db, e.locks, lockcore.WithBypass(time.Second, time.Millisecond))
			return err
		}, "bypass"},
	} {
		err := tc.build()
		var oe *lockcore.OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || !errors.Is(err, lockcore.ErrInvalidOption) {
			t.Errorf("%s: %v, want an OptionError naming %q", tc.name, err, tc.field)
		}
	}
}

// newLocker builds a Mutex or a TicketLock.
func newLocker(t *testing.T, kind string, db lockcore.DynamoDB, e *env, opts ...lockcore.Option) lockcore.Locker {
	t.Helper()
	var (
		l   lockcore.Locker
		err error
	)
	switch kind {
	case "mutex":
		l, err = lockcore.NewMutex(db, e.locks, opts...)
	default:
		l, err = lockcore.NewTicketLock(db, e.locks, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// keepingMutex is a Mutex client with a bypass that keeps every released lease (a bound
// and linger no test reaches), on an env of its own.
func keepingMutex(t *testing.T) (*env, context.Context, *lockcore.Mutex) {
	t.Helper()
	e := newEnv(t)
	m, err := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithBypass(time.Minute, 30*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	return e, ctxT(t, time.Minute), m
}
