package lockcore_test

// Regression tests for the defects of issue 11 (found by an outside adversarial suite).
// Each test names the defect it pins down; every one of them failed on the code before
// the fix (see the note for the run).

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
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// guardOf unwraps a GuardCheck result in tests (the lease is never nil there).
func guardOf(g types.TransactWriteItem, err error) types.TransactWriteItem {
	if err != nil {
		panic("GuardCheck: " + err.Error())
	}
	return g
}

var errReset = errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")

// faulty wraps a client: the first UpdateItem for which landAndLose returns true is
// applied, then between runs, then the caller gets a lost response; failReads fails the
// next n GetItems.
type faulty struct {
	lockcore.DynamoDB
	landAndLose func(*dynamodb.UpdateItemInput) bool
	between     func()
	failReads   atomic.Int32
	fired       atomic.Bool
}

func (f *faulty) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
	if err == nil && f.landAndLose != nil && f.landAndLose(in) && f.fired.CompareAndSwap(false, true) {
		if f.between != nil {
			f.between()
		}
		return nil, errReset
	}
	return out, err
}

func (f *faulty) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.failReads.Add(-1) >= 0 {
		return nil, fmt.Errorf("read tcp: i/o timeout: %w", context.DeadlineExceeded)
	}
	return f.DynamoDB.GetItem(ctx, in, o...)
}

func updExpr(in *dynamodb.UpdateItemInput) string { return aws.ToString(in.UpdateExpression) }

