package lockcore_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// delayedClaim holds back the first claim take (an ItemLocker take of a free item), runs
// cancel and reports a timeout: the request is still on its way. With landAndLose, the
// next claim lands and its response is lost, then cancel runs.
type delayedClaim struct {
	lockcore.DynamoDB
	cancel      func()
	landAndLose bool
	failReads   atomic.Int32 // reads to fail after the claim that landed
	unread      bool         // with landAndLose: the take's re-read fails too
	calls       atomic.Int32
	late        chan *dynamodb.UpdateItemInput
}

func (f *delayedClaim) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !isItemClaim(in) {
		return f.DynamoDB.UpdateItem(ctx, in, o...)
	}
	switch f.calls.Add(1) {
	case 1:
		f.late <- in
		if !f.landAndLose {
			f.cancel()
		}
		return nil, errTimeout
	case 2:
		if f.landAndLose {
			out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
			if err == nil {
				if f.unread {
					f.failReads.Store(1)
				}
				f.cancel()
				return nil, errReset
			}
			return out, err
		}
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

func (f *delayedClaim) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.failReads.Add(-1) >= 0 {
		return nil, errTimeout
	}
	return f.DynamoDB.GetItem(ctx, in, o...)
}

// An ItemLocker waiter whose context ends while its claim of a free item is uncertain
// gave it up without a tombstone (only a queue take left one): the first request, still
// on its way, then locked the item under a lease id nobody holds, and the item idled for
// a lease (as TicketLock's and Mutex's did before TestCancelledUncertainTakeLeavesTombstone).
func TestItemCancelledUncertainClaimLeavesTombstone(t *testing.T) {
	for _, form := range []string{"unsent-retry", "retry-landed", "retry-landed-unread", "first-lock"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			key := dataKey("claim-" + form)
			if form == "first-lock" {
				// An item never locked before (no queue map yet).
				if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.data, Item: key}); err != nil {
					t.Fatal(err)
				}
			} else {
				// The item was locked before (it has its queue map), and is free.
				c, _ := lockcore.NewItemLocker(e.db, e.data, fast("c")...)
				lc, err := c.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := lc.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			actx, cancel := context.WithCancel(ctx)
			f := &delayedClaim{DynamoDB: e.db, cancel: cancel, landAndLose: strings.HasPrefix(form, "retry-landed"), unread: form == "retry-landed-unread", late: make(chan *dynamodb.UpdateItemInput, 1)}
			a, _ := lockcore.NewItemLocker(f, e.data, fast("a", lockcore.WithHeartbeat(0))...)
			if l, err := a.Acquire(actx, key); err == nil {
				// The retry's claim was learnt of by a re-read: a holds the item; its
				// release must leave the tombstone too.
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, context.Canceled) {
				t.Logf("a's acquire: %v", err)
			}
			_, lateErr := e.db.UpdateItem(ctx, <-f.late) // the delayed first request arrives
			t.Logf("late claim: %v", lateErr)
			b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
			lb, err := b.Acquire(ctx, key, lockcore.NoWait())
			if err != nil {
				t.Fatalf("TryAcquire after a gave up: %v (a lease nobody holds)", err)
			}
			_ = lb.Release(ctx)
		})
	}
}

// Tombstones of ambiguous takes are left in the item's Waiters map (a claim's too, with
// its release, at once after the take, or when its waiter gives up) and removed, once
// old, by the release of a later holder — but only of one that queued: a holder that
// claimed the free item removed none, so an item locked without contention kept every
// tombstone it ever got, growing (and costing more WCU per write) without bound.
func TestItemClaimReleaseRemovesOldTombstones(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	key := dataKey("claim-gc")
	old := "x" + strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10) // as a tombstone an hour old
	item := map[string]types.AttributeValue{"lockWaiters": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"oldtomb": &types.AttributeValueMemberS{Value: old}}}}
	maps.Copy(item, key)
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.data, Item: item}); err != nil {
		t.Fatal(err)
	}
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := waitersOf(t, e, key); w["oldtomb"] != nil {
		t.Fatalf("a tombstone an hour old is still on the item after a claim and its release: %v", w)
	}
}
