package lockcore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// A Mutex holder that entered by a handoff is shown as "ticket N" (no owner recorded)
// until its first heartbeat writes its owner; the lease is the same before and after.
// A force-release pinned to what Show printed ("ticket N" with its token) must end that
// lease, not fail with ErrNotHeld because the holder heartbeated meanwhile.
func TestForceReleaseMutexTicketIDAfterHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b", lockcore.WithHeartbeat(0))...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcore.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	in := inspector(t, e)
	waitFor(t, 10*time.Second, "waiter", func() bool {
		return len(showOne(t, ctx, in, "k", lockcore.ShowOptions{}).Waiters) == 1
	})
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	seen := showOne(t, ctx, in, "k", lockcore.ShowOptions{})
	if seen.Holder == nil || seen.Holder.LeaseID != "ticket 2" {
		t.Fatalf("holder after handoff %+v, want lease id \"ticket 2\"", seen.Holder)
	}
	if err := lb.Renew(ctx); err != nil { // the holder's heartbeat records its owner
		t.Fatal(err)
	}
	rec, err := in.ForceRelease(ctx, "k", lockcore.ForceOptions{Actor: "ops", Reason: "stuck",
		LeaseID: seen.Holder.LeaseID, Token: seen.Fence.Token})
	if err != nil {
		t.Fatalf("force-release of the lease Show printed (%s, token %d), still current: %v", seen.Holder.LeaseID, seen.Fence.Token, err)
	}
	if rec.Token.Token != lb.Token() || rec.LeaseID != lb.ID() {
		t.Fatalf("record %+v, lease %s token %d", rec, lb.ID(), lb.Token())
	}
	if err := lb.Renew(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("renew after force-release: %v, want ErrLeaseLost", err)
	}
}
