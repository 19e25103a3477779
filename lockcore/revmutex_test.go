package lockcore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// isRenew matches a Mutex heartbeat: the only write that sets hUntil from the served
// ticket (SET hFor = serving).
func isRenew(in *dynamodb.UpdateItemInput) bool {
	u := aws.ToString(in.UpdateExpression)
	return strings.Contains(u, "ADD") && in.ReturnValues == "ALL_NEW" && !strings.Contains(u, "REMOVE")
}

// Wall-clock takeover: a renewal whose first request timed out (and was retried) lands
// late, after a later renewal. Its SET hUntil = (its send time + lease) moves the
// recorded lease end back, so a waiter skips the holder at that older end + skew while
// the holder's own validity (from its later renewal) still runs: two holders.
func TestMutexLateRenewCopyDoesNotMoveLeaseEndBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30e9)
	const lease = 3 * time.Second
	skew := lockcore.WithTakeover(lockcore.WallClockTakeover(100 * time.Millisecond))
	lw := &lateWrite{DynamoDB: e.db, match: isRenew}
	a, _ := lockcore.NewMutex(lw, e.locks, fast("a", skew, lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b", skew, lockcore.WithHeartbeat(0))...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lw.mu.Lock()
	lw.armed = true
	lw.mu.Unlock()
	if err := la.Renew(ctx); err != nil { // first request held back, the retry lands
		t.Fatal(err)
	}
	if lw.held == nil {
		t.Fatal("no renewal held back")
	}
	time.Sleep(lease / 2)
	if err := la.Renew(ctx); err != nil { // a later heartbeat
		t.Fatal(err)
	}
	if err := lw.release(ctx); err != nil { // the old copy lands now
		t.Logf("late copy: %v", err)
	}
	lb, err := b.Acquire(ctx, "k", lockcore.Wait(lockcore.WaitUpTo(lease)))
	rem := la.Remaining()
	if err == nil {
		defer lb.Release(ctx)
		if rem > 0 {
			t.Fatalf("b acquired while a's lease still has %v by a's own clock (same clocks, skew 100ms)", rem)
		}
	}
	_ = la.Release(ctx)
}

// The renewal keeps a later recorded lease end (here: the handoff from a holder with a
// longer lease) instead of failing or moving it back.
func TestMutexRenewKeepsLaterRecordedLeaseEnd(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30e9)
	skew := lockcore.WithTakeover(lockcore.WallClockTakeover(100 * time.Millisecond))
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", skew, lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b", skew, lockcore.WithHeartbeat(0))...)
	la, err := a.Acquire(ctx, "k", lockcore.LeaseDuration(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcore.Lease, 1)
	go func() {
		lb, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	time.Sleep(300 * time.Millisecond)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	before, _ := b.Get(ctx, "k")
	if err := lb.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	after, _ := b.Get(ctx, "k")
	if after.Holder.Until.Before(before.Holder.Until) || after.Holder.Rev <= before.Holder.Rev || after.Holder.Owner != "b" {
		t.Fatalf("renew moved hUntil %v -> %v, rev %d -> %d, owner %q", before.Holder.Until, after.Holder.Until, before.Holder.Rev, after.Holder.Rev, after.Holder.Owner)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
