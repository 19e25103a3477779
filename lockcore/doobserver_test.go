package lockcore_test

// Regression tests of issue 26 (items 4–6): Do releases its lease on every way out of fn
// (a panic goes on after the release, runtime.Goexit too); Do and every Acquire refuse a
// nil lock client with an *OptionError instead of a nil-pointer panic; a panicking
// Observer function breaks neither a lock nor the process.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// acquireFunc takes one lock of some strategy; release frees it.
type acquireFunc func(ctx context.Context, key string, opts ...lockcore.AcquireOption) (lease *lockcore.Lease, release func(context.Context) error, err error)

// lockKind opens a client of one strategy, for tests that run over all four.
type lockKind struct {
	name string
	open func(t *testing.T, e *env, owner string, opts ...lockcore.Option) acquireFunc
}

func lockKinds() []lockKind {
	plain := func(l lockcore.Locker, err error) func(t *testing.T) acquireFunc {
		return func(t *testing.T) acquireFunc {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, key string, opts ...lockcore.AcquireOption) (*lockcore.Lease, func(context.Context) error, error) {
				lease, err := l.Acquire(ctx, key, opts...)
				if err != nil {
					return nil, nil, err
				}
				return lease, lease.Release, nil
			}
		}
	}
	return []lockKind{
		{"Mutex", func(t *testing.T, e *env, owner string, opts ...lockcore.Option) acquireFunc {
			return plain(lockcore.NewMutex(e.db, e.locks, fast(owner, opts...)...))(t)
		}},
		{"TicketLock", func(t *testing.T, e *env, owner string, opts ...lockcore.Option) acquireFunc {
			return plain(lockcore.NewTicketLock(e.db, e.locks, fast(owner, opts...)...))(t)
		}},
		{"Queue", func(t *testing.T, e *env, owner string, opts ...lockcore.Option) acquireFunc {
			return plain(lockcore.NewQueue(e.db, e.locks, fast(owner, opts...)...))(t)
		}},
		{"ItemLocker", func(t *testing.T, e *env, owner string, opts ...lockcore.Option) acquireFunc {
			t.Helper()
			il, err := lockcore.NewItemLocker(e.db, e.data, fast(owner, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, key string, opts ...lockcore.AcquireOption) (*lockcore.Lease, func(context.Context) error, error) {
				lease, err := il.Acquire(ctx, dataKey(key), opts...)
				if err != nil {
					return nil, nil, err
				}
				return lease.Lease, lease.Release, nil
			}
		}},
	}
}

// catch runs f and returns what it panicked with (nil: it returned).
func catch(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// assertFree checks that another client takes key at once (NoWait): nobody holds it.
func assertFree(t *testing.T, ctx context.Context, acquire acquireFunc, key string) {
	t.Helper()
	_, release, err := acquire(ctx, key, lockcore.NoWait())
	if err != nil {
		t.Fatalf("another client cannot take %q at once: %v", key, err)
	}
	if err := release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// TestDoReleasesOnGoexit: fn ends with runtime.Goexit (t.FailNow does that), under a
// context that never ends. Do must release the lease on the way out; before the fix
// the lease was renewed forever and the lock stayed held.
func TestDoReleasesOnGoexit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, k := range []struct {
		name string
		open func(owner string) lockcore.Locker
	}{
		{"Mutex", func(o string) lockcore.Locker { m, _ := lockcore.NewMutex(e.db, e.locks, fast(o)...); return m }},
		{"TicketLock", func(o string) lockcore.Locker { return newTicket(t, e.db, e.locks, o) }},
		{"Queue", func(o string) lockcore.Locker { q, _ := lockcore.NewQueue(e.db, e.locks, fast(o)...); return q }},
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			key := "goexit-" + k.name
			var lease *lockcore.Lease
			done := make(chan struct{})
			returned := false
			go func() {
				defer close(done)
				// context.Background: nothing but the release ends this lease.
				_ = lockcore.Do(context.Background(), k.open("a"), key, func(_ context.Context, l *lockcore.Lease) error {
					lease = l
					runtime.Goexit()
					return nil
				})
				returned = true
			}()
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("Do's goroutine did not exit")
			}
			if returned {
				t.Fatal("Do returned after runtime.Goexit in fn")
			}
			select {
			case <-lease.Done():
			default:
				t.Fatal("the lease is still held after fn called runtime.Goexit")
			}
			if err := lease.Err(); err != nil {
				t.Fatalf("lease ended with %v, want a clean release", err)
			}
			b := k.open("b")
			l, err := b.Acquire(ctx, key, lockcore.NoWait())
			if err != nil {
				t.Fatalf("another client cannot take the lock at once: %v", err)
			}
			_ = l.Release(ctx)
		})
	}
}