// readData reads a data item, strongly consistent (nil: absent).
func readData(t *testing.T, e *env, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(e.data), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func readN(t *testing.T, e *env, key map[string]types.AttributeValue) string {
	t.Helper()
	if v, ok := readData(t, e, key)["n"].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return "<none>"
}

var addN = expression.Add(expression.Name("n"), expression.Value(1))

// Defect 1: ItemLocker.Update applied a landed write twice when its response was lost and
// the settling read failed: the retry was conditioned on the lease only.
func TestItemUpdateLostResponseAppliedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	f := &faulty{DynamoDB: e.db}
	f.landAndLose = func(in *dynamodb.UpdateItemInput) bool {
		return strings.Contains(updExpr(in), "ADD") && in.ReturnValues == types.ReturnValueAllNew && f.failReads.Load() == -100
	}
	il, _ := lockcore.NewItemLocker(f, e.data, fast("a")...)
	l, err := il.Acquire(ctx, dataKey("u1"))
	if err != nil {
		t.Fatal(err)
	}
	f.failReads.Store(-100)                     // arm: the next ADD lands and loses its response ...
	f.between = func() { f.failReads.Store(1) } // ... and the re-read fails
	if _, err := il.Update(ctx, l, addN, nil); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got := readN(t, e, dataKey("u1")); got != "1" {
		t.Fatalf("one Update of ADD n 1 left n = %s: a write whose response was lost was applied again", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// lateWrite holds back the first matching UpdateItem, reports it lost, and sends it
// later, when release() is called: a request delayed in the network.
type lateWrite struct {
	lockcore.DynamoDB
	match func(*dynamodb.UpdateItemInput) bool
	mu    sync.Mutex
	held  *dynamodb.UpdateItemInput
	armed bool
}

func (f *lateWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	if f.armed && f.held == nil && f.match(in) {
		f.held, f.armed = in, false
		f.mu.Unlock()
		return nil, errReset
	}
	f.mu.Unlock()
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

func (f *lateWrite) release(ctx context.Context) error {
	f.mu.Lock()
	in := f.held
	f.mu.Unlock()
	_, err := f.DynamoDB.UpdateItem(ctx, in)
	return err
}

// Defect 1, second form: the first request of an Update is delayed and lands after the
// retry did (and after a later write): it must fail its condition, not apply again.
func TestItemUpdateLateDuplicateRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	f := &lateWrite{DynamoDB: e.db, match: func(in *dynamodb.UpdateItemInput) bool { return strings.Contains(updExpr(in), "ADD") }}
	il, _ := lockcore.NewItemLocker(f, e.data, fast("a")...)
	l, err := il.Acquire(ctx, dataKey("u2"))
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.armed = true
	f.mu.Unlock()
	if _, err := il.Update(ctx, l, addN, nil); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := il.Update(ctx, l, expression.Set(expression.Name("other"), expression.Value("x")), nil); err != nil {
		t.Fatalf("second Update: %v", err)
	}
	err = f.release(ctx) // the first request finally arrives, the lease still held
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Errorf("the late duplicate was not refused by its condition: %v", err)
	}
	if got := readN(t, e, dataKey("u2")); got != "1" {
		t.Fatalf("n = %s after one Update of ADD n 1: the delayed duplicate applied it again", got)
	}
	_ = l.Release(ctx)
}

// Defect 2: UpdateAndRelease reported ErrLeaseLost ("nothing was written") when its write
// had landed, its response was lost, the re-read failed and another client locked and
// wrote the item before the retry.
func TestUpdateAndReleaseLostResponseNotMisreported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
	f := &faulty{DynamoDB: e.db}
	f.landAndLose = func(in *dynamodb.UpdateItemInput) bool {
		return strings.Contains(updExpr(in), "REMOVE") && in.ReturnValues == types.ReturnValueAllNew
	}
	f.between = func() {
		f.failReads.Store(1)
		lb, err := b.TryAcquire(ctx, dataKey("u3"))
		if err != nil {
			t.Errorf("b: %v", err)
			return
		}
		if _, err := b.UpdateAndRelease(ctx, lb, expression.Set(expression.Name("by"), expression.Value("b")), nil); err != nil {
			t.Errorf("b: %v", err)
		}
	}
	a, _ := lockcore.NewItemLocker(f, e.data, fast("a")...)
	la, err := a.Acquire(ctx, dataKey("u3"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.UpdateAndRelease(ctx, la, addN, nil)
	landed := readN(t, e, dataKey("u3")) == "1"
	t.Logf("err = %v; landed = %v", err, landed)
	if !landed {
		t.Fatal("setup: a's write did not land")
	}
	if err != nil && !errors.Is(err, lockcore.ErrUnknownOutcome) {
		t.Fatalf("UpdateAndRelease returned %v for a write that landed: want nil or ErrUnknownOutcome, never a plain ErrLeaseLost (nothing written)", err)
	}
}

// Defect 3: a holder whose wall clock runs an hour slow wrote a TTL already in the past;
// DynamoDB's TTL deleted its live, heartbeating row and a waiter got in beside it. The
// same for a Queue waiter's row. The engine's real TTL job runs during the test (DynamoDB
// Local scans every ~10 s).
func TestSlowClockHolderKeepsRowUnderTTL(t *testing.T) {
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		for _, strat := range []string{"mutex", "queue"} {
			t.Run(fmt.Sprintf("%s/%s", strat, skew), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				ctx := ctxT(t, 60*time.Second)
				clk := lockcore.WithClock(skewed{skew})
				var holder *lockcore.Lease
				var tryOther func() (*lockcore.Lease, error)
				switch strat {
				case "mutex":
					a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", clk)...)
					b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
					var err error
					if holder, err = a.Acquire(ctx, "ttl"); err != nil {
						t.Fatal(err)
					}
					tryOther = func() (*lockcore.Lease, error) { return b.TryAcquire(ctx, "ttl") }
				case "queue":
					a, _ := lockcore.NewQueue(e.db, e.locks, fast("a")...)
					b, _ := lockcore.NewQueue(e.db, e.locks, fast("b", clk)...)
					var err error
					if holder, err = a.Acquire(ctx, "ttl"); err != nil {
						t.Fatal(err)
					}
					// The slow-clock client waits behind the holder; its row must survive.
					tryOther = func() (*lockcore.Lease, error) {
						return b.Acquire(ctx, "ttl", lockcore.Wait(lockcore.WaitUpTo(22*time.Second)))
					}
				}
				deadline := time.Now().Add(22 * time.Second) // two TTL cycles of DynamoDB Local
				for time.Now().Before(deadline) {
					l, err := tryOther()
					if err == nil {
						_ = l.Release(ctx)
						t.Fatalf("another client acquired while the %s-skewed holder's lease was live (holder err: %v)", skew, holder.Err())
					}
					if !errors.Is(err, lockcore.ErrLockHeld) {
						t.Fatalf("other client: %v (want ErrLockHeld: its row or the holder's was removed)", err)
					}
					if strat == "queue" {
						break // one long wait
					}
					time.Sleep(500 * time.Millisecond)
				}
				if err := holder.Err(); err != nil {
					t.Fatalf("the live holder lost its lease: %v", err)
				}
				if err := holder.Release(ctx); err != nil {
					t.Fatalf("release: %v", err)
				}
			})
		}
	}
}

// Defect 4: ItemLocker tokens restarted at 1 when the item was deleted (documented, and
// pinned here). Since review issue 26 they keep rising across the item's lives (a new
// life takes a later epoch): see TestItemTokensRiseAcrossTheItemsLives.
func TestItemTokenGuarantee(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	var last lockcore.Fence
	for i := range 3 {
		l, err := il.Acquire(ctx, dataKey("tok"))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above %d", i, l.Token(), last)
		}
		last = l.Token()
		_ = l.Release(ctx)
	}
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.data), Key: dataKey("tok")}); err != nil {
		t.Fatal(err)
	}
	l, err := il.Acquire(ctx, dataKey("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= last {
		t.Fatalf("after the item's deletion the token is %d, not above the last one before it (%d)", l.Token(), last)
	}
}

