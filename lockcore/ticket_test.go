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

// callCounter counts the calls a client makes.
type callCounter struct {
	lockcore.DynamoDB
	n atomic.Int64
}

func (c *callCounter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.n.Add(1)
	return c.DynamoDB.GetItem(ctx, in, o...)
}

func (c *callCounter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.n.Add(1)
	return c.DynamoDB.UpdateItem(ctx, in, o...)
}

func ticketRowKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: key}, "sk": &types.AttributeValueMemberS{Value: "lock#ticket"}}
}

func newTicket(t *testing.T, db lockcore.DynamoDB, table, owner string, extra ...lockcore.Option) *lockcore.TicketLock {
	t.Helper()
	tl, err := lockcore.NewTicketLock(db, table, fast(owner, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// An uncontended critical section is two calls (take a ticket, release) once the row
// has its fence epoch; tokens rise.
func TestTicketUncontended(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	cc := &callCounter{DynamoDB: e.db}
	tl := newTicket(t, cc, e.locks, "a")
	var last lockcore.Fence
	for i := range 3 {
		before := cc.n.Load()
		l, err := tl.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("cycle %d: token %d not above %d", i, l.Token(), last)
		}
		last = l.Token()
		info, err := tl.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Waiting != 0 || info.Token != l.Token() {
			t.Fatalf("Get while held: %+v (token %d)", info, l.Token())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		calls := cc.n.Load() - before - 1 // minus Get
		if i == 0 && calls != 4 {         // + the fence epoch of the row's first life
			t.Errorf("first cycle: %d calls, want 4", calls)
		}
		if i > 0 && calls != 2 {
			t.Errorf("cycle %d: %d calls, want 2", i, calls)
		}
	}
	info, err := tl.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Held || info.Waiting != 0 {
		t.Fatalf("Get after release: %+v", info)
	}
}

func TestContentionTicket(t *testing.T) {
	e := newEnv(t)
	hammerTicket(t, e, e.db, "SKU#hot")
}

// hammerTicket runs the contention acceptance bar (hotWorkers × hotIters increments of
// one counter, one holder at a time, tokens rising) on TicketLocks using db.
func hammerTicket(t *testing.T, e *env, db lockcore.DynamoDB, pk string) {
	t.Helper()
	var ov overlap
	c := &counter{e: e, pk: pk}
	locks := make([]*lockcore.TicketLock, hotWorkers)
	for w := range locks {
		tl, err := lockcore.NewTicketLock(db, e.locks, hot(fmt.Sprintf("worker-%d", w))...)
		if err != nil {
			t.Fatal(err)
		}
		locks[w] = tl
	}
	hammer(t, hotWorkers, hotIters, func(ctx context.Context, w int) error {
		l, err := locks[w].Acquire(ctx, "counter")
		if err != nil {
			return err
		}
		ov.enter()
		c.fence(l.Token())
		c.write(t, ctx, c.read(t, ctx)+1)
		ov.exit()
		return l.Release(ctx)
	})
	assertHammer(t, c, &ov)
}

// waitNext waits until the row has issued ticket n.
func waitNext(t *testing.T, ctx context.Context, tl *lockcore.TicketLock, key string, n int64) {
	t.Helper()
	for {
		info, err := tl.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Next >= n {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Ten waiters that take their tickets in a known order acquire in exactly that order.
func TestTicketFIFOOrder(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	first := newTicket(t, e.db, e.locks, "first")
	lf, err := first.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 10 {
		tl := newTicket(t, e.db, e.locks, fmt.Sprintf("w%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := tl.Acquire(ctx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = l.Release(ctx)
		}()
		waitNext(t, ctx, first, "k", int64(i)+2)
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

// A crashed holder (its heartbeat stopped, never released) is skipped within 1.25 ×
// lease by a waiter that was already waiting. When the old holder wakes, its release
// and its guarded transaction are refused.
func TestTicketCrashedHolderTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newTicket(t, e.db, e.locks, "a")
	b := newTicket(t, e.db, e.locks, "b")
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
	select {
	case r := <-got:
		t.Fatalf("b acquired while a was heartbeating: %v", r.err)
	default:
	}
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
	ctx := ctxT(t, time.Minute)
	// The old holder wakes: a guarded write and its release are refused.
	data := dataKey("guarded")
	data["n"] = &types.AttributeValueMemberN{Value: "1"}
	_, err = e.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		guardOf(a.GuardCheck(la)),
		{Put: &types.Put{TableName: aws.String(e.data), Item: data}},
	}})
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		t.Fatalf("guarded write of the old holder: %v, want a cancelled transaction", err)
	}
	if _, err := e.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		guardOf(b.GuardCheck(r.l)),
		{Put: &types.Put{TableName: aws.String(e.data), Item: data}},
	}}); err != nil {
		t.Fatalf("guarded write of the new holder: %v", err)
	}
	mustNot(t, la.Release(ctx), lockcore.ErrLeaseLost)
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter that gives up (WaitUpTo) withdraws its ticket: when the lock is released the
// waiter behind it gets it at once, not after a lease.
func TestTicketWithdrawnTicketSkipped(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a := newTicket(t, e.db, e.locks, "a")
	b := newTicket(t, e.db, e.locks, "b")
	c := newTicket(t, e.db, e.locks, "c")
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(ctx, "k", lockcore.Wait(lockcore.WaitUpTo(100*time.Millisecond)))
	mustNot(t, err, lockcore.ErrWaitTimeout)
	got := make(chan time.Time, 1)
	go func() {
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		} else {
			_ = l.Release(ctx)
		}
		got <- time.Now()
	}()
	waitNext(t, ctx, a, "k", 3)
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	took := (<-got).Sub(released)
	t.Logf("c acquired %s after the release", took)
	if took > lease/2 {
		t.Errorf("c waited %s behind a withdrawn ticket, want well under the lease (%s)", took, lease)
	}
}

// cutOff lets a client's calls through until cut, then fails every call: a process
// that crashed while waiting, without withdrawing its ticket.
type cutOff struct {
	lockcore.DynamoDB
	cut atomic.Bool
}

var errCut = errors.New("crashed")

func (c *cutOff) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.DynamoDB.GetItem(ctx, in, o...)
}

