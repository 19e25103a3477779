package lockcore_test

import (
	"context"
	"fmt"
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

// staleTicketView answers every eventually consistent GetItem with one recorded earlier state
// of the row (a state the row really had, as DynamoDB may return shortly after a write).
type staleTicketView struct {
	lockcore.DynamoDB
	mu  sync.Mutex
	old map[string]types.AttributeValue
	n   int
}

func (f *staleTicketView) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if in.ConsistentRead == nil || !*in.ConsistentRead {
		f.mu.Lock()
		old := f.old
		if old != nil {
			f.n++
		}
		f.mu.Unlock()
		if old != nil {
			return &dynamodb.GetItemOutput{Item: old}, nil
		}
	}
	return f.DynamoDB.GetItem(ctx, in, o...)
}

// A waiter far back reads eventually consistent. A stale answer from before the current
// holder's ticket was issued (serving = X, next = X-1: no entry for X yet) makes the
// waiter think ticket X was withdrawn and skip it "at once"; the skip's condition
// (serving, rev, life) still matches, because an uncontended take does not bump rev.
// The live holder X was skipped and the next ticket entered beside it: two holders
// (found by an outside review).
func TestTicketStaleViewNeverSkipsALiveHolder(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	lease := lockcore.WithLease(10 * time.Second)
	fs := &staleTicketView{DynamoDB: e.db}
	a := newTicket(t, e.db, e.locks, "a", lease)
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The idle row after the release: serving = 2, next = 1.
	out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.locks), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "lock#ticket"}}})
	if err != nil || out.Item == nil {
		t.Fatalf("read row: %v %v", out, err)
	}
	idle := out.Item

	b := newTicket(t, e.db, e.locks, "b", lease)
	lb, err := b.Acquire(ctx, "k") // ticket 2, uncontended: rev unchanged
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lb.Release(context.Background()) }()

	c := newTicket(t, e.db, e.locks, "c", lease)
	gotC := make(chan *lockcore.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "k", lockcore.WaitUpTo(4*time.Second)) // ticket 3
		if err == nil {
			gotC <- l
		}
		close(gotC)
	}()
	time.Sleep(300 * time.Millisecond)
	fs.mu.Lock()
	fs.old = idle // d's eventually consistent reads show the idle row of before ticket 2
	fs.mu.Unlock()
	d := newTicket(t, fs, e.locks, "d", lease)
	go func() { _, _ = d.Acquire(ctx, "k", lockcore.WaitUpTo(4*time.Second)) }() // ticket 4

	if lc, ok := <-gotC; ok {
		t.Errorf("two holders: b (ticket 2, Remaining %v, Err %v) and c (token %v, Remaining %v)",
			lb.Remaining(), lb.Err(), lc.Token(), lc.Remaining())
		_ = lc.Release(context.Background())
	}
	fs.mu.Lock()
	t.Logf("stale answers: %d", fs.n)
	fs.mu.Unlock()
}

// skipOnTurn: when armed, a strongly consistent read that shows the reader's turn
// (serving = the only waiter entry's ticket) is answered only after another waiter's
// stalled-holder skip of that ticket landed and after a delay (a GC pause of the reader,
// a slow response): the reader's last read showing an earlier ticket lies more than half
// a lease back.
type skipOnTurn struct {
	lockcore.DynamoDB
	raw   *dynamodb.Client
	mu    sync.Mutex
	armed bool
	delay time.Duration
	spare int // a ticket never skipped (the holder's, which a read before its release shows served)
}

func (s *skipOnTurn) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := s.DynamoDB.GetItem(ctx, in, o...)
	if err != nil || out.Item == nil {
		return out, err
	}
	s.mu.Lock()
	armed := s.armed
	s.mu.Unlock()
	if !armed {
		return out, err
	}
	serving := out.Item["serving"].(*types.AttributeValueMemberN).Value
	for k, v := range out.Item {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok || len(k) < 2 || k[:2] != "w#" {
			continue
		}
		tk, _ := strconv.Atoi(n.Value)
		sv, _ := strconv.Atoi(serving)
		if tk+1 != sv || tk == s.spare {
			continue
		}
		s.mu.Lock()
		s.armed = false
		s.mu.Unlock()
		// Another waiter skips the served ticket (it saw it unchanged for a lease).
		_, uerr := s.raw.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: in.TableName, Key: in.Key,
			UpdateExpression:          aws.String("SET serving = serving + :one, skip = serving ADD rev :one REMOVE #w"),
			ExpressionAttributeNames:  map[string]string{"#w": k},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}})
		if uerr != nil {
			return nil, uerr
		}
		time.Sleep(s.delay)
	}
	return out, err
}

