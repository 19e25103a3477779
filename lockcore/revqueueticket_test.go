package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// A Queue lease whose validity mostly went by unrenewed while its holder waited is
// renewed at entry (0f328cf). That renewal was not bounded by the validity left, as a
// heartbeat's is: while the table kept refusing the row's writes it went on past the
// lease's end (the heartbeat meanwhile reported the lease lost), and when a retry landed
// at last Acquire returned a lease already lost — Done closed, no heartbeat, its row
// left in the queue for the next waiters to wait out.
func TestQueueEntryRenewalEndsWithTheValidity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const lease = 3 * time.Second
	opts := func(owner string, extra ...lockcore.Option) []lockcore.Option {
		return fast(owner, append([]lockcore.Option{lockcore.WithMinLease(lease), lockcore.WithLease(lease)}, extra...)...)
	}
	a, _ := lockcore.NewQueue(e.db, e.locks, opts("a")...)
	// b's writes are throttled from its ticket on (as in TestQueueEntryRefreshesAnAgedLease),
	// and pass again only well after its validity ran out.
	fb := &throttledWrites{DynamoDB: e.db}
	ticketAt := make(chan time.Time, 1)
	b, _ := lockcore.NewQueue(fb, e.locks, opts("b", lockcore.WithAfterTicketHook(func(string, int64) {
		fb.on.Store(true)
		ticketAt <- time.Now()
	}))...)
	la, err := a.Acquire(ctx, "aged-throttled")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lockcore.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		lb, err := b.Acquire(ctx, "aged-throttled", lockcore.WaitUpTo(10*time.Second))
		got <- result{lb, err}
	}()
	at := <-ticketAt
	time.Sleep(lease * 6 / 10) // b's validity, counted from its ticket, is 60 % gone
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(at.Add(lease + time.Second))) // b's validity ran out a second ago
	fb.on.Store(false)
	r := <-got
	if r.err != nil {
		t.Logf("b's Acquire: %v", r.err)
		return
	}
	defer func() { _ = r.l.Release(ctx) }()
	select {
	case <-r.l.Done():
		t.Fatalf("Acquire returned a lease already lost (%v; %s of validity left)", r.l.Err(), r.l.Remaining())
	default:
	}
}

// oldQueueView answers eventually consistent Queries, once armed, with view: the first
// rows of a line that has since been served and gone (a replica that has not caught up).
type oldQueueView struct {
	lockcore.DynamoDB
	armed  atomic.Bool
	view   *dynamodb.QueryOutput
	served atomic.Int32
}

func (f *oldQueueView) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if !f.armed.Load() || aws.ToBool(in.ConsistentRead) {
		return f.DynamoDB.Query(ctx, in, o...)
	}
	f.served.Add(1)
	c := *f.view
	return &c, nil
}

// A client whose last wait on a Queue found a line reads its place eventually
// consistently at first (4e28c9d), and a waiter that view shows far back goes on reading
// so. Such reads may be old; they decided that the wait policy's time ran out: on a free
// lock, WaitUpTo(1s) reported ErrWaitTimeout, held by a holder long gone, where a
// strongly consistent read (the first read before 4e28c9d) showed the waiter's turn.
func TestQueueTimeoutIsDecidedOnAConsistentView(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const key = "old-view"
	h, _ := lockcore.NewQueue(e.db, e.locks, fast("h")...)
	f := &oldQueueView{DynamoDB: e.db}
	w, _ := lockcore.NewQueue(f, e.locks, fast("w")...)
	lh, err := h.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A line: w and three more behind h (w's wait finds others ahead).
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		q := w
		if i > 0 {
			q, _ = lockcore.NewQueue(e.db, e.locks, fast(fmt.Sprintf("x%d", i))...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := q.Acquire(ctx, key, lockcore.WaitUpTo(10*time.Second))
			if err == nil {
				err = l.Release(ctx)
			}
			errs <- err
		}()
		time.Sleep(100 * time.Millisecond) // in this order
	}
	// The first rows of that line, as a lagging replica goes on showing them.
	view, err := e.db.Query(ctx, &dynamodb.QueryInput{
		TableName:              aws.String(e.locks),
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :t)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: key}, ":t": &types.AttributeValueMemberS{Value: "queue#t#"},
		},
		Limit:          aws.Int32(4),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil || len(view.Items) != 4 || len(view.LastEvaluatedKey) == 0 {
		t.Fatalf("setup: the line's first rows: %v (%d rows)", err, len(view.Items))
	}
	f.view = view
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	// The lock is free.
	f.armed.Store(true)
	l, err := w.Acquire(ctx, key, lockcore.WaitUpTo(time.Second))
	if f.served.Load() == 0 {
		t.Error("setup: w never read eventually consistently")
	}
	if err != nil {
		t.Fatalf("free lock, old eventually consistent view: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// noOldItems answers failed conditional UpdateItems without the old item, as an engine
// that does not return ReturnValuesOnConditionCheckFailure items does (the design's
// fallback: a consistent read).
type noOldItems struct {
	lockcore.DynamoDB
}

func (f noOldItems) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, &types.ConditionalCheckFailedException{Message: ccf.Message}
	}
	return out, err
}

// Since 8a15cd1 a Queue renewal is conditioned on the recorded lease end too, so a failed
// condition no longer means the row is not ours: where the row records a later end (a
// clock stepped back, or a later renewal that landed first) the renewal keeps it. It
// told the two apart by the old item only: on an engine that returns none it reported
// a lease it still held lost (and left its row for the next waiter to wait out).
func TestQueueRenewKeepsLaterLeaseEndWithoutOldItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	clk := &steppable{}
	clk.d.Store(int64(time.Second))
	a, _ := lockcore.NewQueue(noOldItems{e.db}, e.locks, fast("a", lockcore.WithClock(clk))...)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	clk.d.Store(0) // stepped back by a second
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("renew after the clock stepped back, without old items: %v", err)
	}
	// A renewal of a lease whose row is gone still reports it lost.
	lb, err := a.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "k2"},
			"sk": &types.AttributeValueMemberS{Value: lb.Namespace()},
		}}); err != nil {
		t.Fatal(err)
	}
	if err := lb.Renew(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("renew of a deleted row: %v, want ErrLeaseLost", err)
	}
}
