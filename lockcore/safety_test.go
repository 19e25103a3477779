package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

const lease = 3 * time.Second

// A holder that stops heartbeating (its process "crashed": the context that drove the
// heartbeat ended and it never released) is taken over within 1.25 × lease by a waiter
// that was already waiting, in both takeover modes.
func TestCrashedHolderTakeover(t *testing.T) {
	for _, mode := range []lockcore.TakeoverMode{lockcore.ObserveTakeover(), lockcore.WallClockTakeover(200 * time.Millisecond)} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			opts := func(o string) []lockcore.Option { return fast(o, lockcore.WithTakeover(mode)) }
			a, _ := lockcore.NewMutex(e.db, e.locks, opts("a")...)
			b, _ := lockcore.NewMutex(e.db, e.locks, opts("b")...)
			crashCtx, crash := context.WithCancel(context.Background())
			la, err := a.Acquire(crashCtx, "k")
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *lockcore.Lease
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			go func() {
				l, err := b.Acquire(ctxT(t, time.Minute), "k")
				got <- result{l, err, time.Now()}
			}()
			time.Sleep(lease) // a heartbeats meanwhile; b waits
			crashed := time.Now()
			crash()
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			took := r.at.Sub(crashed)
			t.Logf("takeover %s after the crash (lease %s)", took, lease)
			if took > lease*5/4 {
				t.Errorf("takeover took %s, want ≤ %s", took, lease*5/4)
			}
			if r.l.Token() <= la.Token() {
				t.Errorf("token did not rise: %d then %d", la.Token(), r.l.Token())
			}
			mustNot(t, la.Release(context.Background()), lockcore.ErrLeaseLost)
			if err := r.l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A holder paused past its lease (no heartbeat: a frozen Lambda) cannot write when it
// wakes: its release fails with ErrLeaseLost, a fenced write is refused, the newer
// holder's data survives, and the tokens seen at the data rise.
func TestPausedHolderMutex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	noHB := lockcore.WithHeartbeat(0)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", noHB)...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	fencedWrite := func(l *lockcore.Lease, v string) error {
		cond := lockcore.FenceCondition("fence", l.Token())
		upd := lockcore.FenceUpdate(expression.Set(expression.Name("v"), expression.Value(v)), "fence", l.Token())
		ex, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
		_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(e.data), Key: dataKey("doc"),
			ConditionExpression: ex.Condition(), UpdateExpression: ex.Update(),
			ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
		})
		return err
	}
	// a pauses; b takes over after observing a's lease unchanged for a full lease.
	lb, err := b.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("tokens: a=%d b=%d, want b > a", la.Token(), lb.Token())
	}
	if err := fencedWrite(lb, "b"); err != nil {
		t.Fatal(err)
	}
	// a wakes up.
	var ccf *types.ConditionalCheckFailedException
	if err := fencedWrite(la, "a"); !errors.As(err, &ccf) {
		t.Fatalf("stale holder's fenced write: want ConditionalCheckFailed, got %v", err)
	}
	// Guarded transaction: also refused.
	_, err = e.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		guardOf(a.GuardCheck(la)),
		{Put: &types.Put{TableName: aws.String(e.data), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "doc"}, "sk": &types.AttributeValueMemberS{Value: "OTHER"}}}},
	}})
	if err == nil {
		t.Fatal("stale holder's guarded transaction succeeded")
	}
	mustNot(t, la.Renew(ctx), lockcore.ErrLeaseLost)
	mustNot(t, la.Release(ctx), lockcore.ErrLeaseLost)
	out, _ := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.data), Key: dataKey("doc"), ConsistentRead: aws.Bool(true)})
	if v := out.Item["v"].(*types.AttributeValueMemberS).Value; v != "b" {
		t.Fatalf("data = %q, want the newer holder's %q", v, "b")
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestPausedHolderLockingRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
	la, err := a.Acquire(ctx, dataKey("doc"))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, dataKey("doc"))
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("tokens: a=%d b=%d", la.Token(), lb.Token())
	}
	if _, err := b.UpdateAndRelease(ctx, lb, expression.Set(expression.Name("v"), expression.Value("b")), nil); err != nil {
		t.Fatal(err)
	}
	_, err = a.UpdateAndRelease(ctx, la, expression.Set(expression.Name("v"), expression.Value("a")), nil)
	mustNot(t, err, lockcore.ErrLeaseLost)
	out, _ := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.data), Key: dataKey("doc"), ConsistentRead: aws.Bool(true)})
	if v := out.Item["v"].(*types.AttributeValueMemberS).Value; v != "b" {
		t.Fatalf("data = %q, want %q", v, "b")
	}
	if _, ok := out.Item["lockedBy"]; ok {
		t.Fatal("lock attributes left on the item")
	}
}

// skewed is a clock running ahead by a constant offset.
type skewed struct{ d time.Duration }