func (c *cutOff) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.DynamoDB.Query(ctx, in, o...)
}

func (c *cutOff) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.DynamoDB.DeleteItem(ctx, in, o...)
}

func (c *cutOff) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	out, err := c.DynamoDB.UpdateItem(ctx, in, o...)
	if strings.Contains(aws.ToString(in.UpdateExpression), "ADD") && strings.Contains(aws.ToString(in.ConditionExpression), "attribute_not_exists") {
		c.cut.Store(true) // crash right after taking the ticket
	}
	return out, err
}

// A waiter that crashed with a ticket does not block the queue for good: its ticket is
// skipped after a lease, and the waiters behind it still enter in order.
func TestTicketCrashedWaiterSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a := newTicket(t, e.db, e.locks, "a")
	crashed := newTicket(t, &cutOff{DynamoDB: e.db}, e.locks, "crashed")
	c := newTicket(t, e.db, e.locks, "c")
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, _ = crashed.Acquire(wctx, "k")
	}()
	waitNext(t, ctx, a, "k", 2)
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "k")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitNext(t, ctx, a, "k", 3)
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	took := time.Since(released)
	t.Logf("c acquired %s after the release, behind a crashed waiter", took)
	if took < lease*9/10 || took > lease*5/4 {
		t.Errorf("c acquired after %s, want about one lease (%s): the dead ticket must be waited out, then skipped", took, lease)
	}
}

// TryAcquire on a busy lock fails without writing anything; a lock whose only tickets
// were withdrawn counts as free.
func TestTicketTryAcquire(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a := newTicket(t, e.db, e.locks, "a")
	b := newTicket(t, e.db, e.locks, "b")
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := a.Get(ctx, "k")
	_, err = b.TryAcquire(ctx, "k")
	mustNot(t, err, lockcore.ErrLockHeld)
	after, _ := a.Get(ctx, "k")
	if *before != *after {
		t.Fatalf("a failed TryAcquire changed the row: %+v → %+v", before, after)
	}
	// A waiter gives up; then the holder releases: only a withdrawn ticket is left.
	_, err = b.Acquire(ctx, "k", lockcore.Wait(lockcore.WaitUpTo(50*time.Millisecond)))
	mustNot(t, err, lockcore.ErrWaitTimeout)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire behind a withdrawn ticket: %v", err)
	}
	_ = lb.Release(ctx)
}

// Clients with a skewed wall clock cannot take a live lease: takeover is by observation.
func TestTicketClockSkewCannotSteal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a := newTicket(t, e.db, e.locks, "a", lockcore.WithClock(skewed{-time.Hour}))
	b := newTicket(t, e.db, e.locks, "b", lockcore.WithClock(skewed{time.Hour}))
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(ctx, "k", lockcore.Wait(lockcore.WaitUpTo(2*lease)))
	mustNot(t, err, lockcore.ErrWaitTimeout)
	if err := la.Release(ctx); err != nil {
		t.Fatalf("holder lost its lease to a skewed client: %v", err)
	}
}

// lostOnce lands the first UpdateItem each predicate matches, runs between, and then
// reports a lost response (a connection reset after the engine applied the write).
type lostOnce struct {
	lockcore.DynamoDB
	mu      sync.Mutex
	preds   []func(*dynamodb.UpdateItemInput) bool
	between func()
}

