package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// A Queue waiter's transaction can land after a later place's: the later ticket is
// issued, the earlier number can never be (the counter passed it), and its waiter takes
// a new place behind. It must neither enter while the later ticket holds nor get a
// token below it.
func TestQueueLaterPlaceLandsFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	aPlace := make(chan int64, 1)
	resume := make(chan struct{})
	var tries atomic.Int32
	a, _ := lockcore.NewQueue(e.db, e.locks, fast("a", lockcore.WithBeforeIssueHook(func(_ string, n int64) {
		if tries.Add(1) == 1 {
			aPlace <- n
			<-resume // its transaction is delayed past the later one's
		}
	}))...)
	b, _ := lockcore.NewQueue(e.db, e.locks, fast("b")...)
	type res struct {
		l   *lockcore.Lease
		err error
	}
	aDone := make(chan res, 1)
	go func() {
		l, err := a.Acquire(ctx, "late")
		aDone <- res{l, err}
	}()
	pa := <-aPlace
	lb, err := b.Acquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= lockcore.Fence(pa) {
		t.Fatalf("b's ticket %d is not after a's place %d", lb.Token(), pa)
	}
	close(resume)
	select {
	case r := <-aDone:
		t.Fatalf("a returned (%v, %v) while b holds the lock", r.l, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-aDone
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Release(ctx)
	if r.l.Token() <= lb.Token() {
		t.Fatalf("a entered after b with token %d, not above b's %d", r.l.Token(), lb.Token())
	}
	if n := tries.Load(); n < 2 {
		t.Fatalf("a tried %d numbers; its first one could not be issued after b's", n)
	}
}

// A queue whose counter an earlier release moved (one per ticket, no place row) goes on
// from its counter: the first acquisition of this release gets the next ticket, not a
// token the queue already gave out.
func TestQueueGoesOnFromAnOlderCounter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.locks), Item: map[string]types.AttributeValue{
		"pk":   &types.AttributeValueMemberS{Value: "old"},
		"sk":   &types.AttributeValueMemberS{Value: "queue#counter"},
		"next": &types.AttributeValueMemberN{Value: "41"},
	}}); err != nil {
		t.Fatal(err)
	}
	q, _ := lockcore.NewQueue(e.db, e.locks, fast("a")...)
	for want := lockcore.Fence(42); want <= 43; want++ {
		l, err := q.Acquire(ctx, "old")
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() != want {
			t.Fatalf("token %d, want %d (the counter was at %d)", l.Token(), want, want-1)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// staleQueries serves the Queue's eventually consistent Queries a view that a stale
// replica or a careless reader could give: none of the rows (a view from before the
// waiter's row existed), or only the last row read (the waiter's own, with the rows
// ahead of it missing).
type staleQueries struct {
	lockcore.DynamoDB
	onlyLast bool
	served   atomic.Int32 // eventually consistent Queries answered with such a view
}

func (f *staleQueries) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := f.DynamoDB.Query(ctx, in, o...)
	if err != nil || aws.ToBool(in.ConsistentRead) || len(out.LastEvaluatedKey) != 0 {
		return out, err
	}
	f.served.Add(1)
	stale := *out
	stale.Items = nil
	if f.onlyLast && len(out.Items) > 0 {
		stale.Items = out.Items[len(out.Items)-1:]
	}
	return &stale, nil
}

// A Queue waiter far back reads eventually consistently; such a view may miss its own
// row or the rows ahead of it. Neither may end its wait: it looks again, consistently.
func TestQueueEventuallyConsistentViewDecidesNothing(t *testing.T) {
	for _, onlyLast := range []bool{false, true} {
		name := "without its own row"
		if onlyLast {
			name = "without the rows ahead"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, time.Minute)
			h, _ := lockcore.NewQueue(e.db, e.locks, fast("h")...)
			h2, _ := lockcore.NewQueue(e.db, e.locks, fast("h2")...)
			f := &staleQueries{DynamoDB: e.db, onlyLast: onlyLast}
			w, _ := lockcore.NewQueue(f, e.locks, fast("w")...)
			lh, err := h.Acquire(ctx, "ec")
			if err != nil {
				t.Fatal(err)
			}
			var ov overlap
			ov.enter()
			h2Done := make(chan error, 1)
			go func() {
				l, err := h2.Acquire(ctx, "ec")
				if err == nil {
					ov.enter()
					time.Sleep(50 * time.Millisecond)
					ov.exit()
					err = l.Release(ctx)
				}
				h2Done <- err
			}()
			time.Sleep(200 * time.Millisecond) // h2 is next in line, w behind it
			wDone := make(chan error, 1)
			go func() {
				l, err := w.Acquire(ctx, "ec")
				if err == nil {
					ov.enter()
					ov.exit()
					err = l.Release(ctx)
				}
				wDone <- err
			}()
			time.Sleep(time.Second) // w polls, far back
			ov.exit()
			if err := lh.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-h2Done; err != nil {
				t.Fatal(err)
			}
			if err := <-wDone; err != nil {
				t.Fatalf("w's wait ended with %v", err)
			}
			if m := ov.max.Load(); m > 1 {
				t.Fatalf("%d holders at once", m)
			}
			if f.served.Load() == 0 {
				t.Fatal("setup: w never read eventually consistently")
			}
		})
	}
}