// cancelInFlight cancels the caller's context during the first ticket request and
// delivers that request only after the caller has given up (a request aborted in flight
// that still reaches DynamoDB).
type cancelInFlight struct {
	lockcore.DynamoDB
	cancel context.CancelFunc
	once   sync.Once
	late   chan *dynamodb.UpdateItemInput
}

func (f *cancelInFlight) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	hold := false
	if in.ReturnValues == types.ReturnValueAllNew { // a ticket request
		f.once.Do(func() { hold = true })
	}
	if hold {
		f.cancel()
		f.late <- in
		return nil, fmt.Errorf("operation error DynamoDB: UpdateItem: %w", context.Canceled)
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

// Defect 5: a ticket request aborted by its caller's cancellation landed after the
// withdrawal's read; nobody withdrew it and the queue idled a lease when its turn came.
func TestTicketCancelledRequestLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	f := &cancelInFlight{DynamoDB: e.db, cancel: cancel, late: make(chan *dynamodb.UpdateItemInput, 1)}
	w := newTicket(t, f, e.locks, "w")
	if _, err := w.Acquire(wctx, "orphan"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v, want context.Canceled", err)
	}
	in := <-f.late
	_, lateErr := e.db.UpdateItem(ctx, in) // the aborted request arrives now
	t.Logf("late ticket request: %v", lateErr)
	b := newTicket(t, e.db, e.locks, "b")
	l, err := b.TryAcquire(ctx, "orphan")
	if err != nil {
		info, _ := b.Get(ctx, "orphan")
		t.Fatalf("uncontended TryAcquire after a cancelled waiter: %v (row: %+v): the cancelled request became an orphan ticket", err, info)
	}
	_ = l.Release(ctx)
}

