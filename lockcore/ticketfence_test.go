package lockcore_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// resetThenThrottledPuts fails the first PutItem as a connection reset (the request
// never landed, but the caller cannot know) and refuses every later one as throttled.
type resetThenThrottledPuts struct {
	lockcore.DynamoDB
	calls atomic.Int32
}

func (f *resetThenThrottledPuts) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if f.calls.Add(1) == 1 {
		return nil, errReset
	}
	return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("throttled (test)")}
}

// Versioned.Update's attempts are bounded by MaxAttempts also when an ambiguous write is
// followed by throttled ones: with a write pending, a throttled attempt neither settled
// it nor counted against the bound, so Update merged and wrote until its context ended.
func TestVersionedAmbiguousThenThrottledBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 10*time.Second)
	it := dataKey("x")
	it["version"] = &types.AttributeValueMemberN{Value: "5"}
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.data), Item: it}); err != nil {
		t.Fatal(err)
	}
	f := &resetThenThrottledPuts{DynamoDB: e.db}
	v, _ := lockcore.NewVersioned(f, e.data, fast("v", lockcore.WithMaxAttempts(3))...)
	merges := 0
	_, _, err := v.Update(ctx, dataKey("x"), func(map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
		merges++
		return map[string]types.AttributeValue{"a": &types.AttributeValueMemberN{Value: "1"}}, nil
	})
	t.Logf("Update: %v; %d writes, %d merges", err, f.calls.Load(), merges)
	if n := f.calls.Load(); n > 3 || merges > 3 {
		t.Fatalf("MaxAttempts(3): %d writes, %d merges (err %v)", n, merges, err)
	}
	if !errors.Is(err, lockcore.ErrUnknownOutcome) {
		t.Fatalf("Update: %v, want ErrUnknownOutcome (the first write may still land)", err)
	}
}

// resetThenBumped fails the first PutItem as a connection reset without landing it, and
// lets another writer move the item's version just before each later one.
type resetThenBumped struct {
	lockcore.DynamoDB
	calls atomic.Int32
	bump  func()
}

func (f *resetThenBumped) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if f.calls.Add(1) == 1 {
		return nil, errReset
	}
	f.bump()
	return f.DynamoDB.PutItem(ctx, in, o...)
}

// The same bound when the attempts after an ambiguous one lose to other writers: the
// read that settles the ambiguous write (another writer's version followed it) must not
// start an attempt beyond MaxAttempts.
func TestVersionedAmbiguousThenConflictsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 10*time.Second)
	seed := func(ver string) {
		it := dataKey("x")
		it["version"] = &types.AttributeValueMemberN{Value: ver}
		if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.data), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	seed("5")
	next := 5
	f := &resetThenBumped{DynamoDB: e.db}
	f.bump = func() { next++; seed(strconv.Itoa(next)) }
	v, _ := lockcore.NewVersioned(f, e.data, fast("v", lockcore.WithMaxAttempts(2))...)
	merges := 0
	_, _, err := v.Update(ctx, dataKey("x"), func(map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
		merges++
		return map[string]types.AttributeValue{"a": &types.AttributeValueMemberN{Value: "1"}}, nil
	})
	t.Logf("Update: %v; %d writes, %d merges", err, f.calls.Load(), merges)
	if n := f.calls.Load(); n > 2 || merges > 2 {
		t.Fatalf("MaxAttempts(2): %d writes, %d merges (err %v)", n, merges, err)
	}
	if !errors.Is(err, lockcore.ErrConflict) {
		t.Fatalf("Update: %v, want ErrConflict (the ambiguous write was overtaken, the other lost)", err)
	}
}

