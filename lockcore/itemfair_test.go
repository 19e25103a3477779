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
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Tests of the fair locking read: the ticket queue on the data item.

// counting counts the calls a client makes.
type counting struct {
	lockcore.DynamoDB
	calls atomic.Int32
}

func (c *counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.calls.Add(1)
	return c.DynamoDB.UpdateItem(ctx, in, o...)
}

func (c *counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.calls.Add(1)
	return c.DynamoDB.GetItem(ctx, in, o...)
}

func addOne() expression.UpdateBuilder {
	return expression.Add(expression.Name("n"), expression.Value(1))
}

// Uncontended, a critical section is two calls: the take (lock + read) and the write
// that releases; also on an item created by the first, and with a plain Release.
func TestItemFairUncontendedTwoCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	c := &counting{DynamoDB: e.db}
	il, _ := lockcore.NewItemLocker(c, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	var first lockcore.Fence
	for i := range 4 {
		c.calls.Store(0)
		l, err := il.Acquire(ctx, dataKey("two"))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = l.Token()
		}
		if l.Token()%1024 != lockcore.Fence(i+1) || l.Token() != first+lockcore.Fence(i) {
			t.Fatalf("round %d: token %d, want ticket %d of the item's life (first token %d)", i, l.Token(), i+1, first)
		}
		if i%2 == 0 {
			_, err = il.UpdateAndRelease(ctx, l, addOne(), nil)
		} else {
			err = l.Release(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := c.calls.Load(); n != 2 {
			t.Fatalf("round %d: %d calls, want 2", i, n)
		}
	}
	if got := readN(t, e, dataKey("two")); got != "2" {
		t.Fatalf("n = %s, want 2", got)
	}
}

// waitQueued waits until the item shows want waiting tickets.
func waitQueued(t *testing.T, e *env, key map[string]types.AttributeValue, want int) {
	t.Helper()
	in, err := lockcore.NewInspector(e.db, e.locks)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		il, err := in.ShowItem(context.Background(), e.data, key, lockcore.ItemAttributes{})
		if err != nil {
			t.Fatal(err)
		}
		if len(il.Waiters) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d: %+v", len(il.Waiters), want, il)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Waiters enter in the order they took their tickets: no bypass.
func TestItemFairFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	key := dataKey("fifo")
	holder, _ := lockcore.NewItemLocker(e.db, e.data, fast("h")...)
	hl, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		il, _ := lockcore.NewItemLocker(e.db, e.data, fast(fmt.Sprintf("w%d", i))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := il.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			if _, err := il.UpdateAndRelease(ctx, l, addOne(), nil); err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, e, key, i+1) // waiter i has its ticket before waiter i+1 starts
	}
	if _, err := holder.UpdateAndRelease(ctx, hl, addOne(), nil); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("entry order %v, want 0..%d", order, n-1)
		}
	}
	if got := readN(t, e, key); got != fmt.Sprint(n+1) {
		t.Fatalf("n = %s, want %d", got, n+1)
	}
}

// Many workers, some of which crash holding the item (no release, no heartbeat): never
// two holders, no lost or doubled write, everyone gets through.
func TestItemFairNoDoubleHoldersWithCrashes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	key := dataKey("crash")
	var ov overlap
	var written atomic.Int32
	var wg sync.WaitGroup
	for w := range 6 {
		il, _ := lockcore.NewItemLocker(e.db, e.data, fast(fmt.Sprintf("w%d", w),
			lockcore.WithMinLease(500*time.Millisecond), lockcore.WithLease(500*time.Millisecond))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				actx, cancel := context.WithCancel(ctx)
				l, err := il.Acquire(actx, key)
				if err != nil {
					cancel()
					t.Error(err)
					return
				}
				if w < 2 && i == 3 {
					cancel() // crash: the heartbeat stops, nothing is released
					continue
				}
				ov.enter()
				time.Sleep(2 * time.Millisecond)
				ov.exit()
				_, err = il.UpdateAndRelease(ctx, l, addOne(), nil)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				written.Add(1)
			}
		}()
	}
	wg.Wait()
	if ov.max.Load() > 1 {
		t.Fatalf("%d holders at once", ov.max.Load())
	}
	if got := readN(t, e, key); got != fmt.Sprint(written.Load()) {
		t.Fatalf("n = %s, want %d", got, written.Load())
	}
}