// A waiter that notices its turn late and finds its ticket already skipped requeues and
// gets the lock. The observer should report one acquisition; it also reports a lost
// lease (LeaseLost: "work done under it may have overlapped another holder's") for a
// lease the caller never received.
func TestTicketObserverReportsNoLeaseTheCallerNeverGot(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	var mu sync.Mutex
	var lost []lockcore.LeaseEvent
	obs := lockcore.WithObserver(lockcore.Observer{LeaseLost: func(_ context.Context, ev lockcore.LeaseEvent) {
		mu.Lock()
		lost = append(lost, ev)
		mu.Unlock()
	}})
	h := newTicket(t, e.db, e.locks, "h")
	lh, err := h.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// A read of w's between the arming and h's release shows h's ticket served: it is
	// not the one to skip (on a loaded machine that read came, and h's release failed).
	// (An entry records the counter before its take: h's ticket less one.)
	so := &skipOnTurn{DynamoDB: e.db, raw: e.db, delay: 1700 * time.Millisecond, spare: int(lh.Token().Seq()) - 1}
	w := newTicket(t, so, e.locks, "w", obs)
	got := make(chan error, 1)
	var lw *lockcore.Lease
	go func() {
		var err error
		lw, err = w.Acquire(ctx, "k")
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	so.mu.Lock()
	so.armed = true
	so.mu.Unlock()
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lw.Release(context.Background()) }()
	mu.Lock()
	defer mu.Unlock()
	if len(lost) > 0 {
		t.Errorf("observer reported %d lost lease(s) although the caller got its lease (token %v) and never held another: %+v", len(lost), lw.Token(), lost)
	}
}

// frozenTicketView answers eventually consistent GetItems, once armed, with view: the
// row as it was before the line ahead moved on (a replica that has not caught up).
type frozenTicketView struct {
	lockcore.DynamoDB
	armed  atomic.Bool
	view   map[string]types.AttributeValue
	served atomic.Int32
}

func (f *frozenTicketView) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if !f.armed.Load() || aws.ToBool(in.ConsistentRead) {
		return f.DynamoDB.GetItem(ctx, in, o...)
	}
	f.served.Add(1)
	return &dynamodb.GetItemOutput{Item: f.view}, nil
}

// A TicketLock or Mutex waiter far back reads eventually consistently. Such a view may
// be old: the line it shows may have moved on to the waiter's own ticket. The wait
// policy's time must run out on a consistent view: before, WaitUpTo ended with
// ErrWaitTimeout (and the ticket, served meanwhile, released) on a lock the waiter's turn
// had come to.
func TestTicketTimeoutIsDecidedOnAConsistentView(t *testing.T) {
	type acquirer interface {
		Acquire(ctx context.Context, key string, opts ...lockcore.AcquireOption) (*lockcore.Lease, error)
	}
	slow := lockcore.WithLease(10 * time.Second) // no takeover within the test
	for _, tc := range []struct {
		name, sk string
		open     func(db lockcore.DynamoDB, table, owner string) acquirer
	}{
		{"ticket", "lock#ticket", func(db lockcore.DynamoDB, table, owner string) acquirer {
			return newTicket(t, db, table, owner, slow)
		}},
		{"mutex", "lock", func(db lockcore.DynamoDB, table, owner string) acquirer {
			m, err := lockcore.NewMutex(db, table, fast(owner, slow)...)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			const key = "old-ticket-view"
			lh, err := tc.open(e.db, e.locks, "h").Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			// Two waiters behind h, then w: far back, so it reads eventually consistently.
			var ahead []chan *lockcore.Lease
			for i := range 2 {
				x := tc.open(e.db, e.locks, fmt.Sprintf("x%d", i))
				got := make(chan *lockcore.Lease, 1)
				go func() {
					l, err := x.Acquire(ctx, key)
					if err != nil {
						t.Error(err)
					}
					got <- l
				}()
				ahead = append(ahead, got)
				time.Sleep(100 * time.Millisecond) // in this order
			}
			f := &frozenTicketView{DynamoDB: e.db}
			w := tc.open(f, e.locks, "w")
			type res struct {
				l   *lockcore.Lease
				err error
			}
			done := make(chan res, 1)
			go func() {
				l, err := w.Acquire(ctx, key, lockcore.WaitUpTo(1500*time.Millisecond))
				done <- res{l, err}
			}()
			time.Sleep(200 * time.Millisecond)
			out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.locks), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}, "sk": &types.AttributeValueMemberS{Value: tc.sk}}})
			if err != nil || out.Item == nil {
				t.Fatalf("setup: the row: %v", err)
			}
			f.view = out.Item
			f.armed.Store(true)
			// The line ahead of w moves on; w's replica does not show it.
			if err := lh.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for _, got := range ahead {
				l := <-got
				if l == nil {
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			r := <-done
			if f.served.Load() == 0 {
				t.Error("setup: w never read eventually consistently")
			}
			if r.err != nil {
				t.Fatalf("w's turn came, but its wait ended with %v", r.err)
			}
			_ = r.l.Release(ctx)
		})
	}
}
