package lockcore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// offsetClock is the system clock shifted by a fixed offset.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }

func inspector(t *testing.T, e *env, opts ...lockcore.InspectorOption) *lockcore.Inspector {
	t.Helper()
	in, err := lockcore.NewInspector(e.db, e.locks, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func showOne(t *testing.T, ctx context.Context, in *lockcore.Inspector, key string, opts lockcore.ShowOptions) lockcore.Lock {
	t.Helper()
	locks, err := in.Show(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 {
		t.Fatalf("Show(%q, %+v): %d locks, want 1: %+v", key, opts, len(locks), locks)
	}
	return locks[0]
}

func TestInspectMutex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("worker-a")...)
	before := time.Now()
	l, err := m.Acquire(ctx, "sku#GPU", lockcore.Data([]byte("ord-1")))
	if err != nil {
		t.Fatal(err)
	}
	in := inspector(t, e)
	got := showOne(t, ctx, in, "sku#GPU", lockcore.ShowOptions{})
	if got.Strategy != lockcore.StrategyMutex || got.State != lockcore.LockHeld || got.Namespace != "lock" {
		t.Fatalf("lock = %+v, want a held mutex in namespace lock", got)
	}
	h := got.Holder
	if h == nil || h.Owner != "worker-a" || h.LeaseID != l.ID() || h.Lease != 3*time.Second {
		t.Fatalf("holder = %+v, want worker-a with lease %s", h, l.ID())
	}
	// Until moves with every heartbeat; acquiredAt stays.
	if h.AcquiredAt.Before(before.Add(-time.Second)) || h.Until.Sub(h.AcquiredAt) < 3*time.Second || h.Until.After(time.Now().Add(4*time.Second)) {
		t.Fatalf("acquired %v until %v", h.AcquiredAt, h.Until)
	}
	if got.Fence.Token != l.Token() || got.Fence.Epoch != l.Token().Epoch() || got.Fence.Seq != 1 || got.Fence.Epoch < 1 {
		t.Fatalf("fence = %+v, lease token %d", got.Fence, l.Token())
	}
	if got.Revision < 1 || string(got.Data) != "ord-1" {
		t.Fatalf("revision %d data %q", got.Revision, got.Data)
	}
	// An hour later by the inspector's clock the lease is abandoned (nobody took it over).
	later := inspector(t, e, lockcore.InspectClock(offsetClock{time.Hour}))
	if st := showOne(t, ctx, later, "sku#GPU", lockcore.ShowOptions{}).State; st != lockcore.LockAbandoned {
		t.Fatalf("an hour later: state %s, want abandoned", st)
	}
	// The skew allowance counts: 5s ahead is 2s past the lease end, within a 10s allowance.
	near := inspector(t, e, lockcore.InspectClock(offsetClock{5 * time.Second}), lockcore.InspectSkew(10*time.Second))
	if st := showOne(t, ctx, near, "sku#GPU", lockcore.ShowOptions{}).State; st != lockcore.LockHeld {
		t.Fatalf("within the skew allowance: state %s, want held", st)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got = showOne(t, ctx, in, "sku#GPU", lockcore.ShowOptions{Strategy: lockcore.StrategyMutex, Namespace: "lock"})
	if got.State != lockcore.LockReleased || got.Holder != nil || got.Fence.Token != l.Token() {
		t.Fatalf("after release: %+v", got)
	}
	// Errors: unknown key, bad arguments.
	if _, err := in.Show(ctx, "sku#NONE", lockcore.ShowOptions{}); !errors.Is(err, lockcore.ErrLockNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := in.Show(ctx, "sku#GPU", lockcore.ShowOptions{Namespace: "a#b"}); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("bad namespace: %v", err)
	}
	if _, err := in.Show(ctx, "turnstile#fence#0001", lockcore.ShowOptions{}); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("reserved key: %v", err)
	}
	if _, err := in.Show(ctx, "sku#GPU", lockcore.ShowOptions{Strategy: "semaphore"}); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Fatalf("bad strategy: %v", err)
	}
	if _, err := lockcore.NewInspector(nil, e.locks); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Fatalf("nil db: %v", err)
	}
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestInspectTicketWaiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewTicketLock(e.db, e.locks, fast("a")...)
	la, err := a.Acquire(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, owner := range []string{"b", "c"} {
		w, _ := lockcore.NewTicketLock(e.db, e.locks, fast(owner)...)
		if i == 1 {
			in := inspector(t, e)
			waitFor(t, 10*time.Second, "first waiter", func() bool {
				l, err := in.Show(ctx, "hot", lockcore.ShowOptions{})
				return err == nil && len(l[0].Waiters) == 1
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := w.Acquire(wctx, "hot"); err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	in := inspector(t, e)
	var got lockcore.Lock
	waitFor(t, 10*time.Second, "two waiters", func() bool {
		got = showOne(t, ctx, in, "hot", lockcore.ShowOptions{Strategy: lockcore.StrategyTicket})
		return len(got.Waiters) == 2
	})
	if got.State != lockcore.LockHeld || got.Holder == nil || got.Holder.LeaseID != "ticket 1" || got.Holder.Ticket != 1 {
		t.Fatalf("holder: %+v %+v", got.State, got.Holder)
	}
	if got.Fence.Token != la.Token() || got.Fence.Seq != 1 {
		t.Fatalf("fence %+v, lease token %d", got.Fence, la.Token())
	}
	for i, w := range got.Waiters {
		if w.Position != i+1 || w.Ticket != int64(i+2) || w.LeaseID != fmt.Sprintf("ticket %d", i+2) || w.Owner != "" {
			t.Fatalf("waiter %d = %+v", i, w)
		}
	}
	if got.Tickets == nil || got.Tickets.Serving != 1 || got.Tickets.Next != 3 {
		t.Fatalf("counters %+v", got.Tickets)
	}
	cancel()
	wg.Wait()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestInspectQueueWaiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewQueue(e.db, e.locks, fast("a")...)
	la, err := a.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := lockcore.NewQueue(e.db, e.locks, fast("b")...)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if l, err := b.Acquire(wctx, "q"); err == nil {
			_ = l.Release(context.Background())
		}
	}()
	in := inspector(t, e)
	var got lockcore.Lock
	waitFor(t, 10*time.Second, "queue waiter", func() bool {
		got = showOne(t, ctx, in, "q", lockcore.ShowOptions{Namespace: "queue"})
		return len(got.Waiters) == 1
	})
	if got.Strategy != lockcore.StrategyQueue || got.State != lockcore.LockHeld || got.Holder.Owner != "a" ||
		got.Holder.LeaseID != la.ID() || got.Holder.Ticket != 1 || got.Fence.Token != la.Token() {
		t.Fatalf("queue: %+v holder %+v", got, got.Holder)
	}
	if w := got.Waiters[0]; w.Owner != "b" || w.Ticket != 2 || w.Position != 1 || w.Until.IsZero() || w.Abandoned {
		t.Fatalf("waiter %+v", w)
	}
	cancel()
	<-done
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "empty queue", func() bool {
		got = showOne(t, ctx, in, "q", lockcore.ShowOptions{})
		return got.State == lockcore.LockReleased && len(got.Waiters) == 0
	})
	if got.Tickets.Next != 2 {
		t.Fatalf("counter %+v", got.Tickets)
	}
}

func TestInspectItem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	l, err := il.Acquire(ctx, dataKey("SKU#apple"))
	if err != nil {
		t.Fatal(err)
	}
	in := inspector(t, e)
	got, err := in.ShowItem(ctx, e.data, dataKey("SKU#apple"), lockcore.ItemAttributes{})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != lockcore.LockHeld || got.Holder.Owner != "a" || got.Holder.LeaseID != l.ID() || got.Fence.Token != l.Token() || !got.Exists {
		t.Fatalf("item lock %+v holder %+v", got, got.Holder)
	}
	if got.Key["pk"] != "SKU#apple" {
		t.Fatalf("key %v", got.Key)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ = in.ShowItem(ctx, e.data, dataKey("SKU#apple"), lockcore.ItemAttributes{}); got.State != lockcore.LockReleased || got.Holder != nil {
		t.Fatalf("after release %+v", got)
	}
	if _, err := in.ShowItem(ctx, e.data, nil, lockcore.ItemAttributes{}); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
}

func TestListPaginated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("m", lockcore.WithHeartbeat(0))...)
	want := map[string]lockcore.LockState{}
	for i := range 7 {
		key := fmt.Sprintf("k%02d", i)
		l, err := m.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want[key+"/lock/mutex"] = lockcore.LockHeld
		if i%2 == 0 {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			want[key+"/lock/mutex"] = lockcore.LockReleased
		}
	}
	tl, _ := lockcore.NewTicketLock(e.db, e.locks, fast("t")...)
	lt, err := tl.Acquire(ctx, "k01")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lt.Release(ctx) }()
	want["k01/lock/ticket"] = lockcore.LockHeld
	q, _ := lockcore.NewQueue(e.db, e.locks, fast("q")...)
	lq, err := q.Acquire(ctx, "k02", lockcore.Namespace("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lq.Release(ctx) }()
	want["k02/jobs/queue"] = lockcore.LockHeld

	in := inspector(t, e)
	got := map[string]lockcore.LockState{}
	opts := lockcore.ListOptions{PageSize: 2, Consistent: true}
	pages := 0
	for {
		page, err := in.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, l := range page.Locks {
			id := l.Key + "/" + l.Namespace + "/" + string(l.Strategy)
			if _, dup := got[id]; dup {
				t.Fatalf("%s listed twice", id)
			}
			got[id] = l.State
		}
		if page.Next == "" {
			break
		}
		opts.PageToken = page.Next
	}
	if pages < 4 {
		t.Fatalf("%d pages of at most 2 rows, want at least 4", pages)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listed %v\nwant   %v", got, want)
	}
	// Filters, through Each.
	var held []string
	err = in.Each(ctx, lockcore.ListOptions{States: []lockcore.LockState{lockcore.LockHeld}, Strategies: []lockcore.Strategy{lockcore.StrategyMutex}},
		func(l lockcore.Lock) error { held = append(held, l.Key); return nil })
	slices.Sort(held)
	if err != nil || fmt.Sprint(held) != "[k01 k03 k05]" {
		t.Fatalf("held mutexes %v, %v", held, err)
	}
	// Abandoned: by a clock an hour ahead every held lease with a recorded lease end is.
	later := inspector(t, e, lockcore.InspectClock(offsetClock{time.Hour}))
	var abandoned []string
	err = later.Each(ctx, lockcore.ListOptions{States: []lockcore.LockState{lockcore.LockAbandoned}},
		func(l lockcore.Lock) error { abandoned = append(abandoned, l.Key+"/"+string(l.Strategy)); return nil })
	if err != nil || len(abandoned) != 4 { // 3 mutexes + the queue; ticket rows record no lease end
		t.Fatalf("abandoned %v, %v", abandoned, err)
	}
	if _, err := in.List(ctx, lockcore.ListOptions{PageToken: "garbage"}); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Fatalf("bad token: %v", err)
	}
	if _, err := in.List(ctx, lockcore.ListOptions{States: []lockcore.LockState{"stuck"}}); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Fatalf("bad state: %v", err)
	}
}