// A holder paused past its lease is skipped; when it wakes, its write fails with
// ErrLeaseLost and writes nothing — also when it was handed the item (no lease id
// written yet) rather than taking it free.
func TestItemFairPausedHolderCannotWrite(t *testing.T) {
	t.Parallel()
	for _, handedOver := range []bool{false, true} {
		t.Run(fmt.Sprint("handedOver=", handedOver), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, time.Minute)
			key := dataKey("paused")
			opts := func(o string) []lockcore.Option {
				return fast(o, lockcore.WithHeartbeat(0), lockcore.WithMinLease(time.Second), lockcore.WithLease(time.Second))
			}
			a, _ := lockcore.NewItemLocker(e.db, e.data, opts("a")...)
			b, _ := lockcore.NewItemLocker(e.db, e.data, opts("b")...)
			var la *lockcore.ItemLease
			if handedOver {
				first, _ := lockcore.NewItemLocker(e.db, e.data, opts("first")...)
				lf, err := first.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *lockcore.ItemLease, 1)
				go func() {
					l, err := a.Acquire(ctx, key)
					if err != nil {
						t.Error(err)
					}
					got <- l
				}()
				waitQueued(t, e, key, 1)
				if err := lf.Release(ctx); err != nil {
					t.Fatal(err)
				}
				la = <-got
				if la == nil {
					t.FailNow()
				}
			} else {
				var err error
				if la, err = a.Acquire(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			// a pauses; b waits a full lease of silence and skips it.
			t0 := time.Now()
			lb, err := b.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(t0) < 900*time.Millisecond {
				t.Fatalf("b got the item after %s, inside a's lease", time.Since(t0))
			}
			_, err = a.UpdateAndRelease(ctx, la, expression.Set(expression.Name("v"), expression.Value("a")), nil)
			mustNot(t, err, lockcore.ErrLeaseLost)
			if _, err := a.Update(ctx, la, expression.Set(expression.Name("v"), expression.Value("a")), nil); err == nil {
				t.Fatal("Update under a lost lease succeeded")
			}
			if err := la.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
				t.Fatalf("release of the lost lease: %v", err)
			}
			if _, err := b.UpdateAndRelease(ctx, lb, expression.Set(expression.Name("w"), expression.Value("b")), nil); err != nil {
				t.Fatal(err)
			}
			out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.data), Key: key, ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := out.Item["v"]; ok {
				t.Fatalf("the paused holder's write landed: %v", out.Item)
			}
		})
	}
}

// Waiters that give up (cancelled, timed out) leave the queue at once: the waiter
// behind them gets the item as soon as the holder releases, not a lease later.
func TestItemFairCancelledWaitersDontStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	key := dataKey("cancel")
	opts := func(o string) []lockcore.Option { return fast(o, lockcore.WithLease(10*time.Second)) }
	h, _ := lockcore.NewItemLocker(e.db, e.data, opts("h")...)
	hl, err := h.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := lockcore.NewItemLocker(e.db, e.data, opts("c1")...)
	cctx, cancel := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { _, err := c1.Acquire(cctx, key); done1 <- err }()
	waitQueued(t, e, key, 1)
	c2, _ := lockcore.NewItemLocker(e.db, e.data, opts("c2")...)
	done2 := make(chan error, 1)
	go func() { _, err := c2.Acquire(ctx, key, lockcore.WaitUpTo(4*time.Second)); done2 <- err }()
	waitQueued(t, e, key, 2)
	w, _ := lockcore.NewItemLocker(e.db, e.data, opts("w")...)
	got := make(chan time.Time, 1)
	go func() {
		l, err := w.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Release(ctx)
	}()
	waitQueued(t, e, key, 3)
	cancel()
	if err := <-done1; err == nil {
		t.Fatal("cancelled waiter got the item")
	}
	if err := <-done2; !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("timed-out waiter: %v", err)
	}
	released := time.Now()
	if err := hl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(released); d > 2*time.Second {
		t.Fatalf("waiter behind two withdrawn tickets got the item %s after the release", d)
	}
}

// loseOnce lands the first UpdateItem that match accepts, then reports a lost response.
type loseOnce struct {
	lockcore.DynamoDB
	match func(*dynamodb.UpdateItemInput) bool
	fired atomic.Bool
}