// oldQueueClient issues and holds Queue tickets as the release before places did: it
// reads the counter, tries "counter + 1" in a transaction conditioned on the counter
// being equal to the value read, waits until its row is the first one, and releases by
// deleting its row.
type oldQueueClient struct {
	db    lockcore.DynamoDB
	table string
	owner string
}

func (c oldQueueClient) acquire(ctx context.Context, key string, n int) (ticket int64, sk string, err error) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	num := func(v int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }
	counterKey := map[string]types.AttributeValue{"pk": s(key), "sk": s("queue#counter")}
	leaseID := fmt.Sprintf("%s#%d", c.owner, n)
	for {
		got, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(c.table), Key: counterKey, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, "", err
		}
		var cur int64
		if v, ok := got.Item["next"].(*types.AttributeValueMemberN); ok {
			cur, _ = strconv.ParseInt(v.Value, 10, 64)
		}
		cond := expression.Equal(expression.Name("next"), expression.Value(cur))
		if cur == 0 {
			cond = expression.AttributeNotExists(expression.Name("next"))
		}
		ce, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(expression.Set(expression.Name("next"), expression.Value(cur+1))).Build()
		ticket, sk = cur+1, fmt.Sprintf("queue#t#%020d", cur+1)
		now := time.Now()
		_, err = c.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{TableName: aws.String(c.table), Key: counterKey, ConditionExpression: ce.Condition(),
				UpdateExpression: ce.Update(), ExpressionAttributeNames: ce.Names(), ExpressionAttributeValues: ce.Values()}},
			{Put: &types.Put{TableName: aws.String(c.table), Item: map[string]types.AttributeValue{
				"pk": s(key), "sk": s(sk), "ticket": num(ticket), "leaseId": s(leaseID), "owner": s(c.owner),
				"rev": num(1), "hb": num(now.UnixMilli()), "until": num(now.Add(time.Minute).UnixMilli()),
				"leaseMs": num(time.Minute.Milliseconds()), "state": s("held"), "expiresAt": num(now.Add(2 * time.Minute).Unix()),
			}, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		}})
		if err == nil {
			break
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return 0, "", err
		}
		time.Sleep(time.Millisecond)
	}
	kc := expression.Key("pk").Equal(expression.Value(key)).
		And(expression.Key("sk").Between(expression.Value("queue#t#"), expression.Value(sk)))
	ke, _ := expression.NewBuilder().WithKeyCondition(kc).Build()
	for {
		out, err := c.db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(c.table), KeyConditionExpression: ke.KeyCondition(),
			ExpressionAttributeNames: ke.Names(), ExpressionAttributeValues: ke.Values(), ConsistentRead: aws.Bool(true), Limit: aws.Int32(1)})
		if err != nil {
			return 0, "", err
		}
		if len(out.Items) > 0 && out.Items[0]["sk"].(*types.AttributeValueMemberS).Value == sk {
			return ticket, sk, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c oldQueueClient) release(ctx context.Context, key, sk string) error {
	_, err := c.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(c.table), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: key}, "sk": &types.AttributeValueMemberS{Value: sk}}})
	return err
}

