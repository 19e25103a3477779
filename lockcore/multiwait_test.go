package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// While AcquireAll waits for a key, it holds no key ordered after it: a caller that holds
// that key and then waits for a later one (nested acquisition in the canonical order, or
// another AcquireAll) would otherwise wait for the set, which waits for it — a deadlock.
// (Guards any future AcquireAll that takes later keys early, e.g. concurrently: such a
// version must give them back before it waits.)
func TestAcquireAllHoldsNoLaterKeyWhileItWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	c, _ := lockcore.NewMutex(e.db, e.locks, fast("c")...)
	l2, err := c.Acquire(ctx, "g2")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan acquireResult, 1)
	go func() {
		ml, err := a.AcquireAll(ctx, []string{"g1", "g2", "g3"}, lockcore.WaitUpTo(20*time.Second))
		done <- acquireResult{ml, err}
	}()
	waitLockQueued(t, ctx, e, "g2") // a holds g1 and waits for g2
	// c, holding g2, now wants g3: a must not hold it.
	l3, err := c.Acquire(ctx, "g3", lockcore.WaitUpTo(5*time.Second))
	if err != nil {
		t.Fatalf("c waiting for g3 while a waits for c's g2: %v", err)
	}
	select {
	case r := <-done:
		t.Fatalf("AcquireAll returned while c holds g2 and g3: %v", r.err)
	default:
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { _ = r.ml.Release(context.Background()) }()
	if n := len(r.ml.Leases()); n != 3 {
		t.Fatalf("%d leases, want 3", n)
	}
	// c's tokens came first on g2 and g3: a's are later.
	if r.ml.Token("g2") <= l2.Token() || r.ml.Token("g3") <= l3.Token() {
		t.Fatalf("tokens g2 %v (c's %v), g3 %v (c's %v): not later", r.ml.Token("g2"), l2.Token(), r.ml.Token("g3"), l3.Token())
	}
}
