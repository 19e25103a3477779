package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// Waiters' data can fill the row up to DynamoDB's 400 KB item limit. A holder that came
// in by a handoff has no hOwner recorded (the handoff removes it), so its heartbeat,
// which writes hOwner, no longer fits: it fails (ValidationException) until the lease
// runs out and waiters skip it, and every following holder fares the same while the
// queue stays full. Waiters must not use the room the holder's writes need: a take that
// leaves less gives its ticket back and waits for room. The test lowers the row size the
// Mutex reasons with to 8 KiB (the engine's limit stays), so the steps are exact and
// the rows small: the third waiter's 2000 bytes leave less than 2 KiB of the 8 KiB.
func TestMutexWaitersLeaveTheHolderRoomInTheRow(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	budget := lockcore.WithRowBudget(8 << 10)
	hb := lockcore.WithHeartbeat(0)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", budget, hb)...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lockcore.Lease
		err error
	}
	queued := make(chan string, 3)
	waitRoom := make(chan string, 3)
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := func(owner string) chan result {
		m, _ := lockcore.NewMutex(e.db, e.locks, fast(owner, budget, hb,
			lockcore.WithAfterTicketHook(func(string, int64) { notify(queued, owner) }),
			lockcore.WithWaitRoomHook(func(string) { notify(waitRoom, owner) }))...)
		got := make(chan result, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Acquire(wctx, "k", lockcore.Data(make([]byte, 2000)))
			got <- result{l, err}
		}()
		return got
	}
	next := func() (string, bool) {
		select {
		case o := <-queued:
			return o, true
		case o := <-waitRoom:
			return o, false
		case <-ctx.Done():
			t.Fatal("no waiter took a ticket or waited for room")
		}
		return "", false
	}
	rb, rc := start("b"), (chan result)(nil)
	if o, ok := next(); !ok {
		t.Fatalf("%s waits for room in a row with one waiter", o)
	}
	rc = start("c")
	if o, ok := next(); !ok {
		t.Fatalf("%s waits for room in a row with two waiters", o)
	}
	rd := start("d")
	if _, ok := next(); ok {
		row := rawMutexRow(t, e, "k")
		t.Fatalf("d queued with 2000 bytes of data: the row is now %d bytes of a row budget of 8192, "+
			"less than 2 KiB left for the holder's writes", itemSize(row))
	}
	if n := countPrefix(rawMutexRow(t, e, "k"), "d#"); n != 2 {
		t.Fatalf("d waits for room but the row holds %d data entries, want b's and c's", n)
	}
	// The lock goes on in order; d gets in once b's data has left the row.
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name string
		ch   chan result
	}{{"b", rb}, {"c", rc}, {"d", rd}} {
		r := <-w.ch
		if r.err != nil {
			t.Fatalf("%s: %v", w.name, r.err)
		}
		if err := r.l.Renew(ctx); err != nil {
			t.Fatalf("%s's heartbeat: %v", w.name, err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatalf("%s's release: %v", w.name, err)
		}
	}
}

// A take the engine refuses because the row would pass 400 KB (the waiters' data fills
// it) means the lock is busy, not a fatal error: NoWait reports it held, a waiting
// acquisition waits for room. The holder and five waiters hold 64 KiB of data each; a
// sixth 64 KiB does not fit in the engine's 400 KB.
func TestMutexFullRowTakeReportsHeld(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	big := lockcore.Data(make([]byte, 64<<10))
	slow := lockcore.WithLease(30 * time.Second) // the waiters read the 400 KB row rarely
	hb := lockcore.WithHeartbeat(0)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", slow, hb)...)
	la, err := a.Acquire(ctx, "k", big)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	queued := make(chan struct{}, 1)
	for i := range 5 {
		m, _ := lockcore.NewMutex(e.db, e.locks, fast(fmt.Sprintf("w%d", i), slow, hb,
			lockcore.WithAfterTicketHook(func(string, int64) { notify(queued, struct{}{}) }))...)
		failed := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Acquire(wctx, "k", big)
			if err != nil {
				failed <- err
				return
			}
			_ = l.Release(context.Background())
		}()
		select {
		case <-queued:
		case err := <-failed:
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("late", slow, hb)...)
	_, err = m.Acquire(ctx, "k", big, lockcore.NoWait())
	if !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("NoWait take of a busy lock whose row is full: %v, want ErrLockHeld", err)
	}
	_, err = m.Acquire(ctx, "k", big, lockcore.Wait(lockcore.WaitUpTo(50*time.Millisecond)))
	if !errors.Is(err, lockcore.ErrLockHeld) || !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("waiting take of a busy lock whose row is full: %v, want ErrLockHeld and ErrWaitTimeout", err)
	}
	cancel()
	_ = la.Release(ctx)
}