func (f *loseOnce) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
	if err == nil && f.match(in) && f.fired.CompareAndSwap(false, true) {
		return nil, errReset
	}
	return out, err
}

func hasName(in *dynamodb.UpdateItemInput, n string) bool {
	for _, v := range in.ExpressionAttributeNames {
		if v == n {
			return true
		}
	}
	return false
}

// Lost responses on the take (claim and queue forms), the release and the handoff:
// each is settled from the item — one ticket per acquisition, the item passed on once,
// the queue never stalled.
func TestItemFairLostResponses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		match func(*dynamodb.UpdateItemInput) bool
	}{
		{"claim take", func(in *dynamodb.UpdateItemInput) bool {
			return in.ReturnValues == types.ReturnValueAllNew && hasName(in, "lockServing") && hasName(in, "lockFence")
		}},
		{"queue take", func(in *dynamodb.UpdateItemInput) bool {
			return in.ReturnValues == types.ReturnValueAllNew && strings.Contains(aws.ToString(in.ConditionExpression), "NOT")
		}},
		{"release", func(in *dynamodb.UpdateItemInput) bool {
			return in.ReturnValues == types.ReturnValueNone && hasName(in, "lockServing") && hasName(in, "lockWrite")
		}},
		{"update and release", func(in *dynamodb.UpdateItemInput) bool {
			return in.ReturnValues == types.ReturnValueAllNew && hasName(in, "n") && hasName(in, "lockServing")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, time.Minute)
			key := dataKey("lost")
			f := &loseOnce{DynamoDB: e.db, match: c.match}
			var wg sync.WaitGroup
			var ov overlap
			var done atomic.Int32
			for w := range 4 {
				var db lockcore.DynamoDB = e.db
				if w == 0 {
					db = f
				}
				il, _ := lockcore.NewItemLocker(db, e.data, fast(fmt.Sprintf("w%d", w))...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 5 {
						l, err := il.Acquire(ctx, key)
						if err != nil {
							t.Error(err)
							return
						}
						ov.enter()
						time.Sleep(time.Millisecond)
						ov.exit()
						if i%2 == 0 {
							_, err = il.UpdateAndRelease(ctx, l, addOne(), nil)
						} else {
							if _, err = il.Update(ctx, l, addOne(), nil); err == nil {
								err = l.Release(ctx)
							}
						}
						if err != nil {
							t.Error(err)
							return
						}
						done.Add(1)
					}
				}()
			}
			wg.Wait()
			if !f.fired.Load() {
				t.Fatal("no fault injected")
			}
			if ov.max.Load() > 1 {
				t.Fatalf("%d holders at once", ov.max.Load())
			}
			if got := readN(t, e, key); got != fmt.Sprint(done.Load()) {
				t.Fatalf("n = %s after %d sections", got, done.Load())
			}
			in, err := lockcore.NewInspector(e.db, e.locks)
			if err != nil {
				t.Fatal(err)
			}
			show, err := in.ShowItem(ctx, e.data, key, lockcore.ItemAttributes{})
			if err != nil {
				t.Fatal(err)
			}
			if show.State != lockcore.LockReleased || len(show.Waiters) != 0 {
				t.Fatalf("item left %s with waiters %v", show.State, show.Waiters)
			}
		})
	}
}

// oldTake and oldRelease are the previous release's protocol (conditional writes on
// lockedBy), as a client not yet upgraded sends them during a rolling deploy.
func oldTake(ctx context.Context, db lockcore.DynamoDB, table string, key map[string]types.AttributeValue, id string) error {
	now := time.Now()
	cond := expression.AttributeNotExists(expression.Name("lockedBy"))
	upd := expression.Set(expression.Name("lockedBy"), expression.Value(id)).
		Set(expression.Name("lockOwner"), expression.Value("old")).
		Set(expression.Name("lockTime"), expression.Value(now.UnixMilli())).
		Set(expression.Name("lockUntil"), expression.Value(now.Add(3*time.Second).UnixMilli())).
		Set(expression.Name("lockLeaseMs"), expression.Value(3000)).
		Add(expression.Name("lockRev"), expression.Value(1)).
		Add(expression.Name("lockFence"), expression.Value(1))
	e, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
		ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()})
	return err
}