// During a rolling deploy clients of the release before places and of this one share a
// queue: both issue a ticket only in a transaction that moves the counter up to it from
// below, so they still hold one at a time, in ticket order.
func TestQueueMixedReleasesOneHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const perClient, clients = 8, 3
	var (
		ov       overlap
		tokens   counter // only its fencing check: tickets strictly rise in holding order
		sections atomic.Int32
		wg       sync.WaitGroup
	)
	held := func(tk int64) {
		ov.enter()
		tokens.fence(lockcore.Fence(tk))
		sections.Add(1)
		time.Sleep(3 * time.Millisecond)
		ov.exit()
	}
	for i := range clients {
		old := oldQueueClient{db: e.db, table: e.locks, owner: fmt.Sprintf("old%d", i)}
		q, _ := lockcore.NewQueue(e.db, e.locks, fast(fmt.Sprintf("new%d", i))...)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for n := range perClient {
				tk, sk, err := old.acquire(ctx, "mixed", n)
				if err != nil {
					t.Error(err)
					return
				}
				held(tk)
				if err := old.release(ctx, "mixed", sk); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range perClient {
				l, err := q.Acquire(ctx, "mixed")
				if err != nil {
					t.Error(err)
					return
				}
				held(int64(l.Token()))
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m := ov.max.Load(); m > 1 {
		t.Fatalf("%d holders at once", m)
	}
	if n := sections.Load(); n != 2*clients*perClient {
		t.Fatalf("%d sections, want %d", n, 2*clients*perClient)
	}
	if tokens.regress > 0 {
		t.Fatalf("tickets in the order of holding did not rise %d times", tokens.regress)
	}
}

// droppedFirstIssue fails a Queue's first ticket transaction as a connection reset that
// never reached the engine, and can make the next place's ADD slow.
type droppedFirstIssue struct {
	lockcore.DynamoDB
	dropped atomic.Bool
	slowAdd atomic.Bool
	delay   time.Duration
}

func (f *droppedFirstIssue) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.ReturnValues == types.ReturnValueUpdatedNew && f.slowAdd.CompareAndSwap(true, false) {
		time.Sleep(f.delay)
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

func (f *droppedFirstIssue) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if f.dropped.CompareAndSwap(false, true) {
		return nil, errReset
	}
	return f.DynamoDB.TransactWriteItems(ctx, in, o...)
}

// An ambiguous ticket transaction that is settled as never landing (a later ticket
// passed its number) leaves the waiter's next ticket its own validity: a lease counted
// from the settled attempt's send time came back already lost when taking the next place
// was slow (found by an outside review: the Acquire withdrew its valid ticket and failed
// with ErrLeaseLost).
func TestQueueSettledUncertaintyDoesNotAgeNextTicket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const lease = time.Second
	opts := func(owner string, extra ...lockcore.Option) []lockcore.Option {
		return fast(owner, append([]lockcore.Option{lockcore.WithMinLease(lease), lockcore.WithLease(lease)}, extra...)...)
	}
	retrying := make(chan int64, 1)
	passed := make(chan struct{})
	var calls atomic.Int32
	fdb := &droppedFirstIssue{DynamoDB: e.db, delay: 3 * lease / 2}
	a, _ := lockcore.NewQueue(fdb, e.locks, opts("a", lockcore.WithBeforeIssueHook(func(_ string, n int64) {
		if calls.Add(1) == 2 { // the uncertain number, tried again
			retrying <- n
			<-passed
			fdb.slowAdd.Store(true) // the next place's ADD
		}
	}))...)
	b, _ := lockcore.NewQueue(e.db, e.locks, opts("b")...)
	type res struct {
		l   *lockcore.Lease
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, err := a.Acquire(ctx, "aged", lockcore.WaitUpTo(20*time.Second))
		done <- res{l, err}
	}()
	tk := <-retrying
	lb, err := b.Acquire(ctx, "aged")
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= lockcore.Fence(tk) {
		t.Fatalf("setup: b's ticket %d does not pass a's uncertain number %d", lb.Token(), tk)
	}
	close(passed)
	time.Sleep(3*lease/2 + 500*time.Millisecond)
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("a's Acquire failed after its uncertain number was settled and a new ticket issued: %v (lost: %v)",
			r.err, errors.Is(r.err, lockcore.ErrLeaseLost))
	}
	defer func() { _ = r.l.Release(ctx) }()
	if rem := r.l.Remaining(); rem < lease/2 {
		t.Fatalf("a's fresh lease has %s of validity left, want about %s", rem, lease)
	}
	if calls.Load() < 3 {
		t.Fatalf("setup: a issued %d numbers", calls.Load())
	}
}