// isFreeTake matches a Mutex take of a free lock (the only write that removes the
// previous format's attributes, among them prevLease, and returns the row).
func isFreeTake(in *dynamodb.UpdateItemInput) bool {
	for _, n := range in.ExpressionAttributeNames {
		if n == "prevLease" {
			return in.ReturnValues == "ALL_NEW"
		}
	}
	return false
}

// A's take is retried after an ambiguous error (its first request held back) and the
// retry lands. A then pauses past its lease and b skips it: the skip removed a's entry,
// so the first request, landing late on the free lock, issued a new ticket under a's
// entry id. Served at once, it made serving = a's entry again: a's guarded write landed
// after b's (a's token is lower) and a's renewal revived its lost lease. (Without a
// guard, the ticket nobody holds keeps the lock for a lease.)
func TestMutexSkipLeavesTombstoneForLateTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	lw := &lateWrite{DynamoDB: e.db, match: isFreeTake, armed: true}
	a, _ := lockcore.NewMutex(lw, e.locks, fast("a", lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if lw.held == nil {
		t.Fatal("no take held back")
	}
	lb, err := b.Acquire(ctx, "k") // skips a, paused, after its lease
	if err != nil {
		t.Fatal(err)
	}
	if err := guardedPut(ctx, e, guardOf(b.GuardCheck(lb)), lb, "b"); err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lw.release(ctx); err == nil {
		t.Error("the late copy of a's take issued a ticket under a's entry id")
	}
	err = guardedPut(ctx, e, guardOf(a.GuardCheck(la)), la, "a")
	if !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("a's guarded write after b's (tokens a %d < b %d): %v, want ErrLeaseLost", la.Token(), lb.Token(), err)
	}
	mustNot(t, la.Renew(ctx), lockcore.ErrLeaseLost)
}