func (f *lostOnce) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
	if err != nil {
		return out, err
	}
	f.mu.Lock()
	fired := false
	for i, p := range f.preds {
		if p != nil && p(in) {
			f.preds[i], fired = nil, true
			break
		}
	}
	f.mu.Unlock()
	if fired {
		if f.between != nil {
			f.between()
		}
		return nil, fmt.Errorf("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")
	}
	return out, err
}

func isTake(in *dynamodb.UpdateItemInput) bool { return in.ReturnValues == types.ReturnValueAllNew }

func isRelease(in *dynamodb.UpdateItemInput) bool {
	u := aws.ToString(in.UpdateExpression)
	return strings.Contains(u, "ADD") && strings.Contains(u, "REMOVE")
}

// A ticket request that landed but whose response was lost is settled by its entry:
// the client holds exactly one ticket. A release whose response was lost, with the next
// waiter entering before the retry, is reported as a clean release.
func TestTicketAmbiguousTakeAndRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	b := newTicket(t, e.db, e.locks, "b")
	f := &lostOnce{DynamoDB: e.db, preds: []func(*dynamodb.UpdateItemInput) bool{isTake}}
	a := newTicket(t, f, e.locks, "a")
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := b.Get(ctx, "k")
	if info.Next != 1 || !info.Held || info.Token != la.Token() {
		t.Fatalf("after an ambiguous ticket request: %+v, want one ticket issued and held", info)
	}
	got := make(chan *lockcore.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitNext(t, ctx, b, "k", 2)
	entered := make(chan struct{})
	f.mu.Lock()
	f.preds = []func(*dynamodb.UpdateItemInput) bool{isRelease}
	f.between = func() {
		select { // b notices the handoff and enters before a retries
		case <-entered:
		case <-time.After(5 * time.Second):
		}
	}
	f.mu.Unlock()
	var lb *lockcore.Lease
	go func() { lb = <-got; close(entered) }()
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release with a lost reply: %v", err)
	}
	<-entered
	if lb == nil {
		t.Fatal("b did not acquire")
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every client of one ticket lock must use the same lease while it is in use: the
// takeover clock of waiters is the lease recorded in the row.
func TestTicketLeaseMismatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a := newTicket(t, e.db, e.locks, "a")
	b := newTicket(t, e.db, e.locks, "b", lockcore.WithLease(5*time.Second))
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(ctx, "k")
	mustNot(t, err, lockcore.ErrInvalidOption)
	t.Logf("mismatch: %v", err)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "k") // free now: the lease may change
	if err != nil {
		t.Fatalf("after release, a new lease length: %v", err)
	}
	_ = lb.Release(ctx)
}

func TestTicketFenceSurvivesRowDeletion(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	tl := newTicket(t, e.db, e.locks, "a")
	var last lockcore.Fence
	for i := range 4 {
		l, err := tl.Acquire(ctx, "k")
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
			if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks), Key: ticketRowKey("k")}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A holder paused past its lease, whose row was deleted and created again meanwhile
// (a new life, tickets counting from 1 again), cannot release, renew or guard with the
// new life's lease.
func TestTicketPausedHolderAcrossRowLives(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a := newTicket(t, e.db, e.locks, "a")
	b := newTicket(t, e.db, e.locks, "b")
	pauseCtx, pause := context.WithCancel(ctx)
	la, err := a.Acquire(pauseCtx, "k")
	if err != nil {
		t.Fatal(err)
	}
	pause() // no more heartbeats
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks), Key: ticketRowKey("k")}); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token of the new life %d not above %d", lb.Token(), la.Token())
	}
	mustNot(t, la.Renew(ctx), lockcore.ErrLeaseLost)
	mustNot(t, la.Release(ctx), lockcore.ErrLeaseLost)
	if info, _ := b.Get(ctx, "k"); !info.Held || info.Token != lb.Token() {
		t.Fatalf("the new holder's lease was disturbed: %+v", info)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTicketOptions(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name  string
		opts  []lockcore.Option
		field string
	}{
		{"no heartbeat", []lockcore.Option{lockcore.WithHeartbeat(0)}, "heartbeat"},
		{"wall-clock takeover", []lockcore.Option{lockcore.WithTakeover(lockcore.WallClockTakeover(time.Second))}, "takeover"},
		{"short lease", []lockcore.Option{lockcore.WithLease(time.Second)}, "lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lockcore.NewTicketLock(e.db, e.locks, tc.opts...)
			var oe *lockcore.OptionError
			if !errors.As(err, &oe) || oe.Field != tc.field || !errors.Is(err, lockcore.ErrInvalidOption) {
				t.Fatalf("got %v, want an OptionError naming %q", err, tc.field)
			}
		})
	}
	if _, err := lockcore.NewTicketLock(nil, e.locks); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Fatalf("nil db: %v", err)
	}
	tl := newTicket(t, e.db, e.locks, "a")
	ctx := ctxT(t, time.Minute)
	_, err := tl.Acquire(ctx, "k", lockcore.Data([]byte("x")))
	mustNot(t, err, lockcore.ErrInvalidOption)
	_, err = tl.Acquire(ctx, "")
	mustNot(t, err, lockcore.ErrInvalidKey)
	_, err = tl.Acquire(ctx, strings.Repeat("k", lockcore.MaxPartitionKeyBytes+1))
	mustNot(t, err, lockcore.ErrInvalidKey)
	_, err = tl.Acquire(ctx, "k", lockcore.Namespace(strings.Repeat("n", lockcore.MaxSortKeyBytes)))
	mustNot(t, err, lockcore.ErrInvalidKey)
}