// frozenQueries answers every eventually consistent Query for a first page with the
// first answer it got for that page size (a replica that stopped catching up) and counts
// deletes. Later pages are read from the table.
type frozenQueries struct {
	lockcore.DynamoDB
	mu      sync.Mutex
	frozen  map[int32]*dynamodb.QueryOutput // by Limit (0: none)
	deletes atomic.Int32
}

func (f *frozenQueries) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if aws.ToBool(in.ConsistentRead) || in.ExclusiveStartKey != nil {
		return f.DynamoDB.Query(ctx, in, o...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	limit := aws.ToInt32(in.Limit)
	if f.frozen[limit] == nil {
		out, err := f.DynamoDB.Query(ctx, in, o...)
		if err != nil {
			return nil, err
		}
		if f.frozen == nil {
			f.frozen = map[int32]*dynamodb.QueryOutput{}
		}
		f.frozen[limit] = out
	}
	c := *f.frozen[limit]
	return &c, nil
}

func (f *frozenQueries) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	f.deletes.Add(1)
	return f.DynamoDB.DeleteItem(ctx, in, o...)
}

// A waiter far back reads only the first rows of the queue, eventually consistently. An
// old view shows rows it has deleted already (dead holders and waiters): it must not
// delete (and read) them again at every poll — without a pause when they were all the
// rows read — for as long as the view stays old (found by an outside review).
func TestQueueEvictionIsConfirmedConsistently(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const lease = time.Second
	opts := func(owner string) []lockcore.Option {
		return fast(owner, lockcore.WithMinLease(lease), lockcore.WithLease(lease),
			lockcore.WithTakeover(lockcore.WallClockTakeover(50*time.Millisecond)))
	}
	// A holder and four waiters, all of which die: five dead rows, more than one poll reads.
	var cuts []*cutOff
	for i := range 5 {
		c := &cutOff{DynamoDB: e.db}
		cuts = append(cuts, c)
		q, _ := lockcore.NewQueue(c, e.locks, opts(fmt.Sprintf("dead-%d", i))...)
		go func() { _, _ = q.Acquire(ctx, "evict", lockcore.WaitUpTo(20*time.Second)) }()
		time.Sleep(100 * time.Millisecond) // in this order
	}
	for _, c := range cuts {
		c.cut.Store(true)
	}
	f := &frozenQueries{DynamoDB: e.db}
	w, _ := lockcore.NewQueue(f, e.locks, opts("w")...)
	wctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	l, err := w.Acquire(wctx, "evict")
	if err != nil {
		t.Fatalf("w did not get the lock after the dead rows were deleted: %v (%d deletes)", err, f.deletes.Load())
	}
	if n := f.deletes.Load(); n > 7 { // 5 dead rows, w's own release, one to spare
		t.Errorf("w sent %d deletes for 5 dead rows", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// throttledQueries refuses every Query while on, as a throttled table does.
type throttledQueries struct {
	lockcore.DynamoDB
	on      atomic.Bool
	refused atomic.Int32
}

func (f *throttledQueries) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if f.on.Load() {
		f.refused.Add(1)
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("throttled (test)")}
	}
	return f.DynamoDB.Query(ctx, in, o...)
}

// A Queue waiter whose reads are throttled backs off exponentially (up to the client's
// cap) instead of asking again every backoffBase: a throttled table is not helped by
// being asked hundreds of times a second by every waiter.
func TestQueueWaiterBacksOffWhenThrottled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	h, _ := lockcore.NewQueue(e.db, e.locks, fast("h")...)
	lh, err := h.Acquire(ctx, "throttled")
	if err != nil {
		t.Fatal(err)
	}
	f := &throttledQueries{DynamoDB: e.db}
	w, _ := lockcore.NewQueue(f, e.locks, fast("w")...) // backoff 2 ms .. 50 ms
	done := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx, "throttled")
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // w is queued
	f.on.Store(true)
	time.Sleep(time.Second)
	f.on.Store(false)
	// Capped at 50 ms with full jitter: about 40 in a second; every 2 ms: about 500.
	if n := f.refused.Load(); n > 120 {
		t.Errorf("%d reads in a second of throttling", n)
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ecCount counts the Queue's eventually consistent Queries and, with stale set, answers
// them as staleQueries does (none of the rows).
type ecCount struct {
	lockcore.DynamoDB
	stale atomic.Bool
	ec    atomic.Int32
}

func (f *ecCount) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := f.DynamoDB.Query(ctx, in, o...)
	if err != nil || aws.ToBool(in.ConsistentRead) {
		return out, err
	}
	f.ec.Add(1)
	if f.stale.Load() {
		stale := *out
		stale.Items, stale.LastEvaluatedKey = nil, nil
		return &stale, nil
	}
	return out, err
}