func oldRelease(ctx context.Context, db lockcore.DynamoDB, table string, key map[string]types.AttributeValue, id string) error {
	cond := expression.And(expression.Equal(expression.Name("lockedBy"), expression.Value(id)),
		expression.Equal(expression.Name("lockOwner"), expression.Value("old")))
	upd := expression.Remove(expression.Name("lockedBy")).Remove(expression.Name("lockOwner")).
		Remove(expression.Name("lockUntil")).Remove(expression.Name("lockTime")).
		Set(expression.Name("lockWrite"), expression.Value("old-"+id))
	e, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
		ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()})
	return err
}

// Rolling deploy: a client of the previous release and a new one on the same item never
// both hold it — whether the item is free, held by either, or handed over in the queue.
func TestItemFairOldClientExclusion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	key := dataKey("mixed")
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("new")...)
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("waiter")...)

	// An old holder on an item the new protocol never saw: the new client waits.
	if err := oldTake(ctx, e.db, e.data, key, "old#1"); err != nil {
		t.Fatal(err)
	}
	if _, err := il.TryAcquire(ctx, key); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("new TryAcquire under an old holder: %v", err)
	}
	got := make(chan *lockcore.ItemLease, 1)
	go func() {
		l, err := il.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("new client got an item an old client holds")
	default:
	}
	if err := oldRelease(ctx, e.db, e.data, key, "old#1"); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	// The new client holds (its lease id claimed): the old client cannot take it.
	if err := oldTake(ctx, e.db, e.data, key, "old#2"); err == nil {
		t.Fatal("old client took an item a new client holds")
	}
	// Handed over to a waiter that has not written its lease id yet: still refused.
	wgot := make(chan *lockcore.ItemLease, 1)
	go func() {
		l, err := w.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		wgot <- l
	}()
	waitQueued(t, e, key, 1)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := oldTake(ctx, e.db, e.data, key, "old#3"); err == nil {
		t.Fatal("old client took an item handed over in the queue")
	}
	wl := <-wgot
	if wl == nil {
		t.FailNow()
	}
	if _, err := w.UpdateAndRelease(ctx, wl, addOne(), nil); err != nil {
		t.Fatal(err)
	}
	// Free again: the old client takes it, and the new one cannot.
	if err := oldTake(ctx, e.db, e.data, key, "old#4"); err != nil {
		t.Fatalf("old client on a free item: %v", err)
	}
	if _, err := il.TryAcquire(ctx, key); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("new TryAcquire under an old holder: %v", err)
	}
	if err := oldRelease(ctx, e.db, e.data, key, "old#4"); err != nil {
		t.Fatal(err)
	}
	l2, err := il.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("after the old release: %v", err)
	}
	if l2.Token() <= wl.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), wl.Token())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A caller's own transaction that unlocks the item as the previous release did (removing
// lockedBy, conditioned on the lease id, as the shop's order decision does) releases it:
// the next waiter skips the released ticket at once.
func TestItemFairForeignUnlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	key := dataKey("foreign")
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithLease(10*time.Second))...)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b", lockcore.WithLease(10*time.Second))...)
	unlock := func(l *lockcore.ItemLease) {
		t.Helper()
		cond := expression.And(expression.Equal(expression.Name("lockedBy"), expression.Value(l.ID())),
			expression.Equal(expression.Name("lockOwner"), expression.Value(l.Owner())))
		upd := expression.Set(expression.Name("status"), expression.Value("DONE")).
			Remove(expression.Name("lockedBy")).Remove(expression.Name("lockOwner")).
			Remove(expression.Name("lockUntil")).Remove(expression.Name("lockTime"))
		ex, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
		_, err := e.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{
			Update: &types.Update{TableName: aws.String(e.data), Key: key, ConditionExpression: ex.Condition(),
				UpdateExpression: ex.Update(), ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values()}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	unlock(la)
	t0 := time.Now()
	lb, err := b.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Now with a waiter queued behind the holder that unlocks by its own transaction
	// (its lease id written by an Update first, as a holder handed the item does).
	if _, err := b.Update(ctx, lb, expression.Set(expression.Name("status"), expression.Value("PENDING")), nil); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := a.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		if strings.Contains(fmt.Sprint(l.Item()), "lock") {
			t.Errorf("Item() shows lock attributes: %v", l.Item())
		}
		_ = l.Release(ctx)
	}()
	waitQueued(t, e, key, 1)
	unlock(lb)
	released := time.Now()
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(released); d > 2*time.Second || time.Since(t0) > 8*time.Second {
		t.Fatalf("waiter got the item %s after a foreign unlock", d)
	}
}