// A Versioned item whose version attribute holds no version Update can advance (a string,
// a fraction, a number beyond int64, or the largest int64) is refused at once, without a
// write: Update read it as "no version", wrote conditioned on the attribute's absence
// and burned MaxAttempts reporting ErrConflict — lost to concurrent writers that did not
// exist — and at 2^63-1 it wrote the version -2^63 and returned it.
func TestVersionedRefusesUnusableVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	for i, av := range []types.AttributeValue{
		&types.AttributeValueMemberS{Value: "5"},
		&types.AttributeValueMemberN{Value: "5.5"},
		&types.AttributeValueMemberN{Value: "1e40"},
		&types.AttributeValueMemberN{Value: "9223372036854775807"},
	} {
		k := dataKey("v" + strconv.Itoa(i))
		it := dataKey("v" + strconv.Itoa(i))
		it["version"] = av
		if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.data), Item: it}); err != nil {
			t.Fatal(err)
		}
		v, _ := lockcore.NewVersioned(e.db, e.data, fast("v", lockcore.WithMaxAttempts(3))...)
		merges := 0
		_, ver, err := v.Update(ctx, k, func(map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
			merges++
			return map[string]types.AttributeValue{"a": &types.AttributeValueMemberN{Value: "1"}}, nil
		})
		after := readData(t, e, k)["version"]
		t.Logf("%#v: ver=%d merges=%d err=%v; stored after: %#v", av, ver, merges, err, after)
		if err == nil || errors.Is(err, lockcore.ErrConflict) || merges > 0 {
			t.Errorf("version %#v: Update returned version %d, %v after %d merges; want an error naming the version attribute, no merge", av, ver, err, merges)
		}
		if n, ok := after.(*types.AttributeValueMemberN); ok && n.Value == "-9223372036854775808" {
			t.Errorf("version %#v overflowed to %s", av, n.Value)
		}
	}
}

// beforeTransact runs between once, before the first TransactWriteItems is sent.
type beforeTransact struct {
	lockcore.InspectorAPI
	between func()
	once    sync.Once
}

func (f *beforeTransact) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.once.Do(f.between)
	return f.InspectorAPI.TransactWriteItems(ctx, in, o...)
}

// ForceRelease pins the lease it ends across its attempts by the token, but a holder
// that has not written its row life's fence epoch yet (it crashed between its ticket and
// the epoch, the state force-release exists for) has the token 0<<32 | ticket, the same
// in every life of the row. When the row was deleted (by TTL, or a user) between two
// attempts and a new life's ticket 1 was served, also without an epoch yet, the second
// attempt ended that new holder's lease.
func TestForceReleasePinsTheRowLife(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	hctx, cancel := context.WithCancel(ctx)
	stuck := make(chan struct{})
	entered := make(chan int64, 2)
	defer func() { cancel(); close(stuck) }()
	// Holders that stop between their ticket and their fence epoch.
	holder := func(owner string) {
		tl, err := lockcore.NewTicketLock(e.db, e.locks, fast(owner, lockcore.WithAfterTicketHook(func(_ string, tk int64) {
			entered <- tk
			<-stuck
		}))...)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = tl.Acquire(hctx, "k") }()
		if tk := <-entered; tk != 1 {
			t.Fatalf("%s: ticket %d, want 1", owner, tk)
		}
	}
	holder("a")
	rowKey := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "lock#ticket"}}
	life := func() string {
		out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.locks), Key: rowKey, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := out.Item["life"].(*types.AttributeValueMemberS); ok {
			return s.Value
		}
		return ""
	}
	first := life()
	var second string
	f := &beforeTransact{InspectorAPI: e.db, between: func() {
		// The row goes (TTL, or a user) and b takes ticket 1 of its next life.
		if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks), Key: rowKey}); err != nil {
			t.Error(err)
		}
		holder("b")
		second = life()
	}}
	in, err := lockcore.NewInspector(f, e.locks)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := in.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: lockcore.StrategyTicket, Actor: "ops", Reason: "a crashed"})
	t.Logf("lives %s then %s; ForceRelease: %+v, %v", first, second, rec, err)
	if !errors.Is(err, lockcore.ErrNotHeld) {
		t.Errorf("ForceRelease of a's lease (life %s) returned %+v, %v; want ErrNotHeld: the row's life %s is b's", first, rec, err, second)
	}
	info := func() *lockcore.TicketInfo {
		tl, _ := lockcore.NewTicketLock(e.db, e.locks, fast("c")...)
		i, err := tl.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return i
	}()
	if info.Serving != 1 || !info.Held {
		t.Errorf("b's ticket 1 of the new life was ended: %+v", info)
	}
}