// A client whose last wait on a Queue found a line reads its place eventually
// consistently at first (a busy queue's waiters are mostly far back). Such a first read
// decides nothing: on a free lock that a stale view shows empty (our row missing), the
// take still succeeds, after a consistent read. A NoWait take reads consistently
// whatever came before: it is refused only on what a consistent read shows.
func TestQueueFirstReadAfterALineDecidesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	h, _ := lockcore.NewQueue(e.db, e.locks, fast("h")...)
	f := &ecCount{DynamoDB: e.db}
	w, _ := lockcore.NewQueue(f, e.locks, fast("w")...)

	// w waits behind h: its next wait starts from an eventually consistent read.
	lh, err := h.Acquire(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx, "first")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	f.stale.Store(true)
	f.ec.Store(0)
	l, err := w.Acquire(ctx, "first")
	if err != nil {
		t.Fatalf("free lock, stale first view: %v", err)
	}
	if f.ec.Load() == 0 {
		t.Fatal("setup: the first read after a line was consistent")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Another line, then a NoWait take of the free lock.
	f.stale.Store(false)
	lh, err = h.Acquire(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		l, err := w.Acquire(ctx, "first")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	f.ec.Store(0)
	l, err = w.TryAcquire(ctx, "first")
	if err != nil {
		t.Fatalf("NoWait take of a free lock: %v", err)
	}
	if n := f.ec.Load(); n != 0 {
		t.Fatalf("a NoWait take read eventually consistently (%d Queries)", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// refusedRenewals throttles every UpdateItem while on (a Queue's renewals: its
// heartbeats), and turns itself off with the first Query whose first row is owner's
// (the read that finds the waiter served).
type refusedRenewals struct {
	lockcore.DynamoDB
	owner string
	on    atomic.Bool
}

func (f *refusedRenewals) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := f.DynamoDB.Query(ctx, in, o...)
	if err == nil && len(out.Items) > 0 {
		if v, ok := out.Items[0]["owner"].(*types.AttributeValueMemberS); ok && v.Value == f.owner {
			f.on.Store(false)
		}
	}
	return out, err
}

func (f *refusedRenewals) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.on.Load() {
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("test: renewals refused")}
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

// A Queue lease whose validity mostly went by unrenewed while its holder waited (its
// heartbeats throttled) is refreshed before Acquire returns it, as the Mutex's and the
// TicketLock's are: the caller gets about a lease, not what the wait left.
func TestQueueEntryRefreshesAnAgedLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const lease = 3 * time.Second
	opts := func(owner string, extra ...lockcore.Option) []lockcore.Option {
		return fast(owner, append([]lockcore.Option{lockcore.WithMinLease(lease), lockcore.WithLease(lease)}, extra...)...)
	}
	a, _ := lockcore.NewQueue(e.db, e.locks, opts("a")...)
	fb := &refusedRenewals{DynamoDB: e.db, owner: "b"}
	// b's renewals are refused from its ticket on (its place in line is a write too).
	b, _ := lockcore.NewQueue(fb, e.locks, opts("b", lockcore.WithAfterTicketHook(func(string, int64) { fb.on.Store(true) }))...)
	la, err := a.Acquire(ctx, "aged-entry")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcore.Lease, 1)
	go func() {
		lb, err := b.Acquire(ctx, "aged-entry")
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	time.Sleep(lease * 6 / 10) // b's validity, counted from its ticket, is 60 % gone
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	defer func() { _ = lb.Release(ctx) }()
	if rem := lb.Remaining(); rem < lease/2 {
		t.Fatalf("b's lease has %s of validity left at entry, want about %s", rem, lease)
	}
}