// guardedPut writes a data item in a transaction guarded by the lease.
func guardedPut(ctx context.Context, e *env, guard types.TransactWriteItem, l *lockcore.Lease, v string) error {
	_, err := e.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		guard,
		{Put: &types.Put{TableName: aws.String(e.data), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "doc"}, "sk": &types.AttributeValueMemberS{Value: "STOCK"},
			"v": &types.AttributeValueMemberS{Value: v}}}},
	}})
	return lockcore.GuardedWriteError(err, 0, l)
}

// TestForceReleaseMutexRacingHolder force-releases a live holder that heartbeats every
// 50ms and writes under GuardCheck in a loop: the holder's next guarded write, renew and
// release fail with ErrLeaseLost, the next holder's token exceeds the ended one, and the
// audit record is on the row and in the history.
func TestForceReleaseMutexRacingHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("holder", lockcore.WithHeartbeat(50*time.Millisecond))...)
	l, err := m.Acquire(ctx, "sku#GPU")
	if err != nil {
		t.Fatal(err)
	}
	guard, err := m.GuardCheck(l)
	if err != nil {
		t.Fatal(err)
	}
	// The holder writes under its lease until a write fails.
	writes := make(chan error, 1)
	var n int
	go func() {
		for {
			n++
			if err := guardedPut(ctx, e, guard, l, fmt.Sprint(n)); err != nil {
				writes <- err
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // several heartbeats and writes
	in := inspector(t, e)
	if _, err := in.ForceRelease(ctx, "sku#GPU", lockcore.ForceOptions{Actor: "alice", Reason: "stuck", LeaseID: "someone-else#1"}); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("force-release of a lease that is not current: %v, want ErrNotHeld", err)
	}
	rec, err := in.ForceRelease(ctx, "sku#GPU", lockcore.ForceOptions{Actor: "alice", Reason: "holder stuck on a hung API call"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.LeaseID != l.ID() || rec.Owner != "holder" || rec.Token.Token != l.Token() || rec.Actor != "alice" || rec.At.IsZero() {
		t.Fatalf("record %+v, lease %s token %d", rec, l.ID(), l.Token())
	}
	// The holder's next guarded write fails with ErrLeaseLost.
	select {
	case err := <-writes:
		if !errors.Is(err, lockcore.ErrLeaseLost) {
			t.Fatalf("guarded write after force-release: %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's guarded writes kept succeeding after the force-release")
	}
	if err := guardedPut(ctx, e, guard, l, "late"); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("late guarded write: %v, want ErrLeaseLost", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("renew after force-release: %v, want ErrLeaseLost", err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not done after its renewal failed")
	}
	if err := l.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("release after force-release: %v, want ErrLeaseLost", err)
	}
	// Nothing is held now; the next holder gets a token above anything the old one had.
	if _, err := in.ForceRelease(ctx, "sku#GPU", lockcore.ForceOptions{Actor: "alice", Reason: "again"}); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("second force-release: %v, want ErrNotHeld", err)
	}
	m2, _ := lockcore.NewMutex(e.db, e.locks, fast("next")...)
	l2, err := m2.Acquire(ctx, "sku#GPU", lockcore.Wait(lockcore.NoWait()))
	if err != nil {
		t.Fatal(err)
	}
	// The force-release skips the served ticket: every later ticket's token is above it.
	if l2.Token() <= l.Token() {
		t.Fatalf("next token %d, want above %d", l2.Token(), l.Token())
	}
	got := showOne(t, ctx, in, "sku#GPU", lockcore.ShowOptions{})
	if got.Holder == nil || got.Holder.Owner != "next" || got.LastForced == nil || got.LastForced.ID != rec.ID ||
		got.LastForced.Reason != rec.Reason || got.LastForced.LeaseID != l.ID() {
		t.Fatalf("show after force-release: %+v, last forced %+v", got, got.LastForced)
	}
	if len(got.Audit) != 1 || got.Audit[0].ID != rec.ID || got.Audit[0].Actor != "alice" || got.Audit[0].Token.Token != l.Token() ||
		got.Audit[0].Strategy != lockcore.StrategyMutex || got.Audit[0].Namespace != "lock" || got.Audit[0].Owner != "holder" {
		t.Fatalf("audit history %+v", got.Audit)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Audit rows are not locks: a listing shows one lock.
	page, err := in.List(ctx, lockcore.ListOptions{})
	if err != nil || len(page.Locks) != 1 {
		t.Fatalf("list: %+v, %v", page.Locks, err)
	}
	// Arguments.
	for _, o := range []lockcore.ForceOptions{{Reason: "x"}, {Actor: "x"}, {Actor: "x", Reason: "x", Strategy: lockcore.StrategyQueue}} {
		if _, err := in.ForceRelease(ctx, "sku#GPU", o); !errors.Is(err, lockcore.ErrInvalidOption) {
			t.Fatalf("ForceRelease(%+v): %v, want ErrInvalidOption", o, err)
		}
	}
}

// TestForceReleaseTicket ends a TicketLock holder's lease: its waiter enters with a
// higher token, and the old holder's guarded write, renew and release fail.
func TestForceReleaseTicket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewTicketLock(e.db, e.locks, fast("a")...)
	la, err := a.Acquire(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := lockcore.NewTicketLock(e.db, e.locks, fast("b")...)
	got := make(chan *lockcore.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "hot")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	in := inspector(t, e)
	waitFor(t, 10*time.Second, "waiter", func() bool {
		return len(showOne(t, ctx, in, "hot", lockcore.ShowOptions{}).Waiters) == 1
	})
	if _, err := in.ForceRelease(ctx, "hot", lockcore.ForceOptions{Strategy: lockcore.StrategyTicket, Actor: "bob", Reason: "deadlocked", LeaseID: "ticket 1"}); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Fatalf("a \"ticket N\" lease id without its token: %v, want ErrInvalidOption", err)
	}
	rec, err := in.ForceRelease(ctx, "hot", lockcore.ForceOptions{Strategy: lockcore.StrategyTicket, Actor: "bob", Reason: "deadlocked",
		LeaseID: "ticket 1", Token: showOne(t, ctx, in, "hot", lockcore.ShowOptions{}).Fence.Token})
	if err != nil {
		t.Fatal(err)
	}
	if rec.LeaseID != "ticket 1" || rec.Token.Token != la.Token() {
		t.Fatalf("record %+v, token %d", rec, la.Token())
	}
	var lb *lockcore.Lease
	select {
	case lb = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not enter after the force-release")
	}
	if lb == nil {
		t.FailNow()
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("waiter token %d, want above %d", lb.Token(), la.Token())
	}
	guard, _ := a.GuardCheck(la)
	if err := guardedPut(ctx, e, guard, la, "a"); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("old holder's guarded write: %v, want ErrLeaseLost", err)
	}
	if err := la.Renew(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("old holder's renew: %v", err)
	}
	if err := la.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("old holder's release: %v", err)
	}
	show := showOne(t, ctx, in, "hot", lockcore.ShowOptions{Strategy: lockcore.StrategyTicket})
	if show.Holder == nil || show.Holder.Ticket != 2 || show.LastForced == nil || show.LastForced.Actor != "bob" || len(show.Audit) != 1 {
		t.Fatalf("show %+v holder %+v forced %+v", show, show.Holder, show.LastForced)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ForceRelease(ctx, "hot", lockcore.ForceOptions{Strategy: lockcore.StrategyTicket, Actor: "bob", Reason: "x"}); !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("force-release of a free ticket lock: %v", err)
	}
}

// A "ticket N" lease id names a ticket of one life of a row: ticket numbers start again
// when TTL removes the row. A force-release pinned to what Show reported must not end the
// next life's holder of the same number (found by an outside review).
func TestForceReleaseTicketOfAnEarlierLife(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewTicketLock(e.db, e.locks, fast("a")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	in := inspector(t, e)
	seen := showOne(t, ctx, in, "k", lockcore.ShowOptions{Strategy: lockcore.StrategyTicket}) // ticket 1, epoch 1
	_ = la.Release(ctx)
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "lock#ticket"}}}); err != nil {
		t.Fatal(err) // as TTL does
	}
	b, _ := lockcore.NewTicketLock(e.db, e.locks, fast("b")...)
	lb, err := b.Acquire(ctx, "k") // ticket 1 again, epoch 2
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lb.Release(ctx) }()
	_, err = in.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: lockcore.StrategyTicket, Actor: "ops", Reason: "crashed",
		LeaseID: seen.Holder.LeaseID, Token: seen.Fence.Token})
	if !errors.Is(err, lockcore.ErrNotHeld) {
		t.Fatalf("force-release pinned to %s (token %d) of the previous life: %v, want ErrNotHeld (live lease %d)",
			seen.Holder.LeaseID, seen.Fence.Token, err, lb.Token())
	}
	if err := lb.Renew(ctx); err != nil {
		t.Fatalf("the live lease was ended: %v", err)
	}
}