// TestDoPanicReleasesAndRepanics: a panic in fn goes on, with its own value, after Do
// released the lease (before the fix Do turned it into an error).
func TestDoPanicReleasesAndRepanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, k := range []struct {
		name string
		open func(owner string) lockcore.Locker
	}{
		{"Mutex", func(o string) lockcore.Locker { m, _ := lockcore.NewMutex(e.db, e.locks, fast(o)...); return m }},
		{"TicketLock", func(o string) lockcore.Locker { return newTicket(t, e.db, e.locks, o) }},
		{"Queue", func(o string) lockcore.Locker { q, _ := lockcore.NewQueue(e.db, e.locks, fast(o)...); return q }},
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			key := "panic-" + k.name
			boom := errors.New("boom")
			var lease *lockcore.Lease
			var err error
			p := catch(func() {
				err = lockcore.Do(ctx, k.open("a"), key, func(_ context.Context, l *lockcore.Lease) error {
					lease = l
					panic(boom)
				})
			})
			if p != boom {
				t.Fatalf("Do recovered fn's panic (returned %v, panicked with %v); want the panic to go on with fn's value", err, p)
			}
			select {
			case <-lease.Done():
			default:
				t.Fatal("the lease is still held after fn panicked")
			}
			if err := lease.Err(); err != nil {
				t.Fatalf("lease ended with %v, want a clean release", err)
			}
			l, err := k.open("b").Acquire(ctx, key, lockcore.NoWait())
			if err != nil {
				t.Fatalf("another client cannot take the lock at once: %v", err)
			}
			_ = l.Release(ctx)
		})
	}
}

// TestNilLockers: Do and the acquisitions of every strategy refuse a nil (or zero)
// client with an *OptionError naming "locker"; before the fix they dereferenced it.
func TestNilLockers(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 10*time.Second)
	fn := func(context.Context, *lockcore.Lease) error { return nil }
	var (
		m  *lockcore.Mutex
		tl *lockcore.TicketLock
		q  *lockcore.Queue
		il *lockcore.ItemLocker
	)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Do(nil *Mutex)", func() error { return lockcore.Do(ctx, m, "k", fn) }},
		{"Do(nil *TicketLock)", func() error { return lockcore.Do(ctx, tl, "k", fn) }},
		{"Do(nil *Queue)", func() error { return lockcore.Do(ctx, q, "k", fn) }},
		{"Do(nil)", func() error { return lockcore.Do(ctx, nil, "k", fn) }},
		{"Do(&Mutex{})", func() error { return lockcore.Do(ctx, &lockcore.Mutex{}, "k", fn) }},
		{"nil Mutex.Acquire", func() error { _, err := m.Acquire(ctx, "k"); return err }},
		{"nil Mutex.TryAcquire", func() error { _, err := m.TryAcquire(ctx, "k"); return err }},
		{"nil Mutex.AcquireAll", func() error { _, err := m.AcquireAll(ctx, []string{"k"}); return err }},
		{"nil TicketLock.Acquire", func() error { _, err := tl.Acquire(ctx, "k"); return err }},
		{"nil Queue.Acquire", func() error { _, err := q.Acquire(ctx, "k"); return err }},
		{"nil ItemLocker.Acquire", func() error { _, err := il.Acquire(ctx, dataKey("k")); return err }},
		{"zero Mutex.Acquire", func() error { _, err := new(lockcore.Mutex).Acquire(ctx, "k"); return err }},
		{"zero TicketLock.Acquire", func() error { _, err := new(lockcore.TicketLock).Acquire(ctx, "k"); return err }},
		{"zero Queue.Acquire", func() error { _, err := new(lockcore.Queue).Acquire(ctx, "k"); return err }},
		{"zero ItemLocker.Acquire", func() error { _, err := new(lockcore.ItemLocker).Acquire(ctx, dataKey("k")); return err }},
	} {
		var err error
		if p := catch(func() { err = c.call() }); p != nil {
			t.Errorf("%s panicked: %v", c.name, p)
			continue
		}
		var oe *lockcore.OptionError
		if !errors.As(err, &oe) || oe.Field != "locker" || !errors.Is(err, lockcore.ErrInvalidOption) {
			t.Errorf("%s: %v, want an OptionError naming \"locker\"", c.name, err)
		}
	}
}

// logTap captures the standard logger's output for the test (the Observer's panics are
// logged there). Tests using it must not run in parallel with others.
type logTap struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *logTap) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *logTap) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.buf.String(), s)
}

