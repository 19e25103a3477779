package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Every way an ItemLocker tenure ends by its holder records the hold time its waiters
// plan their reads with — UpdateAndRelease, the locking read's usual end, and a release
// in the caller's own transaction (ReleaseUpdate) included: without it 16 clients passed
// a 15 s-lease item eight times more slowly, each waiter reading three times as often.
// Each also publishes it on the item (lockHoldMs), for the waiters of other clients, and
// leaves the item free; Item() never shows it.
func TestItemReleaseRecordsHoldTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(t *testing.T, e *env, il *lockcore.ItemLocker, l *lockcore.ItemLease, stopHB context.CancelFunc)
	}{
		{"Release", func(t *testing.T, _ *env, _ *lockcore.ItemLocker, l *lockcore.ItemLease, _ context.CancelFunc) {
			if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}},
		{"UpdateAndRelease", func(t *testing.T, _ *env, il *lockcore.ItemLocker, l *lockcore.ItemLease, _ context.CancelFunc) {
			if _, err := il.UpdateAndRelease(ctxT(t, 10*time.Second), l, expression.Set(expression.Name("n"), expression.Value(1)), nil); err != nil {
				t.Fatal(err)
			}
		}},
		{"ReleaseUpdate", func(t *testing.T, e *env, _ *lockcore.ItemLocker, l *lockcore.ItemLease, stopHB context.CancelFunc) {
			upd := expression.Set(expression.Name("n"), expression.Value(1))
			ex, err := expression.NewBuilder().WithUpdate(l.ReleaseUpdate(upd)).WithCondition(l.HeldCondition()).Build()
			if err != nil {
				t.Fatal(err)
			}
			stopHB()
			_, err = e.db.TransactWriteItems(ctxT(t, 10*time.Second), &dynamodb.TransactWriteItemsInput{
				TransactItems: []types.TransactWriteItem{{Update: &types.Update{
					TableName: aws.String(e.data), Key: dataKey("SKU#hold-ReleaseUpdate"),
					UpdateExpression: ex.Update(), ConditionExpression: ex.Condition(),
					ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
				}}},
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			il, err := lockcore.NewItemLocker(e.db, e.data, fast("holder")...)
			if err != nil {
				t.Fatal(err)
			}
			key := dataKey("SKU#hold-" + tc.name)
			hbCtx, stopHB := context.WithCancel(ctxT(t, 10*time.Second))
			defer stopHB()
			l, err := il.Acquire(hbCtx, key)
			if err != nil {
				t.Fatal(err)
			}
			if n := lockcore.HoldsKnown(il); n != 0 {
				t.Fatalf("hold times known before the release: %d, want 0", n)
			}
			time.Sleep(20 * time.Millisecond) // a hold of at least 20 ms
			tc.release(t, e, il, l, stopHB)
			if n := lockcore.HoldsKnown(il); n != 1 {
				t.Errorf("hold times known after %s: %d, want 1", tc.name, n)
			}
			out, err := e.db.GetItem(ctxT(t, 10*time.Second), &dynamodb.GetItemInput{TableName: aws.String(e.data), Key: key, ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			a := lockcore.DefaultItemAttributes
			if hm, ok := out.Item[a.HoldMs].(*types.AttributeValueMemberN); !ok || hm.Value == "0" {
				t.Errorf("after %s the item's %s is %v, want the hold time (ms, ≥ 20)", tc.name, a.HoldMs, out.Item[a.HoldMs])
			}
			if _, ok := out.Item[a.LockedBy]; ok {
				t.Errorf("after %s the item still has %s", tc.name, a.LockedBy)
			}
			other, err := lockcore.NewItemLocker(e.db, e.data, fast("other")...)
			if err != nil {
				t.Fatal(err)
			}
			l2, err := other.TryAcquire(ctxT(t, 10*time.Second), key)
			if err != nil {
				t.Fatalf("after %s the item is not free: %v", tc.name, err)
			}
			if _, ok := l2.Item()[a.HoldMs]; ok {
				t.Errorf("Item() shows the lock attribute %s", a.HoldMs)
			}
			_ = l2.Release(ctxT(t, 10*time.Second))
		})
	}
}