// A lock table may hold items that are not locks (an application's own rows, data items
// an ItemLocker locks there), with the same key shape and even sort keys that look like
// a lock's. List classified rows by sort key alone: every such item was listed as a
// released lock (issue 26: 1,500 of 2,400 foreign rows), and Show took a foreign row
// among a queue's ticket rows for its holder. Locks are recognised by the attributes
// lockcore always writes on their rows; everything else is not a lock.
func TestListSkipsForeignItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	want := map[string]lockcore.LockState{} // key/namespace/strategy → state
	// Real lock rows, of every layout.
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("m", lockcore.WithHeartbeat(0))...)
	lm, err := m.Acquire(ctx, "m-held", lockcore.Data([]byte("ord-1")))
	if err != nil {
		t.Fatal(err)
	}
	want["m-held/lock/mutex"] = lockcore.LockHeld
	for _, k := range []string{"m-rel", "m-forced"} {
		l, err := m.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if k == "m-rel" {
			err = l.Release(ctx)
		} else {
			_, err = inspector(t, e).ForceRelease(ctx, k, lockcore.ForceOptions{Actor: "ops", Reason: "drill", LeaseID: l.ID()})
		}
		if err != nil {
			t.Fatal(err)
		}
		want[k+"/lock/mutex"] = lockcore.LockReleased
	}
	if err := (oldClient{db: e.db, table: e.locks, owner: "old"}).acquire(ctx, "m-old", "old#1"); err != nil {
		t.Fatal(err) // a row in the previous release's format
	}
	want["m-old/lock/mutex"] = lockcore.LockHeld
	tl, _ := lockcore.NewTicketLock(e.db, e.locks, fast("t")...)
	lt, err := tl.Acquire(ctx, "t-held")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lt.Release(ctx) }()
	want["t-held/lock/ticket"] = lockcore.LockHeld
	lr, err := tl.Acquire(ctx, "t-rel")
	if err != nil {
		t.Fatal(err)
	}
	if err := lr.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want["t-rel/lock/ticket"] = lockcore.LockReleased
	// Rows made by a ticket request withdrawn before it landed: tombstones only.
	for _, c := range []struct {
		key string
		st  lockcore.Strategy
	}{{"m-bare", lockcore.StrategyMutex}, {"t-bare", lockcore.StrategyTicket}} {
		cctx, cancel := context.WithCancel(ctx)
		db := &unsentTake{DynamoDB: e.db, between: cancel}
		if c.st == lockcore.StrategyMutex {
			bm, _ := lockcore.NewMutex(db, e.locks, fast("b")...)
			_, err = bm.Acquire(cctx, c.key)
		} else {
			bt, _ := lockcore.NewTicketLock(db, e.locks, fast("b")...)
			_, err = bt.Acquire(cctx, c.key)
		}
		cancel()
		if err == nil {
			t.Fatalf("%s: Acquire succeeded without its ticket request", c.key)
		}
		want[c.key+"/lock/"+string(c.st)] = lockcore.LockReleased
	}
	q, _ := lockcore.NewQueue(e.db, e.locks, fast("q")...)
	lq, err := q.Acquire(ctx, "q-held", lockcore.Namespace("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lq.Release(ctx) }()
	want["q-held/jobs/queue"] = lockcore.LockHeld
	lq2, err := q.Acquire(ctx, "q-rel", lockcore.Namespace("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lq2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want["q-rel/jobs/queue"] = lockcore.LockReleased
	// Data items an ItemLocker locks, kept in the lock table with lock-like sort keys.
	il, _ := lockcore.NewItemLocker(e.db, e.locks, fast("i")...)
	for i, sk := range []string{"lock", "lock#ticket", "jobs#counter"} {
		l, err := il.Acquire(ctx, map[string]types.AttributeValue{"pk": sv(fmt.Sprintf("item-%d", i)), "sk": sv(sk)})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Foreign items: many, with the lock table's key shape and sort keys that read as
	// every kind of lock row; some carry attributes a lock row has, but not all of them.
	foreign := []map[string]types.AttributeValue{
		{"pk": sv("q-held"), "sk": sv("jobs#t#0"), "note": sv("sorts before the queue's ticket rows")},
		{"pk": sv("q-held"), "sk": sv("jobs#t#zzz"), "ticket": nv(1), "leaseId": sv("x#1"), "rev": nv(1)},
		{"pk": sv("m-held"), "sk": sv("lock#audit#mutex#20260101T000000.000Z#f"), "note": sv("not an audit row")},
		{"pk": sv("m-held"), "sk": sv("other"), "state": sv("released"), "rev": nv(1)},
		{"pk": sv("f-fair"), "sk": sv("lock"), "state": sv("fair")},
		{"pk": sv("f-held"), "sk": sv("lock"), "state": sv("held"), "leaseId": nv(7), "rev": nv(1)},
		{"pk": sv("f-bare"), "sk": sv("lock"), "w#note": sv("hello")},
		{"pk": sv("f-ticket"), "sk": sv("lock#ticket"), "next": nv(3)},
		{"pk": sv("f-counter"), "sk": sv("jobs#counter"), "next": sv("7")},
		{"pk": sv("f-empty"), "sk": sv("#ticket"), "next": nv(1), "serving": nv(1), "rev": nv(1), "life": sv("l")},
	}
	sks := []string{"lock", "STOCK", "lock#ticket", "jobs#counter", "jobs#resv", "jobs#t#00000000000000000001", "lock#audit#mutex#x#y"}
	states := []string{"released", "held", "fair", "PAID"}
	for i := range 400 {
		foreign = append(foreign, map[string]types.AttributeValue{
			"pk": sv(fmt.Sprintf("order#%04d", i)), "sk": sv(sks[i%len(sks)]),
			"state": sv(states[i%len(states)]), "owner": sv("shop"), "qty": nv(int64(i)),
		})
	}
	for i := 0; i < len(foreign); i += 25 {
		var reqs []types.WriteRequest
		for _, it := range foreign[i:min(i+25, len(foreign))] {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		}
		in := map[string][]types.WriteRequest{e.locks: reqs}
		for len(in) > 0 {
			out, err := e.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: in})
			if err != nil {
				t.Fatal(err)
			}
			in = out.UnprocessedItems
		}
	}

	in := inspector(t, e)
	for _, size := range []int32{0, 7} {
		got := map[string]lockcore.LockState{}
		err := in.Each(ctx, lockcore.ListOptions{PageSize: size, Consistent: true}, func(l lockcore.Lock) error {
			id := l.Key + "/" + l.Namespace + "/" + string(l.Strategy)
			if _, dup := got[id]; dup {
				t.Errorf("%s listed twice", id)
			}
			got[id] = l.State
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var extra, wrong []string
		for id, st := range got {
			if w, ok := want[id]; !ok {
				extra = append(extra, id+":"+string(st))
			} else if w != st {
				wrong = append(wrong, id+":"+string(st))
			}
		}
		slices.Sort(extra)
		if len(got) != len(want) || len(extra) > 0 || len(wrong) > 0 {
			t.Fatalf("page size %d: listed %d locks, want the %d lock rows; %d not locks (first: %v), wrong state %v\nwant %v",
				size, len(got), len(want), len(extra), extra[:min(len(extra), 8)], wrong, want)
		}
	}
	// Show: a queue's holder is its first ticket row, not a foreign row sorting first;
	// a lock's audit holds force-release records only.
	got := showOne(t, ctx, in, "q-held", lockcore.ShowOptions{})
	if got.Holder == nil || got.Holder.LeaseID != lq.ID() || len(got.Waiters) != 0 {
		t.Fatalf("queue q-held: holder %+v waiters %+v, want %s alone", got.Holder, got.Waiters, lq.ID())
	}
	if got = showOne(t, ctx, in, "m-held", lockcore.ShowOptions{}); got.Holder == nil || got.Holder.LeaseID != lm.ID() || len(got.Audit) != 0 {
		t.Fatalf("mutex m-held: holder %+v audit %+v", got.Holder, got.Audit)
	}
	if got = showOne(t, ctx, in, "m-forced", lockcore.ShowOptions{}); len(got.Audit) != 1 || got.Audit[0].Actor != "ops" {
		t.Fatalf("mutex m-forced: audit %+v", got.Audit)
	}
	for _, k := range []string{"order#0000", "f-fair", "f-counter", "item-0", "item-1"} {
		if locks, err := in.Show(ctx, k, lockcore.ShowOptions{}); !errors.Is(err, lockcore.ErrLockNotFound) {
			t.Errorf("Show(%q) of foreign items: %+v, %v; want ErrLockNotFound", k, locks, err)
		}
	}
}

func sv(v string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: v} }

func nv(v int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: fmt.Sprint(v)}
}

// A token is shown as its number and, when it has a row-life epoch, its parts: the raw
// epoch<<32|seq number alone (4294967297) tells an operator nothing.
func TestFenceString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f    lockcore.Fence
		want string
	}{
		{4294967297, "4294967297 (epoch 1, seq 1)"},
		{3<<32 | 17, "12884901905 (epoch 3, seq 17)"},
		{7, "7"}, // a Queue ticket, an ItemLocker's count
		{0, "0"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("Fence(%d).String() = %q, want %q", int64(c.f), got, c.want)
		}
		if got := fmt.Sprintf("%d", c.f); got != fmt.Sprint(int64(c.f)) {
			t.Errorf("%%d of Fence(%d) = %q, want the number", int64(c.f), got)
		}
	}
	if got := (lockcore.FenceInfo{Token: 4294967297, Epoch: 1, Seq: 1}).String(); got != "4294967297 (epoch 1, seq 1)" {
		t.Errorf("FenceInfo.String() = %q", got)
	}
}