// Waiters behind the next in line read eventually consistently; stale answers (old states
// of the item) must never let two clients hold it, lose a write, or stall the queue.
func TestItemFairStaleReadsNeverTwoHolders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	key := dataKey("stale")
	sr := &staleReads{DynamoDB: e.db}
	var ov overlap
	var done atomic.Int32
	var wg sync.WaitGroup
	for w := range 10 {
		il, _ := lockcore.NewItemLocker(sr, e.data, fast(fmt.Sprintf("w%d", w),
			lockcore.WithMinLease(time.Second), lockcore.WithLease(time.Second))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				actx, cancel := context.WithCancel(ctx)
				l, err := il.Acquire(actx, key)
				if err != nil {
					cancel()
					t.Error(err)
					return
				}
				if w == 0 && i == 5 {
					cancel() // a crashed holder, skipped by stale-reading waiters
					continue
				}
				ov.enter()
				time.Sleep(time.Millisecond)
				ov.exit()
				_, err = il.UpdateAndRelease(ctx, l, addOne(), nil)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if ov.max.Load() > 1 {
		t.Fatalf("%d holders at once", ov.max.Load())
	}
	if got := readN(t, e, key); got != fmt.Sprint(done.Load()) {
		t.Fatalf("n = %s after %d sections", got, done.Load())
	}
	if sr.staleCount() == 0 {
		t.Fatal("no stale read served: the test tested nothing")
	}
	t.Logf("%d stale reads", sr.staleCount())
}

// avSize is DynamoDB's size of an attribute value, maps included (3 bytes plus, per
// element, its name, its value and 1 byte).
func avSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberM:
		n := 3
		for k, x := range v.Value {
			n += len(k) + avSize(x) + 1
		}
		return n
	default:
		return itemSize(map[string]types.AttributeValue{"": v})
	}
}

