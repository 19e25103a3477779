package lockcore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// throttleWrites refuses every write (as throttled: definitely not applied) while on is set.
type throttleWrites struct {
	lockcore.DynamoDB
	on atomic.Bool
}

var errThrottled = &smithy.GenericAPIError{Code: "ThrottlingException", Message: "test: throttled", Fault: smithy.FaultServer}

func (c *throttleWrites) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if c.on.Load() {
		return nil, errThrottled
	}
	return c.DynamoDB.UpdateItem(ctx, in, o...)
}

func (c *throttleWrites) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if c.on.Load() {
		return nil, errThrottled
	}
	return c.DynamoDB.PutItem(ctx, in, o...)
}

func (c *throttleWrites) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if c.on.Load() {
		return nil, errThrottled
	}
	return c.DynamoDB.TransactWriteItems(ctx, in, o...)
}

// TestReleaseAfterLocalExpiryFreesTheLock: a lease whose heartbeat could not renew it
// (every write throttled) ends locally when its validity runs out, reported lost. The row
// may still name it: nobody took it over. Its Release still reports the loss, and it used
// to write nothing, so the lock stayed held for about one more lease until a waiter
// skipped it (the same after AcquireAll failed part-way on such a key). Release now
// clears the row if it is still ours, and the next caller gets the lock at once.
func TestReleaseAfterLocalExpiryFreesTheLock(t *testing.T) {
	e := newEnv(t)
	type locker struct {
		name    string
		acquire func(ctx context.Context, db lockcore.DynamoDB, owner string) (*lockcore.Lease, error)
	}
	lockers := []locker{
		{"Mutex", func(ctx context.Context, db lockcore.DynamoDB, owner string) (*lockcore.Lease, error) {
			m, err := lockcore.NewMutex(db, e.locks, fast(owner)...)
			if err != nil {
				return nil, err
			}
			return m.Acquire(ctx, "local-expiry-mutex", lockcore.NoWait())
		}},
		{"TicketLock", func(ctx context.Context, db lockcore.DynamoDB, owner string) (*lockcore.Lease, error) {
			tl, err := lockcore.NewTicketLock(db, e.locks, fast(owner)...)
			if err != nil {
				return nil, err
			}
			return tl.Acquire(ctx, "local-expiry-ticket", lockcore.NoWait())
		}},
		{"Queue", func(ctx context.Context, db lockcore.DynamoDB, owner string) (*lockcore.Lease, error) {
			q, err := lockcore.NewQueue(db, e.locks, fast(owner)...)
			if err != nil {
				return nil, err
			}
			return q.Acquire(ctx, "local-expiry-queue", lockcore.NoWait())
		}},
		{"ItemLocker", func(ctx context.Context, db lockcore.DynamoDB, owner string) (*lockcore.Lease, error) {
			il, err := lockcore.NewItemLocker(db, e.data, fast(owner)...)
			if err != nil {
				return nil, err
			}
			l, err := il.Acquire(ctx, dataKey("local-expiry-item"), lockcore.NoWait())
			if err != nil {
				return nil, err
			}
			return l.Lease, nil
		}},
		{"AcquireAll", func(ctx context.Context, db lockcore.DynamoDB, owner string) (*lockcore.Lease, error) {
			m, err := lockcore.NewMutex(db, e.locks, fast(owner)...)
			if err != nil {
				return nil, err
			}
			ml, err := m.AcquireAll(ctx, []string{"local-expiry-all"}, lockcore.NoWait())
			if err != nil {
				return nil, err
			}
			return ml.Leases()[0], nil
		}},
	}
	for _, lk := range lockers {
		t.Run(lk.name, func(t *testing.T) {
			t.Parallel() // each on a key of its own, through a writer of its own
			ctx := ctxT(t, 60*time.Second)
			w := &throttleWrites{DynamoDB: e.db}
			a, err := lk.acquire(ctx, w, "a")
			if err != nil {
				t.Fatalf("a: %v", err)
			}
			w.on.Store(true) // a's heartbeat cannot renew: its validity runs out
			select {
			case <-a.Done():
			case <-ctx.Done():
				t.Fatal("a's lease never ended though no renewal could be written")
			}
			if !errors.Is(a.Err(), lockcore.ErrLeaseLost) {
				t.Fatalf("a.Err() = %v, want ErrLeaseLost", a.Err())
			}
			w.on.Store(false)
			if err := a.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
				t.Fatalf("a.Release = %v, want ErrLeaseLost (the lease had run out)", err)
			}
			b, err := lk.acquire(ctx, e.db, "b")
			if err != nil {
				t.Fatalf("b, right after a's Release: %v (a's row still held the lock)", err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatalf("b.Release: %v", err)
			}
		})
	}
}