func tapLog(t *testing.T) *logTap {
	w := &logTap{}
	prev := log.Writer()
	log.SetOutput(w)
	t.Cleanup(func() { log.SetOutput(prev) })
	return w
}

// TestObserverAcquiredPanic: an Observer whose Acquired (and Released) panics. Acquire
// still returns its lease (before the fix the panic left the caller without it, renewed
// until the context ended) and Release its result; the panic is logged once.
// Not parallel: it captures the standard logger.
func TestObserverAcquiredPanic(t *testing.T) {
	e := newEnv(t)
	tap := tapLog(t)
	for _, k := range lockKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			key := "obs-panic-" + k.name
			mark := "observer bug " + k.name
			obs := lockcore.WithObserver(lockcore.Observer{
				Acquired: func(context.Context, lockcore.AcquireEvent) { panic(mark + " (acquired)") },
				Released: func(context.Context, lockcore.LeaseEvent) { panic(mark + " (released)") },
			})
			a := k.open(t, e, "a", obs)
			var (
				lease   *lockcore.Lease
				release func(context.Context) error
				err     error
			)
			if p := catch(func() { lease, release, err = a(ctx, key) }); p != nil {
				t.Fatalf("Acquire panicked with the observer's panic: %v", p)
			}
			if err != nil {
				t.Fatal(err)
			}
			if lease.Remaining() <= 0 {
				t.Fatal("the lease returned has no validity")
			}
			if p := catch(func() { err = release(ctx) }); p != nil {
				t.Fatalf("Release panicked with the observer's panic: %v", p)
			}
			if err != nil {
				t.Fatalf("release: %v", err)
			}
			assertFree(t, ctx, k.open(t, e, "b"), key)
			for _, ev := range []string{"acquired", "released"} {
				if n := tap.count(fmt.Sprintf("%s (%s)", mark, ev)); n != 1 {
					t.Errorf("the observer's %s panic was logged %d times, want once", ev, n)
				}
			}
		})
	}
	t.Run("AcquireAll", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 30*time.Second)
		obs := lockcore.WithObserver(lockcore.Observer{
			Acquired: func(context.Context, lockcore.AcquireEvent) { panic("observer bug (all)") },
		})
		a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", obs)...)
		var (
			ml  *lockcore.MultiLease
			err error
		)
		keys := []string{"all-1", "all-2"}
		if p := catch(func() { ml, err = a.AcquireAll(ctx, keys) }); p != nil {
			t.Fatalf("AcquireAll panicked with the observer's panic: %v", p)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := ml.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b := lockKinds()[0].open(t, e, "b")
		for _, key := range keys {
			assertFree(t, ctx, b, key)
		}
		if n := tap.count("observer bug (all)"); n != len(keys) {
			t.Errorf("the observer's panics were logged %d times, want %d", n, len(keys))
		}
	})
}

// TestObserverLeaseLostPanic: an Observer whose LeaseLost panics, called on the lease's
// heartbeat goroutine when a force-release ends the lease. Before the fix the panic
// ended the test binary; now it is logged and the lease reports its loss as usual.
// Not parallel: it captures the standard logger.
func TestObserverLeaseLostPanic(t *testing.T) {
	e := newEnv(t)
	tap := tapLog(t)
	ctx := ctxT(t, 30*time.Second)
	called := make(chan struct{})
	var once sync.Once
	obs := lockcore.WithObserver(lockcore.Observer{
		LeaseLost: func(context.Context, lockcore.LeaseEvent) {
			once.Do(func() { close(called) })
			panic("observer bug (lease lost)")
		},
	})
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("a", obs, lockcore.WithHeartbeat(50*time.Millisecond))...)
	l, err := m.Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inspector(t, e).ForceRelease(ctx, "lost", lockcore.ForceOptions{Actor: "test", Reason: "provoke a lease loss"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-called:
	case <-ctx.Done():
		t.Fatal("the heartbeat never reported the lease lost")
	}
	<-l.Done()
	if !errors.Is(l.Err(), lockcore.ErrLeaseLost) {
		t.Fatalf("lease ended with %v, want ErrLeaseLost", l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("release of the lost lease: %v", err)
	}
	if n := tap.count("observer bug (lease lost)"); n != 1 {
		t.Errorf("the observer's panic was logged %d times, want once", n)
	}
	// The client still works.
	l2, err := m.Acquire(ctx, "lost", lockcore.NoWait())
	if err != nil {
		t.Fatal(err)
	}
	_ = l2.Release(ctx)
}