// The queue lives on the data item: with 64 waiters the lock attributes must stay well
// under 1 KB, so that a take or a release costs 1 WCU (room left for the user's data).
func TestItemFairQueueSizeWith64Waiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	key := dataKey("order#ORD-2026-11-24-0000123456")
	first, _ := lockcore.NewItemLocker(e.db, e.data, fast("order-processor-first", lockcore.WithLease(20*time.Second))...)
	lf, err := first.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 64 {
		il, _ := lockcore.NewItemLocker(e.db, e.data, fast(fmt.Sprintf("order-processor-%d", i), lockcore.WithLease(20*time.Second))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := il.Acquire(wctx, key); err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	waitQueued(t, e, key, 64)
	// Hand the item over once: the usual state of a busy item (a "~N" marker holder).
	if err := lf.Release(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.data, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for k, v := range out.Item {
		size += len(k) + avSize(v)
	}
	t.Logf("item with 63 waiters and a handed-over holder: %d bytes", size)
	if size >= 1000 {
		t.Errorf("item with 64 tickets is %d bytes: writes cost 2 WCU", size)
	}
	cancel()
	wg.Wait()
}

// Updates made while the heartbeat renews (a heartbeat every 10 ms, updates back to back
// for a second) share the hold's view of the item safely: the race detector, which this
// suite runs under, found them writing it at once (the chaos smoke test's shop did).
func TestItemUpdatesRaceHeartbeat(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	il, err := lockcore.NewItemLocker(e.db, e.data, fast("racer", lockcore.WithHeartbeat(10*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := il.Acquire(ctx, dataKey("race"))
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(time.Second)
	n := 0
	for time.Now().Before(end) {
		if _, err := l.Update(ctx, expression.Add(expression.Name("n"), expression.Value(1)), expression.ConditionBuilder{}); err != nil {
			t.Fatalf("update %d: %v", n, err)
		}
		n++
	}
	if _, err := l.UpdateAndRelease(ctx, expression.Add(expression.Name("n"), expression.Value(1)), expression.ConditionBuilder{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d updates beside the heartbeat", n)
}

// handedOver locks key with a first client while a second waits for it, then releases
// it: the queue hands the item over to the second, whose lease has not written since. It
// returns the first lease (released), the second client and its lease. Neither
// heartbeats.
func handedOver(t *testing.T, e *env, ctx context.Context, key map[string]types.AttributeValue) (*lockcore.ItemLease, *lockcore.ItemLocker, *lockcore.ItemLease) {
	t.Helper()
	first, _ := lockcore.NewItemLocker(e.db, e.data, fast("first", lockcore.WithHeartbeat(0))...)
	second, _ := lockcore.NewItemLocker(e.db, e.data, fast("second", lockcore.WithHeartbeat(0))...)
	l1, err := first.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcore.ItemLease, 1)
	go func() {
		l2, err := second.Acquire(ctx, key, lockcore.WaitUpTo(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitQueued(t, e, key, 1)
	if err := l1.Release(ctx); err != nil { // hands the item over to the waiter's ticket
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	return l1, second, l2
}

// transactUpdate applies upd to key under cond in a TransactWriteItems of one item: a
// caller's own transaction.
func transactUpdate(t *testing.T, e *env, ctx context.Context, key map[string]types.AttributeValue, cond expression.ConditionBuilder, upd expression.UpdateBuilder) error {
	t.Helper()
	b, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{
		Update: &types.Update{TableName: aws.String(e.data), Key: key, UpdateExpression: b.Update(),
			ConditionExpression: b.Condition(), ExpressionAttributeNames: b.Names(), ExpressionAttributeValues: b.Values()},
	}}})
	return err
}

// HeldCondition holds for a lease the queue handed over and that has not written since
// (its ticket, not its id, is in the holder attributes), and for a claimed lease; it
// fails for the lease's predecessor and after the lease was released. A caller's own
// transaction conditioned on it (a decision that unlocks the item) lands for the holder
// only — a condition built from lockedBy = lease id refused the handed-over holder.
func TestItemHeldConditionInCallersTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	key := dataKey("held-condition")
	l1, _, l2 := handedOver(t, e, ctx, key)
	old := l1.HeldCondition()
	write := func(cond expression.ConditionBuilder, v int) error {
		return transactUpdate(t, e, ctx, key, cond, expression.Set(expression.Name("n"), expression.Value(v)))
	}
	if err := write(old, 1); err == nil {
		t.Fatal("the released predecessor's condition held")
	}
	a := lockcore.DefaultItemAttributes
	byID := expression.And(expression.Name(a.LockedBy).Equal(expression.Value(l2.ID())),
		expression.Name(a.Owner).Equal(expression.Value(l2.Owner())))
	if err := write(byID, 3); err == nil {
		t.Fatal("the handed-over holder's id is in lockedBy before its first write; this test no longer tests the handover")
	}
	if err := write(l2.HeldCondition(), 2); err != nil {
		t.Fatalf("the handed-over holder's condition: %v", err)
	}
	if _, err := l2.Update(ctx, addOne(), expression.ConditionBuilder{}); err != nil { // claims it
		t.Fatal(err)
	}
	if err := write(l2.HeldCondition(), 5); err != nil {
		t.Fatalf("the claimed holder's condition: %v", err)
	}
	cond := l2.HeldCondition()
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := write(cond, 7); err == nil {
		t.Fatal("a released lease's condition held")
	}
	if got := readN(t, e, key); got != "5" {
		t.Fatalf("n = %s, want 5", got)
	}
}

// An item released by the caller's own transaction (the holder attributes removed,
// serving left at the holder's ticket, nobody queued behind it) is free: a client that
// found it busy lately, and so starts its next take in the queue form, takes it at once.
// It looped before between the queue form (refused: the item is free) and a skip with
// nothing to skip, and gave up ("the item keeps changing under the take").
func TestItemReleasedByCallersTransactionIsFree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	key := dataKey("caller-released")
	_, second, l2 := handedOver(t, e, ctx, key) // second now knows the item busy
	a := lockcore.DefaultItemAttributes
	unlock := expression.Set(expression.Name("n"), expression.Value(1)).
		Remove(expression.Name(a.LockedBy)).Remove(expression.Name(a.Owner)).
		Remove(expression.Name(a.Until)).Remove(expression.Name(a.LockTime))
	if err := transactUpdate(t, e, ctx, key, l2.HeldCondition(), unlock); err != nil {
		t.Fatalf("the holder's own transaction: %v", err)
	}
	l3, err := second.Acquire(ctx, key, lockcore.WaitUpTo(2*time.Second))
	if err != nil {
		t.Fatalf("take after the caller's release: %v", err)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// droppedWrite fails the next UpdateItem (once armed) as a connection reset that never
// reached the engine, after running between.
type droppedWrite struct {
	lockcore.DynamoDB
	armed   atomic.Bool
	between func()
}

func (f *droppedWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.armed.CompareAndSwap(true, false) {
		f.between()
		return nil, errReset
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

// A write-and-release of an attached handle that failed ambiguously is not settled as
// landed because the item moved on: the handle cannot know its lease was still valid
// (a waiter may have taken a stalled ticket over meanwhile). It reported success for a
// write that never reached the item (found by an outside review).
func TestItemAttachedLostWriteIsNotReportedLanded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	c, _ := lockcore.NewItemLocker(e.db, e.data, fast("c")...)
	la, err := a.Acquire(ctx, dataKey("att")) // a then dies: no heartbeat
	if err != nil {
		t.Fatal(err)
	}
	cDone := make(chan *lockcore.ItemLease, 1)
	go func() {
		lc, err := c.Acquire(ctx, dataKey("att"), lockcore.WaitUpTo(20*time.Second))
		if err != nil {
			t.Errorf("c: %v", err)
		}
		cDone <- lc
	}()
	time.Sleep(2 * time.Second)
	f := &droppedWrite{DynamoDB: e.db}
	var lc *lockcore.ItemLease
	f.between = func() { lc = <-cDone } // c takes the stalled ticket over meanwhile
	b, _ := lockcore.NewItemLocker(f, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	lb, err := b.Attach(dataKey("att"), la.ID())
	if err != nil {
		t.Fatal(err)
	}
	f.armed.Store(true)
	_, err = lb.UpdateAndRelease(ctx, expression.Set(expression.Name("v"), expression.Value(1)), expression.ConditionBuilder{})
	if _, landed := readData(t, e, dataKey("att"))["v"]; err == nil && !landed {
		t.Fatal("UpdateAndRelease reported success, but its write never reached the item")
	}
	if lc != nil {
		_ = lc.Release(ctx)
	}
}

// A waiter's SetIfAbsent attributes are not written while another client holds the
// item: that holder read them absent, and its write conditioned on that failed (found by
// an outside review). The waiter writes them once the item is handed to it.
func TestItemSetIfAbsentWaitsForTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("w")...)
	la, err := a.Acquire(ctx, dataKey("init"))
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   *lockcore.ItemLease
		err error
	}
	done := make(chan res, 1)
	go func() {
		lw, err := w.Acquire(ctx, dataKey("init"), lockcore.WaitUpTo(10*time.Second),
			lockcore.SetIfAbsent(map[string]types.AttributeValue{
				"status": &types.AttributeValueMemberS{Value: "PENDING"},
				"v":      &types.AttributeValueMemberN{Value: "0"},
			}))
		done <- res{lw, err}
	}()
	time.Sleep(300 * time.Millisecond) // w queues behind a
	if _, err := la.UpdateAndRelease(ctx, expression.Set(expression.Name("v"), expression.Value(1)),
		expression.AttributeNotExists(expression.Name("status"))); err != nil { // a read status absent
		t.Fatalf("a waiter's take changed the item under a's lock: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { _ = r.l.Release(ctx) }()
	// w writes what is missing (status), not what a wrote (v).
	got := r.l.Item()
	if s, _ := got["status"].(*types.AttributeValueMemberS); s == nil || s.Value != "PENDING" {
		t.Errorf("w's item: status %v, want PENDING", got["status"])
	}
	if v, _ := got["v"].(*types.AttributeValueMemberN); v == nil || v.Value != "1" {
		t.Errorf("w's item: v %v, want a's 1", got["v"])
	}
	stored := readData(t, e, dataKey("init"))
	if s, _ := stored["status"].(*types.AttributeValueMemberS); s == nil || s.Value != "PENDING" {
		t.Errorf("stored status %v, want PENDING", stored["status"])
	}
}