// lateThenLost holds back the first ticket request (an UpdateItem returning ALL_NEW) and
// fails it as a timeout, to be sent later; it lands the second, then runs between (the
// waiter's context ends) and loses its response.
type lateThenLost struct {
	lockcore.DynamoDB
	between func()
	calls   atomic.Int32
	late    chan *dynamodb.UpdateItemInput
}

func (f *lateThenLost) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.ReturnValues != types.ReturnValueAllNew {
		return f.DynamoDB.UpdateItem(ctx, in, o...)
	}
	switch f.calls.Add(1) {
	case 1:
		f.late <- in
		return nil, errTimeout
	case 2:
		out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
		if err == nil {
			f.between()
			return nil, errReset
		}
		return out, err
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

// A waiter whose context ends while its ticket request is uncertain withdraws it; when
// the retry had issued the ticket (its response lost), the ticket was withdrawn by
// removing its entry — so the first request, delayed in the network, could still land
// afterwards and issue a ticket nobody holds: the lock idled for a lease. The entry must
// be left as a tombstone, as it is when the waiter learnt of its ticket.
func TestCancelledUncertainTakeLeavesTombstone(t *testing.T) {
	for _, strategy := range []string{"ticket", "mutex"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			actx, cancel := context.WithCancel(ctx)
			f := &lateThenLost{DynamoDB: e.db, between: cancel, late: make(chan *dynamodb.UpdateItemInput, 1)}
			type locker interface {
				Acquire(ctx context.Context, key string, opts ...lockcore.AcquireOption) (*lockcore.Lease, error)
				TryAcquire(ctx context.Context, key string, opts ...lockcore.AcquireOption) (*lockcore.Lease, error)
			}
			newLock := func(db lockcore.DynamoDB, owner string) locker {
				var tl locker
				var err error
				if strategy == "ticket" {
					tl, err = lockcore.NewTicketLock(db, e.locks, fast(owner)...)
				} else {
					tl, err = lockcore.NewMutex(db, e.locks, fast(owner)...)
				}
				if err != nil {
					t.Fatal(err)
				}
				return tl
			}
			a := newLock(f, "a")
			if l, err := a.Acquire(actx, "k"); err == nil {
				_ = l.Release(ctx)
				t.Fatal("Acquire succeeded with its context cancelled")
			}
			_, lateErr := e.db.UpdateItem(ctx, <-f.late) // the delayed first request arrives
			t.Logf("late ticket request: %v", lateErr)
			lb, err := newLock(e.db, "b").TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("TryAcquire after a gave up: %v (a ticket nobody holds)", err)
			}
			_ = lb.Release(ctx)
		})
	}
}

// unsentTake fails every ticket request (an UpdateItem returning ALL_NEW) as a
// connection reset without sending it, and runs between after the first.
type unsentTake struct {
	lockcore.DynamoDB
	between func()
	once    sync.Once
}