func (s skewed) Now() time.Time { return time.Now().Add(s.d) }

// A client whose clock runs two leases fast cannot take a live (heartbeated) lease in
// the default, observation-based mode. In wall-clock mode with too small a skew
// allowance it would — which is why observation is the default.
func TestClockSkewCannotSteal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	fastClock := lockcore.WithClock(skewed{2 * lease})
	thief, _ := lockcore.NewMutex(e.db, e.locks, fast("thief", fastClock)...)
	_, err = thief.Acquire(ctx, "k", lockcore.Wait(lockcore.WaitUpTo(2*lease)))
	mustNot(t, err, lockcore.ErrWaitTimeout)
	var held *lockcore.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "a" {
		t.Fatalf("want HeldError naming holder a, got %v", err)
	}
	// Same for the queue.
	qa, _ := lockcore.NewQueue(e.db, e.locks, fast("qa")...)
	lqa, err := qa.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	qthief, _ := lockcore.NewQueue(e.db, e.locks, fast("qthief", fastClock)...)
	_, err = qthief.Acquire(ctx, "q", lockcore.Wait(lockcore.WaitUpTo(2*lease)))
	mustNot(t, err, lockcore.ErrWaitTimeout)

	// Demonstration: the unsafe configuration does steal.
	naive, _ := lockcore.NewMutex(e.db, e.locks, fast("naive", fastClock, lockcore.WithTakeover(lockcore.WallClockTakeover(0)))...)
	ln, err := naive.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("wall-clock mode with zero skew allowance was expected to steal: %v", err)
	}
	mustNot(t, la.Release(ctx), lockcore.ErrLeaseLost)
	_ = ln.Release(ctx)
	if err := lqa.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Ten waiters that enqueue in a known order acquire in exactly that order.
func TestQueueFIFOOrder(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	first, _ := lockcore.NewQueue(e.db, e.locks, fast("first")...)
	lf, err := first.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 10 {
		enqueued := make(chan struct{})
		q, err := lockcore.NewQueue(e.db, e.locks, fast(fmt.Sprintf("w%d", i),
			lockcore.WithAfterTicketHook(func(string, int64) { close(enqueued) }))...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := q.Acquire(ctx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = l.Release(ctx)
		}()
		<-enqueued // the next waiter takes its ticket only after this one has its own
	}
	if err := lf.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want 0..9", order)
		}
	}
}

// The race of the published FIFO design: A takes ticket N and is delayed before looking
// at the queue (there, before writing its row); B takes N+1. B must not enter while A
// may still appear, and A and B must never hold at once.
func TestQueueTicketRowRace(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	var ov overlap
	aTicket := make(chan struct{})
	release := make(chan struct{})
	a, _ := lockcore.NewQueue(e.db, e.locks, fast("a", lockcore.WithAfterTicketHook(func(string, int64) {
		close(aTicket)
		<-release // delayed writer
	}))...)
	b, _ := lockcore.NewQueue(e.db, e.locks, fast("b")...)
	var wg sync.WaitGroup
	var order []string
	var mu sync.Mutex
	run := func(q *lockcore.Queue, who string) {
		defer wg.Done()
		l, err := q.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
			return
		}
		ov.enter()
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		ov.exit()
		_ = l.Release(ctx)
	}
	wg.Add(2)
	go run(a, "a")
	<-aTicket
	go run(b, "b")
	time.Sleep(500 * time.Millisecond) // b polls while a is stalled
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("%v entered while the earlier ticket's holder was stalled", order)
	}
	mu.Unlock()
	close(release)
	wg.Wait()
	if m := ov.max.Load(); m > 1 {
		t.Fatalf("%d holders at once", m)
	}
	if strings.Join(order, ",") != "a,b" {
		t.Fatalf("order %v, want a,b", order)
	}
}

// flaky wraps a client: the first matching write is sent to the engine (it lands) and
// then reported as a timeout, as when a response is lost on the network.
type flaky struct {
	lockcore.DynamoDB
	mu    sync.Mutex
	fails int
}

func (f *flaky) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.fails > 0 {
		f.fails--
		return nil, fmt.Errorf("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout: %w", context.DeadlineExceeded)
	}
	return out, err
}