// The JSON of a Lock is read by people and scripts: a lease duration as nanoseconds
// ("leaseNanos": 3000000000) and data as base64 ("b3JkLTE=") were unreadable. A lease is
// "lease": "3s" plus "leaseMs": 3000; data valid UTF-8 is the text, other data base64,
// and "dataEncoding" says which. Both read back into the same Lock.
func TestLockJSONReadable(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 1, 43, 44, 607e6, time.UTC)
	for _, c := range []struct {
		data []byte
		want []string
	}{
		{[]byte("ord-1043"), []string{`"data": "ord-1043"`, `"dataEncoding": "text"`}},
		{[]byte{0xff, 0x00, 0x01}, []string{`"data": "/wAB"`, `"dataEncoding": "base64"`}},
		{nil, nil},
	} {
		l := lockcore.Lock{Key: "sku#GPU", Namespace: "lock", Strategy: lockcore.StrategyMutex, State: lockcore.LockHeld,
			Holder: &lockcore.LockHolder{Owner: "op", LeaseID: "op#abc", AcquiredAt: at, Until: at.Add(2500 * time.Millisecond),
				Lease: 2500 * time.Millisecond},
			Fence: lockcore.FenceInfo{Token: 4294967297, Epoch: 1, Seq: 1}, Revision: 3, Data: c.data, ReadAt: at}
		b, err := json.MarshalIndent(l, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		js := string(b)
		for _, w := range append([]string{`"lease": "2.5s"`, `"leaseMs": 2500`, `"leaseId": "op#abc"`, `"token": 4294967297`}, c.want...) {
			if !strings.Contains(js, w) {
				t.Errorf("JSON lacks %s:\n%s", w, js)
			}
		}
		if strings.Contains(js, "Nanos") || (c.data == nil && strings.Contains(js, `"data`)) {
			t.Errorf("JSON:\n%s", js)
		}
		var back lockcore.Lock
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, l) {
			t.Errorf("round trip:\n got %+v %+v\nwant %+v %+v", back, back.Holder, l, l.Holder)
		}
	}
}