// Defect 6: namespaces of different strategies (or of one) could name the same row.
func TestNamespacesIndependent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("m")...)
	tl := newTicket(t, e.db, e.locks, "t")
	q, _ := lockcore.NewQueue(e.db, e.locks, fast("q")...)
	type strat struct {
		name string
		try  func(key, ns string) (*lockcore.Lease, error)
	}
	strats := []strat{
		{"mutex", func(k, ns string) (*lockcore.Lease, error) { return m.TryAcquire(ctx, k, lockcore.Namespace(ns)) }},
		{"ticket", func(k, ns string) (*lockcore.Lease, error) { return tl.TryAcquire(ctx, k, lockcore.Namespace(ns)) }},
		{"queue", func(k, ns string) (*lockcore.Lease, error) { return q.TryAcquire(ctx, k, lockcore.Namespace(ns)) }},
	}
	// The collisions are refused outright.
	for _, c := range []struct {
		s  strat
		ns string
	}{{strats[2], "q#t#"}, {strats[0], "lock#ticket"}, {strats[0], "queue#counter"}, {strats[1], "a#b"}} {
		if _, err := c.s.try("k", c.ns); !errors.Is(err, lockcore.ErrInvalidKey) || !strings.Contains(err.Error(), "namespace") {
			t.Errorf("%s namespace %q: %v, want ErrInvalidKey naming the namespace", c.s.name, c.ns, err)
		}
	}
	// Every pair of (strategy, namespace) holds its own lock on the same key.
	nss := []string{"lock", "queue", "ticket", "t", "counter"}
	n := 0
	for _, s1 := range strats {
		for _, ns1 := range nss {
			for _, s2 := range strats {
				for _, ns2 := range nss {
					if s1.name == s2.name && ns1 == ns2 {
						continue
					}
					n++
					key := fmt.Sprintf("pair%d", n)
					l1, err := s1.try(key, ns1)
					if err != nil {
						t.Fatalf("%s/%s: %v", s1.name, ns1, err)
					}
					l2, err := s2.try(key, ns2)
					if err != nil {
						t.Errorf("%s/%s blocked by %s/%s on the same key: %v", s2.name, ns2, s1.name, ns1, err)
					} else if err := l2.Release(ctx); err != nil {
						t.Errorf("%s/%s release: %v", s2.name, ns2, err)
					}
					if err := l1.Release(ctx); err != nil {
						t.Errorf("%s/%s release after %s/%s: %v", s1.name, ns1, s2.name, ns2, err)
					}
				}
			}
		}
	}
}

// Defect 7: UpdateAndRelease added its own clauses to the caller's UpdateBuilder; reusing
// the builder failed with a ValidationException and left that item locked with its
// heartbeat stopped.
func TestUpdateBuilderNotModified(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	upd := expression.Set(expression.Name("v"), expression.Value(7))
	before, _ := expression.NewBuilder().WithUpdate(upd).Build()
	for _, k := range []string{"b1", "b2", "b3"} {
		l, err := il.Acquire(ctx, dataKey(k))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := il.UpdateAndRelease(ctx, l, upd, nil); err != nil {
			t.Fatalf("item %s with a reused builder: %v", k, err)
		}
	}
	after, _ := expression.NewBuilder().WithUpdate(upd).Build()
	if aws.ToString(before.Update()) != aws.ToString(after.Update()) || len(before.Names()) != len(after.Names()) {
		t.Fatalf("the caller's builder changed: %q → %q", aws.ToString(before.Update()), aws.ToString(after.Update()))
	}
}

// Defect 7, second half: a write that fails (here a ValidationException) must leave the
// lease held *with* its heartbeat, not held and silently expiring.
func TestFailedUpdateAndReleaseKeepsHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
	l, err := il.Acquire(ctx, dataKey("hb"))
	if err != nil {
		t.Fatal(err)
	}
	bad := expression.Set(expression.Name("pk"), expression.Value("x")) // a key attribute: refused
	if _, err := il.UpdateAndRelease(ctx, l, bad, nil); err == nil {
		t.Fatal("an update of a key attribute succeeded")
	}
	// A waiter takes a lease over once it has seen it unchanged for a full lease: only
	// the heartbeat keeps it.
	if lb, err := b.Acquire(ctx, dataKey("hb"), lockcore.Wait(lockcore.WaitUpTo(2*l.Duration()))); err == nil {
		_ = lb.Release(ctx)
		t.Fatal("another client took the lease over: the failed write left it without its heartbeat")
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease after a failed write: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Smaller defects: panics and misclassified errors reachable from the public API.
func TestPublicAPIEdges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	var nilClient *dynamodb.Client
	if _, err := lockcore.NewMutex(nilClient, e.locks); !errors.Is(err, lockcore.ErrInvalidOption) || !strings.Contains(err.Error(), "db") {
		t.Errorf("NewMutex(typed nil client): %v, want ErrInvalidOption naming db", err)
	}
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	if _, err := m.GuardCheck(nil); !errors.Is(err, lockcore.ErrInvalidOption) || !strings.Contains(err.Error(), "lease") {
		t.Errorf("Mutex.GuardCheck(nil): %v, want ErrInvalidOption naming lease", err)
	}
	q, _ := lockcore.NewQueue(e.db, e.locks, fast("a")...)
	if _, err := q.GuardCheck(nil); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("Queue.GuardCheck(nil): %v", err)
	}
	tl := newTicket(t, e.db, e.locks, "a")
	if _, err := tl.GuardCheck(nil); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("TicketLock.GuardCheck(nil): %v", err)
	}
	v, _ := lockcore.NewVersioned(e.db, e.data, fast("a")...)
	if _, _, err := v.Update(ctx, dataKey("v"), nil); !errors.Is(err, lockcore.ErrInvalidOption) || !strings.Contains(err.Error(), "merge") {
		t.Errorf("Versioned.Update(nil merge): %v, want ErrInvalidOption naming merge", err)
	}
	for _, hb := range []time.Duration{time.Nanosecond, 9 * time.Millisecond} {
		if _, err := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithHeartbeat(hb))...); !errors.Is(err, lockcore.ErrInvalidOption) || !strings.Contains(err.Error(), "heartbeat") {
			t.Errorf("heartbeat %s: %v, want ErrInvalidOption naming heartbeat", hb, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := m.Acquire(cctx, "free")
	if !errors.Is(err, context.Canceled) || errors.Is(err, lockcore.ErrLockHeld) {
		t.Errorf("Acquire with a cancelled context on a free lock: %v; want context.Canceled, not ErrLockHeld", err)
	}
}

// lostDelete applies the first DeleteItem and loses its response.
type lostDelete struct {
	lockcore.DynamoDB
	once sync.Once
}

func (f *lostDelete) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	out, err := f.DynamoDB.DeleteItem(ctx, in, o...)
	lose := false
	if err == nil {
		f.once.Do(func() { lose = true })
	}
	if lose {
		return nil, errReset
	}
	return out, err
}