// An acquisition whose response is lost after the write landed neither leaves an
// orphaned lease nor admits a second holder.
func TestAmbiguousAcquire(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	f := &flaky{DynamoDB: e.db, fails: 1}
	a, _ := lockcore.NewMutex(f, e.locks, fast("a")...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("acquire after a lost response: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("second holder admitted: %v", err)
	}
	// Lost response on release too: still released exactly once, lock free afterwards.
	f.mu.Lock()
	f.fails = 1
	f.mu.Unlock()
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release after a lost response: %v", err)
	}
	lb, err := b.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("lock orphaned: %v", err)
	}
	_ = lb.Release(ctx)

	// Locking read: same.
	il, _ := lockcore.NewItemLocker(f, e.data, fast("a")...)
	f.mu.Lock()
	f.fails = 1
	f.mu.Unlock()
	l, err := il.Acquire(ctx, dataKey("doc"))
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.fails = 1
	f.mu.Unlock()
	if _, err := il.UpdateAndRelease(ctx, l, expression.Set(expression.Name("v"), expression.Value(1)), nil); err != nil {
		t.Fatalf("update-and-release after a lost response: %v", err)
	}
	il2, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
	l2, err := il2.TryAcquire(ctx, dataKey("doc"))
	if err != nil {
		t.Fatalf("item lock orphaned: %v", err)
	}
	_ = l2.Release(ctx)
}

// A client that gives up while its write's fate is unknown leaves no orphaned lease.
func TestAmbiguousThenCancelled(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _ := lockcore.NewMutex(&cancelAfterWrite{DynamoDB: e.db, cancel: cancel}, e.locks, fast("a")...)
	if _, err := a.Acquire(ctx, "k"); err == nil {
		t.Fatal("acquire succeeded although its context was cancelled")
	}
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	lb, err := b.TryAcquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("orphaned lease after an abandoned ambiguous acquire: %v", err)
	}
	_ = lb.Release(context.Background())
}

// cancelAfterWrite lands the write, then cancels the caller's context before the
// response arrives: the caller gives up not knowing its write landed.
type cancelAfterWrite struct {
	lockcore.DynamoDB
	cancel context.CancelFunc
}

func (c *cancelAfterWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if _, err := c.DynamoDB.UpdateItem(context.WithoutCancel(ctx), in, o...); err != nil {
		return nil, err
	}
	c.cancel()
	return nil, ctx.Err()
}

// Owner isolation: another owner can neither release nor renew a lease, even knowing
// its id, and nothing changes.
func TestOwnerIsolation(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := a.Get(ctx, "k")
	forged, err := b.Attach("k", la.ID())
	if err != nil {
		t.Fatal(err)
	}
	mustNot(t, forged.Release(ctx), lockcore.ErrNotOwner)
	mustNot(t, forged.Renew(ctx), lockcore.ErrNotOwner)
	after, _ := a.Get(ctx, "k")
	if !after.Held || after.Holder.LeaseID != la.ID() || after.Holder.Rev != before.Holder.Rev {
		t.Fatalf("lock changed: before %+v after %+v", before.Holder, after.Holder)
	}
	// Same for the locking read.
	ia, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	ib, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
	il, err := ia.Acquire(ctx, dataKey("doc"))
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := ib.Attach(dataKey("doc"), il.ID())
	mustNot(t, fi.Release(ctx), lockcore.ErrNotOwner)
	// A fresh handle: the refused one is finished (lost) once its Release is refused, so
	// what it says next depends on when its validity watch notices that.
	fi, _ = ib.Attach(dataKey("doc"), il.ID())
	_, err = ib.UpdateAndRelease(ctx, fi, expression.Set(expression.Name("v"), expression.Value(1)), nil)
	mustNot(t, err, lockcore.ErrNotOwner)
	if _, err := ia.UpdateAndRelease(ctx, il, expression.Set(expression.Name("v"), expression.Value(2)), nil); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Fencing tokens keep rising after the lock row is deleted (as TTL or the sweep does).
func TestFenceSurvivesRowDeletion(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	var last lockcore.Fence
	for i := range 4 {
		l, err := m.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("round %d: token %d not above %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // delete the row like TTL would
			_, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks), Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestWaitPolicies(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	la, err := a.Acquire(ctx, "k", lockcore.Data([]byte("job-42")))
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)

	start := time.Now()
	_, err = b.TryAcquire(ctx, "k")
	var held *lockcore.HeldError
	if !errors.As(err, &held) || errors.Is(err, lockcore.ErrWaitTimeout) || held.Holder.Owner != "a" {
		t.Fatalf("NoWait: want HeldError naming a without timeout, got %v", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("NoWait waited %s", time.Since(start))
	}
	_, err = b.Acquire(ctx, "k", lockcore.Wait(lockcore.WaitUpTo(300*time.Millisecond)))
	mustNot(t, err, lockcore.ErrWaitTimeout)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.Acquire(short, "k") // WaitForever: the context deadline wins
	mustNot(t, err, context.DeadlineExceeded)
	mustNot(t, err, lockcore.ErrLockHeld)

	info, err := b.Get(ctx, "k")
	if err != nil || !info.Held || string(info.Data) != "job-42" {
		t.Fatalf("Get = %+v, %v", info, err)
	}
	if locked, _ := b.IsLocked(ctx, "k"); !locked {
		t.Fatal("IsLocked = false while held")
	}
	// Independent namespaces on one key.
	ln, err := b.TryAcquire(ctx, "k", lockcore.Namespace("other"))
	if err != nil {
		t.Fatalf("namespace lock: %v", err)
	}
	_ = ln.Release(ctx)
}

// A heartbeat that finds its lease taken reports it through Done/Err.
func TestHeartbeatReportsLoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithHeartbeat(500*time.Millisecond))...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Someone removes the row behind a's back (an operator, the sweep gone wrong).
	_, err = e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("heartbeat did not report the lost lease")
	}
	mustNot(t, la.Err(), lockcore.ErrLeaseLost)
}

func TestMultiAllOrNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	lc, err := b.Acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.AcquireAll(ctx, []string{"c", "a", "b"}, lockcore.Wait(lockcore.NoWait()))
	mustNot(t, err, lockcore.ErrLockHeld)
	for _, k := range []string{"a", "b"} {
		if locked, _ := a.IsLocked(ctx, k); locked {
			t.Fatalf("key %s left locked after a failed AcquireAll", k)
		}
	}
	_ = lc.Release(ctx)
	ml, err := a.AcquireAll(ctx, []string{"c", "a", "b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ml.Leases()); n != 3 {
		t.Fatalf("%d leases, want 3 (deduplicated)", n)
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A client remembers what it observed across calls: a Lambda that failed with
// ErrLockHeld and retries after a lease takes over a dead holder's lease at once, in the
// skew-safe mode, without watching for another full lease.
func TestObservationSpansCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	if _, err := a.Acquire(ctx, "k"); err != nil { // a dies holding it
		t.Fatal(err)
	}
	_, err := b.TryAcquire(ctx, "k")
	mustNot(t, err, lockcore.ErrLockHeld)
	time.Sleep(lease + 100*time.Millisecond)
	lb, err := b.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("retry after a full lease of unchanged observation: %v", err)
	}
	_ = lb.Release(ctx)

	// A client that never saw the lease before must still wait a full lease.
	if _, err := a.Acquire(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	c, _ := lockcore.NewMutex(e.db, e.locks, fast("c")...)
	_, err = c.TryAcquire(ctx, "k2")
	mustNot(t, err, lockcore.ErrLockHeld)
}

// An item written before versioning was adopted (no version attribute) can be updated.
func TestVersionedAdoptsUnversionedItem(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	it := dataKey("legacy")
	it["n"] = &types.AttributeValueMemberN{Value: "7"}
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.data), Item: it}); err != nil {
		t.Fatal(err)
	}
	v, _ := lockcore.NewVersioned(e.db, e.data, fast("v", lockcore.WithMaxAttempts(3))...)
	_, ver, err := v.Update(ctx, dataKey("legacy"), func(cur map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
		return map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "8"}}, nil
	})
	if err != nil || ver != 1 {
		t.Fatalf("Update of an unversioned item: version %d, %v", ver, err)
	}
}

// An attached handle claims no validity until it renews, and a renewal gives it no more
// than the lease the acquisition recorded — what waiters grant before they take over —
// even when its own client's lease is longer. It reported 27 s left while another client
// already held the lock (found by an outside review).
func TestMutexAttachedLeaseClaimsOnlyWhatWaitersGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...) // 3 s leases
	actx, stop := context.WithCancel(ctx)
	la, err := a.Acquire(actx, "att")
	if err != nil {
		t.Fatal(err)
	}
	stop() // a's process goes away; another process of the same owner takes the lease over
	a2, _ := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithLease(30*time.Second))...)
	att, err := a2.Attach("att", la.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rem := att.Remaining(); rem != 0 {
		t.Fatalf("attached, not renewed: Remaining %v, want 0", rem)
	}
	if err := att.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if rem := att.Remaining(); rem <= 0 || rem > 3*time.Second {
		t.Fatalf("renewed: Remaining %v, want (0, 3s]", rem)
	}
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	lb, err := b.Acquire(ctx, "att")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lb.Release(ctx) }()
	if rem := att.Remaining(); rem > 0 {
		t.Fatalf("b holds the lock while the attached handle reports %v left", rem)
	}
}

// A handle attached to another owner's lease keeps answering ErrNotOwner: its refused
// Release must not start the validity watcher that ends a handle of ours as lost (a
// Renew a moment later answered "validity ... lease lost" instead).
func TestForeignLeaseStaysNotOwner(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Release(context.Background()) }()
	forged, err := b.Attach("k", la.ID())
	if err != nil {
		t.Fatal(err)
	}
	mustNot(t, forged.Release(ctx), lockcore.ErrNotOwner)
	time.Sleep(100 * time.Millisecond) // a watcher of the attached handle's (zero) validity would have run out
	mustNot(t, forged.Renew(ctx), lockcore.ErrNotOwner)
	mustNot(t, forged.Release(ctx), lockcore.ErrNotOwner)
}