// TestTicketTakeCollidingEntryIDIsNotOurs: a take whose random entry id is already on the
// row (another waiter's entry, or a tombstone) draws another id. It used to take any entry
// under its id for its own earlier, ambiguous attempt — two clients sharing one ticket,
// two holders — and to fail on a tombstone ("ticket request withdrawn"). The Mutex and the
// ItemLocker already drew a new id.
func TestTicketTakeCollidingEntryIDIsNotOurs(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewTicketLock(e.db, e.locks, fast("a", lockcore.WithEntryIDs("SAMEid01"))...)
	b, _ := lockcore.NewTicketLock(e.db, e.locks, fast("b", lockcore.WithEntryIDs("SAMEid01"))...)
	la, err := a.Acquire(ctx, "collide")
	if err != nil {
		t.Fatal(err)
	}
	// b's first id is a's live entry: b must queue behind a, not hold a's ticket.
	if _, err := b.Acquire(ctx, "collide", lockcore.NoWait()); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("b with a's entry id: %v, want ErrLockHeld (b must not take a's ticket for its own)", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A withdrawn entry's tombstone under the id a new take draws: the take goes on.
	w, _ := lockcore.NewTicketLock(e.db, e.locks, fast("w", lockcore.WithEntryIDs("TOMBid01"))...)
	h, _ := lockcore.NewTicketLock(e.db, e.locks, fast("h")...)
	lh, err := h.Acquire(ctx, "collide-tomb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Acquire(ctx, "collide-tomb", lockcore.WaitUpTo(200*time.Millisecond)); !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("w: %v, want ErrWaitTimeout", err)
	}
	c, _ := lockcore.NewTicketLock(e.db, e.locks, fast("c", lockcore.WithEntryIDs("TOMBid01"))...)
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lc, err := c.Acquire(ctx, "collide-tomb", lockcore.WaitUpTo(5*time.Second))
	if err != nil {
		t.Fatalf("c, whose first id is a withdrawn entry's: %v", err)
	}
	_ = lc.Release(ctx)
}

// isTicketTake matches a TicketLock's take (the update that issues a ticket).
func isTicketTake(in *dynamodb.UpdateItemInput) bool {
	hasNext, hasLease := false, false
	for _, n := range in.ExpressionAttributeNames {
		hasNext = hasNext || n == "next"
		hasLease = hasLease || n == "leaseMs"
	}
	return hasNext && hasLease && in.ReturnValues == "ALL_NEW"
}

// TestTicketSkipLeavesTombstoneForLateTake: a's take is retried after an ambiguous error
// (its first request held back) and the retry lands; a then stops heartbeating and b skips
// it after a lease. The skip removed a's entry, so the late copy of a's first take could
// still land and issue a ticket nobody holds: the next caller waited a whole lease for it.
// The skip now leaves a tombstone (as the Mutex's does), and the late copy fails.
func TestTicketSkipLeavesTombstoneForLateTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	lw := &lateWrite{DynamoDB: e.db, match: isTicketTake, armed: true}
	a, err := lockcore.NewTicketLock(lw, e.locks, fast("a")...)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := lockcore.NewTicketLock(e.db, e.locks, fast("b")...)
	actx, stop := context.WithCancel(ctx)
	if _, err := a.Acquire(actx, "k"); err != nil {
		t.Fatal(err)
	}
	stop() // a's heartbeat ends with its context: a stalls
	if lw.held == nil {
		t.Fatal("no take held back")
	}
	lb, err := b.Acquire(ctx, "k") // skips a, stalled, after its lease
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lw.release(ctx); err == nil {
		t.Error("the late copy of a's take issued a ticket under a's entry id")
	}
}
