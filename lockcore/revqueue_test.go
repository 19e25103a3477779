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

// isQueueRenew matches a Queue heartbeat: the only UpdateItem on a ticket row.
func isQueueRenew(in *dynamodb.UpdateItemInput) bool {
	sk, _ := in.Key["sk"].(*types.AttributeValueMemberS)
	return sk != nil && strings.Contains(sk.Value, "#t#") && strings.Contains(aws.ToString(in.UpdateExpression), "ADD")
}

// Wall-clock takeover: a Queue renewal whose first request timed out (and was retried)
// lands late, after a later renewal. Its SET until = (its send time + lease) moved the
// recorded lease end back, so the next waiter evicted the holder at that older end +
// skew while the holder's own validity (from its later renewal) still ran: two holders
// with equal clocks.
func TestQueueLateRenewCopyDoesNotMoveLeaseEndBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const lease = 3 * time.Second
	skew := lockcore.WithTakeover(lockcore.WallClockTakeover(100 * time.Millisecond))
	lw := &lateWrite{DynamoDB: e.db, match: isQueueRenew}
	a, _ := lockcore.NewQueue(lw, e.locks, fast("a", skew)...)
	b, _ := lockcore.NewQueue(e.db, e.locks, fast("b", skew)...)
	actx, stopA := context.WithCancel(ctx)
	defer stopA()
	la, err := a.Acquire(actx, "k")
	if err != nil {
		t.Fatal(err)
	}
	stopA() // no background heartbeat: the test renews by hand
	lw.mu.Lock()
	lw.armed = true
	lw.mu.Unlock()
	if err := la.Renew(ctx); err != nil { // first request held back, the retry lands
		t.Fatal(err)
	}
	if lw.held == nil {
		t.Fatal("setup: no renewal held back")
	}
	time.Sleep(lease / 2)
	if err := la.Renew(ctx); err != nil { // a later heartbeat
		t.Fatal(err)
	}
	if err := lw.release(ctx); err != nil { // the old copy lands now
		t.Logf("late copy: %v", err)
	}
	lb, err := b.Acquire(ctx, "k", lockcore.Wait(lockcore.WaitUpTo(lease*2/3)))
	rem := la.Remaining()
	if err == nil {
		defer lb.Release(ctx)
		if rem > 0 {
			t.Fatalf("b acquired (token %d) while a's lease (token %d) still has %v by a's own clock (same clocks, skew 100ms)",
				lb.Token(), la.Token(), rem)
		}
	}
	_ = la.Release(ctx)
}

// steppable is a clock whose offset from the system clock can be changed (stepped).
type steppable struct{ d atomic.Int64 }

func (s *steppable) Now() time.Time { return time.Now().Add(time.Duration(s.d.Load())) }

// A Queue renewal where the row records a later lease end than the renewal's own (the
// holder's clock was stepped back) keeps that end and still renews: it neither fails
// nor moves the end back.
func TestQueueRenewKeepsLaterRecordedLeaseEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	clk := &steppable{}
	clk.d.Store(int64(time.Second))
	a, _ := lockcore.NewQueue(e.db, e.locks, fast("a", lockcore.WithClock(clk))...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	row := func() (rev, until string) {
		out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.locks), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "k"},
				"sk": &types.AttributeValueMemberS{Value: la.Namespace()},
			}})
		if err != nil || out.Item == nil {
			t.Fatalf("read the row: %v (item %v)", err, out)
		}
		return out.Item["rev"].(*types.AttributeValueMemberN).Value, out.Item["until"].(*types.AttributeValueMemberN).Value
	}
	rev0, until0 := row()
	clk.d.Store(0) // stepped back by a second
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("renew after the clock stepped back: %v", err)
	}
	rev1, until1 := row()
	if rev1 == rev0 || until1 != until0 {
		t.Fatalf("renew: rev %s -> %s, until %s -> %s; want rev bumped and until kept", rev0, rev1, until0, until1)
	}
}

// The wait policy's documented promise for transient failures holds for a Queue
// waiter's reads too: a free queue whose Queries are throttled is not reported held
// (ErrLockHeld, ErrWaitTimeout, with nothing to say why); after the policy's wait, and
// at least the backoff cap, Acquire returns an error wrapping the throttling.
func TestQueueThrottledReadsKeepToTheWaitPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, wait := range []struct {
		name   string
		policy lockcore.WaitPolicy
	}{{"bounded", lockcore.WaitUpTo(300 * time.Millisecond)}, {"nowait", lockcore.NoWait()}} {
		t.Run(wait.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 10*time.Second)
			f := &throttledQueries{DynamoDB: e.db}
			f.on.Store(true)
			q, _ := lockcore.NewQueue(f, e.locks, fast("q")...)
			key := "thr-read-" + wait.name
			start := time.Now()
			l, err := q.Acquire(ctx, key, wait.policy)
			took := time.Since(start)
			if err == nil {
				_ = l.Release(ctx)
				t.Fatal("acquired without a single read of the queue")
			}
			t.Logf("after %s and %d refused reads: %v", took, f.refused.Load(), err)
			if took > 3*time.Second {
				t.Errorf("returned after %s: the wait policy did not bound it", took)
			}
			var tx *types.ProvisionedThroughputExceededException
			if errors.Is(err, lockcore.ErrLockHeld) || !errors.As(err, &tx) {
				t.Errorf("a free queue whose reads are throttled: %v; want an error wrapping the throttling, not ErrLockHeld", err)
			}
			// The ticket was withdrawn: a client whose reads pass takes the lock at once.
			r, _ := lockcore.NewQueue(e.db, e.locks, fast("r")...)
			l2, err := r.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("after the throttled acquire: %v", err)
			}
			_ = l2.Release(ctx)
		})
	}
}