// rawMutexRow reads the Mutex row of key (namespace "lock") as stored.
func rawMutexRow(t *testing.T, e *env, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.locks, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}, "sk": &types.AttributeValueMemberS{Value: "lock"}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// notify sends v on ch unless its buffer is full.
func notify[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

func countPrefix(it map[string]types.AttributeValue, prefix string) int {
	n := 0
	for k := range it {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// A release whose response is lost although it landed, while the lock passes through the
// next holder (who enters and releases) before the retry: the retry finds neither its
// entry nor rel = its ticket, and the release was reported lost with an unknown outcome
// (ErrLeaseLost, and a LeaseLost event: "work may have overlapped another holder's").
// But the holder's lease was still valid by its own clock when the retry failed, and no
// waiter skips a ticket while its lease is valid: only its own release can have passed it.
func TestMutexAmbiguousReleaseSettledByValidity(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30e9)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	bAcq := make(chan struct{})
	f := &faulty{DynamoDB: e.db}
	f.landAndLose = func(in *dynamodb.UpdateItemInput) bool {
		return in.ReturnValues == types.ReturnValueNone && strings.Contains(updExpr(in), "REMOVE")
	}
	f.between = func() { <-bAcq } // b enters and releases before the retry
	var lost, released int
	a, _ := lockcore.NewMutex(f, e.locks, fast("a", lockcore.WithObserver(lockcore.Observer{
		LeaseLost: func(context.Context, lockcore.LeaseEvent) { lost++ },
		Released:  func(context.Context, lockcore.LeaseEvent) { released++ },
	}))...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(bAcq)
		lb, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
			return
		}
		if err := lb.Release(ctx); err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // b queued
	err = la.Release(ctx)
	if err != nil || lost != 0 || released != 1 {
		t.Fatalf("release landed, lease valid throughout; got err %v, lost events %d, released events %d", err, lost, released)
	}
}

// reorder holds a renewal back until a release has landed, and holds the release's
// response back until the renewal's answer came: answers arriving out of order.
type reorder struct {
	lockcore.DynamoDB
	armed    atomic.Bool
	released chan struct{} // closed when the release landed
	renewed  chan struct{} // closed when the renewal's answer came
}

func (f *reorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !f.armed.Load() {
		return f.DynamoDB.UpdateItem(ctx, in, o...)
	}
	if isRenew(in) {
		<-f.released
		out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
		close(f.renewed)
		return out, err
	}
	out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
	close(f.released)
	<-f.renewed
	return out, err
}

// A renewal racing a release on the same lease (Lease is safe for concurrent use): the
// release lands first, the renewal then fails its condition and marks the lease lost
// (Err = ErrLeaseLost, a LeaseLost event) before the release's answer comes back; the
// release then returns nil, but the lease stays reported lost: a clean release reported as
// a lost lease ("work may have overlapped another holder's").
func TestMutexRenewRacingReleaseReportsRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30e9)
	f := &reorder{DynamoDB: e.db, released: make(chan struct{}), renewed: make(chan struct{})}
	var lost, released atomic.Int32
	a, _ := lockcore.NewMutex(f, e.locks, fast("a", lockcore.WithHeartbeat(0), lockcore.WithObserver(lockcore.Observer{
		LeaseLost: func(context.Context, lockcore.LeaseEvent) { lost.Add(1) },
		Released:  func(context.Context, lockcore.LeaseEvent) { released.Add(1) },
	}))...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	f.armed.Store(true)
	renewErr := make(chan error, 1)
	go func() { renewErr <- la.Renew(ctx) }()
	time.Sleep(50 * time.Millisecond) // the renewal is on its way
	rerr := la.Release(ctx)
	t.Logf("renew: %v", <-renewErr)
	if rerr != nil || la.Err() != nil || lost.Load() != 0 || released.Load() != 1 {
		t.Fatalf("Release = %v, Err() = %v, lost events %d, released events %d; want a clean release reported as such",
			rerr, la.Err(), lost.Load(), released.Load())
	}
}

// throttleReleases answers every release (a write without return values that removes
// attributes) with throttling, without sending it.
type throttleReleases struct {
	lockcore.DynamoDB
	on atomic.Bool
}

func (f *throttleReleases) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.on.Load() && in.ReturnValues == types.ReturnValueNone && strings.Contains(updExpr(in), "REMOVE") {
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("throttled")}
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

// A Release that fails transiently (throttled until its context ends) leaves the lease
// held, as it says ("the lease may still be held") - but it has stopped the heartbeat
// for good: the lock then ran out silently, Done never closed, Err stayed nil and no
// LeaseLost event came, while waiters could take the lock over. It must be reported
// lost when its validity runs out, as the heartbeat reports it.
func TestMutexFailedReleaseReportedAtValidityEnd(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30e9)
	f := &throttleReleases{DynamoDB: e.db}
	a, _ := lockcore.NewMutex(f, e.locks, fast("a")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	f.on.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := la.Release(rctx); err == nil {
		t.Fatal("release succeeded")
	}
	cancel()
	time.Sleep(la.Duration() + time.Second)
	select {
	case <-la.Done():
		t.Logf("lease ended: %v", la.Err())
	default:
		if la.Remaining() <= 0 {
			t.Fatalf("after a failed Release the lease ran out (Remaining 0) but Done is open and Err nil: never reported lost")
		}
	}
	f.on.Store(false)
	_ = la.Release(ctx)
}

// A queued take that leaves the holder less than 2 KiB of its row gives its ticket back
// and waits for room (TestMutexWaitersLeaveTheHolderRoomInTheRow) — but only when the
// take's own response says so. A take whose request landed with its response lost was
// retried, the retry found the ticket issued and kept it whatever room it left, so the
// holder's heartbeat could again find its row full. Same steps as that test, with d's
// take landing ambiguously.
func TestMutexAmbiguousTakeLeavesTheHolderRoomInTheRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	budget := lockcore.WithRowBudget(8 << 10)
	hb := lockcore.WithHeartbeat(0)
	data := lockcore.Data(make([]byte, 2000))
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", budget, hb)...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	queued, waitRoom := make(chan string, 4), make(chan string, 4)
	start := func(owner string, db lockcore.DynamoDB) {
		m, _ := lockcore.NewMutex(db, e.locks, fast(owner, budget, hb,
			lockcore.WithAfterTicketHook(func(string, int64) { notify(queued, owner) }),
			lockcore.WithWaitRoomHook(func(string) { notify(waitRoom, owner) }))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := m.Acquire(wctx, "k", data); err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	next := func() (string, bool) {
		select {
		case o := <-queued:
			return o, true
		case o := <-waitRoom:
			return o, false
		case <-ctx.Done():
			t.Fatal("no waiter took a ticket or waited for room")
		}
		return "", false
	}
	for _, o := range []string{"b", "c"} {
		start(o, e.db)
		if w, ok := next(); !ok {
			t.Fatalf("%s waits for room in a row with room", w)
		}
	}
	ticketTake := func(in *dynamodb.UpdateItemInput) bool { return in.ReturnValues == types.ReturnValueAllNew }
	start("d", &faulty{DynamoDB: e.db, landAndLose: ticketTake})
	if _, ok := next(); ok {
		row := rawMutexRow(t, e, "k")
		t.Fatalf("d queued by a take that landed ambiguously: the row is now %d bytes of a row budget of 8192, "+
			"less than 2 KiB left for the holder's writes", itemSize(row))
	}
	if n := countPrefix(rawMutexRow(t, e, "k"), "d#"); n != 2 {
		t.Fatalf("d waits for room but the row holds %d data entries, want b's and c's", n)
	}
	cancel()
	_ = la.Release(ctx)
}

// A Mutex row left idle but without room (dead weight — tombstones of many skips, say —
// here one big attribute) makes the engine refuse a free take as too large. The take
// must keep to its wait policy with pauses between attempts, not loop reads and writes
// until its context ends: NoWait reports the lock held, WaitUpTo times out.
func TestMutexIdleFullRowTakeKeepsToThePolicy(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	l, err := m.Acquire(ctx, "idle-full")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Fill the idle row to within a few bytes of DynamoDB's 400 KB.
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "idle-full"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}
	filled := false
	for n := 400 << 10; n > (400<<10)-4096 && !filled; n -= 8 {
		_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.locks), Key: key,
			UpdateExpression:          aws.String("SET junk = :j"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":j": &types.AttributeValueMemberS{Value: strings.Repeat("x", n)}}})
		filled = err == nil
	}
	if !filled {
		t.Fatal("setup: could not fill the row")
	}
	var reads, writes atomic.Int32
	c := &countCalls{DynamoDB: e.db, reads: &reads, writes: &writes}
	// The backoff's first pause is up to 20 ms and doubles to 200 ms: within 500 ms a
	// paced take makes about 7 attempts (a read and a write each). A take whose pauses do
	// not grow (each return to waitForRoom restarting the backoff) made about 20.
	b, _ := lockcore.NewMutex(c, e.locks, fast("b", lockcore.WithBackoff(20*time.Millisecond, 200*time.Millisecond))...)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.Acquire(tctx, "idle-full", lockcore.NoWait()); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("NoWait take of an idle full row: %v, want ErrLockHeld", err)
	}
	reads.Store(0)
	writes.Store(0)
	_, err = b.Acquire(tctx, "idle-full", lockcore.WaitUpTo(500*time.Millisecond))
	var held *lockcore.HeldError
	if !errors.As(err, &held) || !held.TimedOut {
		t.Fatalf("WaitUpTo(500ms) take of an idle full row: %v, want a timed-out HeldError", err)
	}
	r, w := reads.Load(), writes.Load()
	t.Logf("%d reads and %d writes in a 500 ms wait", r, w)
	if r+w > 24 {
		t.Fatalf("%d reads and %d writes in a 500 ms wait: a loop without pauses", r, w)
	}
}

// countCalls counts GetItem and UpdateItem calls.
type countCalls struct {
	lockcore.DynamoDB
	reads, writes *atomic.Int32
}

func (c *countCalls) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.reads.Add(1)
	return c.DynamoDB.GetItem(ctx, in, o...)
}

func (c *countCalls) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.writes.Add(1)
	return c.DynamoDB.UpdateItem(ctx, in, o...)
}