func (f *unsentTake) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.ReturnValues == types.ReturnValueAllNew {
		f.once.Do(f.between)
		return nil, errReset
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

// A TicketLock row's TTL (expiresAt) must stay beyond its holder's lease end plus the
// grace: TTL removing a held row lets the next client start a new life and take the
// lock while the holder's lease is still valid. A waiter that gave up wrote a TTL from
// its client's default lease, not the lease the lock's clients use (LeaseDuration), and
// moved the row's TTL before the holder's lease end.
func TestTicketWithdrawKeepsTheHoldersTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const lease = 40 * time.Minute
	opts := func(owner string) []lockcore.Option {
		return fast(owner, lockcore.WithRetention(time.Minute)) // default lease 3 s, grace 15 min
	}
	a, _ := lockcore.NewTicketLock(e.db, e.locks, opts("a")...)
	la, err := a.Acquire(ctx, "k", lockcore.LeaseDuration(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Release(ctx) }()
	rowKey := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "lock#ticket"}}
	check := func(what string) {
		t.Helper()
		out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.locks), Key: rowKey, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := strconv.ParseInt(out.Item["expiresAt"].(*types.AttributeValueMemberN).Value, 10, 64)
		ttl := time.Unix(sec, 0)
		if end := time.Now().Add(la.Remaining()); ttl.Before(end) {
			t.Errorf("after %s the row's TTL is %s, before the holder's lease end %s", what, ttl.Format(time.TimeOnly), end.Format(time.TimeOnly))
		}
	}
	check("a's acquisition")
	b, _ := lockcore.NewTicketLock(e.db, e.locks, opts("b")...)
	if _, err := b.Acquire(ctx, "k", lockcore.LeaseDuration(lease), lockcore.WaitUpTo(50*time.Millisecond)); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("b: %v, want ErrLockHeld", err)
	}
	check("b's withdrawn ticket")
	cctx, cancel := context.WithCancel(ctx)
	c, _ := lockcore.NewTicketLock(&unsentTake{DynamoDB: e.db, between: cancel}, e.locks, opts("c")...)
	if _, err := c.Acquire(cctx, "k", lockcore.LeaseDuration(lease)); err == nil {
		t.Fatal("c: Acquire succeeded")
	}
	check("c's tombstone")
}

// A guarded write of a TicketLock holder whose ticket was skipped (force-released here,
// as after a pause) fails with ErrLeaseLost; the LeaseError names the current holder
// ("who holds the lock now, if anyone") as it does for a Mutex: it named nobody.
func TestTicketGuardedWriteNamesTheCurrentHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewTicketLock(e.db, e.locks, fast("a")...)
	b, _ := lockcore.NewTicketLock(e.db, e.locks, fast("b")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	guard, err := a.GuardCheck(la)
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
		i, err := a.Get(ctx, "k")
		return err == nil && i.Waiting == 1
	})
	if _, err := in.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: lockcore.StrategyTicket, Actor: "ops", Reason: "paused",
		LeaseID: "ticket 1", Token: la.Token()}); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	defer func() { _ = lb.Release(ctx) }()
	err = guardedPut(ctx, e, guard, la, "a")
	t.Logf("a's guarded write: %v", err)
	var le *lockcore.LeaseError
	if !errors.As(err, &le) || !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("a's guarded write after its ticket was skipped: %v, want a LeaseError matching ErrLeaseLost", err)
	}
	if le.Current == nil || le.Current.Token != lb.Token() {
		t.Fatalf("LeaseError.Current = %+v, want b's lease (token %d)", le.Current, lb.Token())
	}
}

// A TicketLock's lease may change while nobody holds or waits. A waiter that gave up
// before the holder released leaves its withdrawn ticket to be served next, with no
// entry: nobody holds or waits, but a client with another lease was refused with
// ErrInvalidOption ("in use with a 3s lease") until a client with the old lease came
// and skipped the withdrawn ticket.
func TestTicketLeaseChangeAfterWithdrawnWaiter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewTicketLock(e.db, e.locks, fast("a")...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := lockcore.NewTicketLock(e.db, e.locks, fast("b")...)
	if _, err := b.Acquire(ctx, "k", lockcore.WaitUpTo(50*time.Millisecond)); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("b: %v, want ErrLockHeld", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := a.Get(ctx, "k")
	t.Logf("after a's release: %+v", info)
	c, _ := lockcore.NewTicketLock(e.db, e.locks, fast("c", lockcore.WithLease(5*time.Second))...)
	lc, err := c.Acquire(ctx, "k", lockcore.WaitUpTo(time.Second))
	if err != nil {
		t.Fatalf("c (5 s lease) on a lock nobody holds or waits for: %v", err)
	}
	_ = lc.Release(ctx)
}