// cancelIssueInFlight cancels the caller's context during the first ticket-issuing
// transaction and delivers that transaction only after the caller has given up (a
// request aborted in flight that still reaches DynamoDB).
type cancelIssueInFlight struct {
	lockcore.DynamoDB
	cancel context.CancelFunc
	once   sync.Once
	late   chan *dynamodb.TransactWriteItemsInput
}

func (f *cancelIssueInFlight) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	hold := false
	f.once.Do(func() { hold = true })
	if hold {
		f.cancel()
		f.late <- in
		return nil, fmt.Errorf("operation error DynamoDB: TransactWriteItems: %w", context.Canceled)
	}
	return f.DynamoDB.TransactWriteItems(ctx, in, o...)
}

// A Queue waiter cancelled while its ticket transaction is in flight gives up; the
// transaction lands afterwards, after every read and delete the waiter made. Nobody
// withdraws the row it puts, and the next acquisitions wait a lease for an orphan
// (TryAcquire on the free queue reports it held) — as the TicketLock's requests did
// before their tombstones.
func TestQueueCancelledIssueLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	f := &cancelIssueInFlight{DynamoDB: e.db, cancel: cancel, late: make(chan *dynamodb.TransactWriteItemsInput, 1)}
	w, _ := lockcore.NewQueue(f, e.locks, fast("w")...)
	if _, err := w.Acquire(wctx, "orphan"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v, want context.Canceled", err)
	}
	in := <-f.late
	_, lateErr := e.db.TransactWriteItems(ctx, in) // the aborted request arrives now
	t.Logf("late ticket transaction: %v", lateErr)
	b, _ := lockcore.NewQueue(e.db, e.locks, fast("b")...)
	l, err := b.TryAcquire(ctx, "orphan")
	if err != nil {
		t.Fatalf("uncontended TryAcquire after a cancelled waiter: %v: the cancelled transaction left an orphan row", err)
	}
	_ = l.Release(ctx)
}

// A Queue waiter's row is kept alive by a lease handle before the caller has a lease.
// When the wait ends without one (NoWait on a busy queue, a timeout) the row is
// withdrawn through that handle, and the observer reported it as a lease Released (with
// its "hold" time) — a lease the caller never got; a waiting row lost while waiting was
// reported as a LeaseLost ("work done under it may have overlapped another holder's").
func TestQueueObserverReportsNoLeaseTheCallerNeverGot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	var mu sync.Mutex
	var events []string
	obs := lockcore.WithObserver(lockcore.Observer{
		Released: func(_ context.Context, ev lockcore.LeaseEvent) {
			mu.Lock()
			events = append(events, fmt.Sprintf("released %s token %d", ev.LeaseID, ev.Token))
			mu.Unlock()
		},
		LeaseLost: func(_ context.Context, ev lockcore.LeaseEvent) {
			mu.Lock()
			events = append(events, fmt.Sprintf("lost %s token %d: %v", ev.LeaseID, ev.Token, ev.Err))
			mu.Unlock()
		},
	})
	h, _ := lockcore.NewQueue(e.db, e.locks, fast("h")...)
	lh, err := h.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Release(ctx)
	w, _ := lockcore.NewQueue(e.db, e.locks, fast("w", obs)...)
	if _, err := w.TryAcquire(ctx, "k"); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("TryAcquire on a held queue: %v, want ErrLockHeld", err)
	}
	if _, err := w.Acquire(ctx, "k", lockcore.WaitUpTo(200*time.Millisecond)); !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("Acquire on a held queue: %v, want ErrWaitTimeout", err)
	}
	mu.Lock()
	if len(events) > 0 {
		t.Fatalf("the observer reported lease events for acquisitions that returned no lease: %q", events)
	}
	mu.Unlock()
	// A lease the caller got is reported as before.
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lw, err := w.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := fmt.Sprintf("released %s token %d", lw.ID(), lw.Token()); len(events) != 1 || events[0] != want {
		t.Fatalf("events %q, want [%q]", events, want)
	}
}

// A Queue lease's Released event reports how long it was held (LeaseEvent.Held: "from
// the acquisition to the event"), as the other strategies do; it counted from the
// enqueue, so a waiter's hold time included its whole wait.
func TestQueueReleasedEventHoldTimeExcludesTheWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	held := make(chan time.Duration, 1)
	obs := lockcore.WithObserver(lockcore.Observer{Released: func(_ context.Context, ev lockcore.LeaseEvent) { held <- ev.Held }})
	h, _ := lockcore.NewQueue(e.db, e.locks, fast("h")...)
	w, _ := lockcore.NewQueue(e.db, e.locks, fast("w", obs)...)
	lh, err := h.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	const wait = time.Second
	go func() {
		time.Sleep(wait)
		_ = lh.Release(ctx)
	}()
	lw, err := w.Acquire(ctx, "k") // waits about a second
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.Release(ctx); err != nil { // held for a moment
		t.Fatal(err)
	}
	if d := <-held; d >= wait/2 {
		t.Fatalf("a lease released right after Acquire returned was reported held for %v: the wait (%v) counted as hold time", d, wait)
	}
}