// A holder's lease id, as its process logs it ("orderprocessor-7f3a#yA3b_9Qz"), must be
// findable in what the Inspector shows: a TicketLock's holder and waiters, and a Mutex
// holder handed the lock (before its first heartbeat records its owner), read "ticket
// N". Their LeaseSuffix is the lease id's part after the owner.
func TestInspectLeaseSuffix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	in := inspector(t, e)
	type locker interface {
		Acquire(ctx context.Context, key string, opts ...lockcore.AcquireOption) (*lockcore.Lease, error)
	}
	tl := func(owner string) locker { l, _ := lockcore.NewTicketLock(e.db, e.locks, fast(owner)...); return l }
	mx := func(owner string) locker {
		// A long lease: a holder entering with less than half of it left renews at
		// once, which records its owner.
		l, _ := lockcore.NewMutex(e.db, e.locks, fast(owner, lockcore.WithHeartbeat(0), lockcore.WithLease(time.Minute))...)
		return l
	}
	for _, c := range []struct {
		name string
		st   lockcore.Strategy
		mk   func(string) locker
	}{{"ticket", lockcore.StrategyTicket, tl}, {"mutex", lockcore.StrategyMutex, mx}} {
		key := "suffix-" + c.name
		la, err := c.mk("a").Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lockcore.Lease, 1)
		go func() {
			lb, err := c.mk("orderprocessor-7f3a").Acquire(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- lb
		}()
		var lk lockcore.Lock
		waitFor(t, 10*time.Second, c.name+" waiter", func() bool {
			lk = showOne(t, ctx, in, key, lockcore.ShowOptions{Strategy: c.st})
			return len(lk.Waiters) == 1
		})
		if c.st == lockcore.StrategyTicket && !lk.Holder.MatchesLease(la.ID()) {
			t.Errorf("%s: holder %+v does not match its lease id %s", c.name, lk.Holder, la.ID())
		}
		w := lk.Waiters[0]
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb := <-got
		if lb == nil {
			t.FailNow()
		}
		if w.LeaseID != "ticket 2" || w.LeaseSuffix == "" || !strings.HasSuffix(lb.ID(), "#"+w.LeaseSuffix) {
			t.Errorf("%s: waiter %+v, its lease became %s", c.name, w, lb.ID())
		}
		h := showOne(t, ctx, in, key, lockcore.ShowOptions{Strategy: c.st}).Holder
		if h == nil || !h.MatchesLease(lb.ID()) || h.MatchesLease(la.ID()) ||
			(h.Owner == "" && (h.LeaseID != "ticket 2" || h.LeaseSuffix != strings.TrimPrefix(lb.ID(), "orderprocessor-7f3a#"))) ||
			(h.Owner != "" && h.LeaseID != lb.ID()) {
			t.Errorf("%s: holder handed the lock %+v, its lease id %s", c.name, h, lb.ID())
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