// A Queue release whose response was lost reported ErrLeaseLost though it had landed.
func TestQueueReleaseLostResponse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	q, _ := lockcore.NewQueue(&lostDelete{DynamoDB: e.db}, e.locks, fast("a")...)
	l, err := q.Acquire(ctx, "qr")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release whose first response was lost: %v, want nil (it landed within the lease)", err)
	}
}

// lostTransaction applies the first TransactWriteItems and loses its response; the next
// GetItem fails too.
type lostTransaction struct {
	lockcore.DynamoDB
	once      sync.Once
	failReads atomic.Int32
}

func (f *lostTransaction) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := f.DynamoDB.TransactWriteItems(ctx, in, o...)
	lose := false
	if err == nil {
		f.once.Do(func() { lose = true })
	}
	if lose {
		f.failReads.Store(1)
		return nil, errReset
	}
	return out, err
}

func (f *lostTransaction) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.failReads.Add(-1) >= 0 {
		return nil, fmt.Errorf("read tcp: i/o timeout: %w", context.DeadlineExceeded)
	}
	return f.DynamoDB.GetItem(ctx, in, o...)
}

// A Queue enqueue whose ambiguous transaction was followed by a failed re-read left an
// orphan row (its own first ticket) that made an uncontended acquire wait a lease.
func TestQueueAmbiguousEnqueueUsesItsTicket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	q, _ := lockcore.NewQueue(&lostTransaction{DynamoDB: e.db}, e.locks, fast("a")...)
	l, err := q.Acquire(ctx, "qe")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() != 1 {
		t.Fatalf("uncontended acquire got ticket %d: its first, landed ticket was left behind as an orphan", l.Token())
	}
}

// A dropped response on the fence-epoch write made a wait-forever Acquire return a raw
// timeout instead of settling.
func TestFenceEpochLostResponse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	f := &faulty{DynamoDB: e.db}
	f.landAndLose = func(in *dynamodb.UpdateItemInput) bool { return in.ReturnValues == types.ReturnValueUpdatedNew }
	m, _ := lockcore.NewMutex(f, e.locks, fast("a", lockcore.WithWait(lockcore.WaitForever()))...)
	l, err := m.Acquire(ctx, "epoch")
	if err != nil {
		t.Fatalf("Acquire with a lost keeper response: %v", err)
	}
	if !f.fired.Load() {
		t.Fatal("setup: the keeper write was not intercepted")
	}
	_ = l.Release(ctx)
}
