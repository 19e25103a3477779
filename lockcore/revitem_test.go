package lockcore_test

// Tests of an adversarial review of the locking read (ItemLocker).

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// An attached handle's first write, delayed in the network, was retried (the retry
// landed) and lands late, after a later write of the same handle: its condition only
// refused a copy landing on top of itself, so it applied the write a second time.
func TestItemAttachedLateDuplicateRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	la, err := a.Acquire(ctx, dataKey("attdup"))
	if err != nil {
		t.Fatal(err)
	}
	f := &lateWrite{DynamoDB: e.db, match: func(in *dynamodb.UpdateItemInput) bool { return strings.Contains(updExpr(in), "ADD") }}
	b, _ := lockcore.NewItemLocker(f, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	lb, err := b.Attach(dataKey("attdup"), la.ID())
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.armed = true
	f.mu.Unlock()
	if _, err := lb.Update(ctx, addN, expression.ConditionBuilder{}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := lb.Update(ctx, expression.Set(expression.Name("other"), expression.Value("x")), expression.ConditionBuilder{}); err != nil {
		t.Fatalf("second Update: %v", err)
	}
	err = f.release(ctx) // the first request finally arrives, the lease still held
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Errorf("the late duplicate was not refused by its condition: %v", err)
	}
	if got := readN(t, e, dataKey("attdup")); got != "1" {
		t.Fatalf("n = %s after one Update of ADD n 1: the delayed duplicate applied it again", got)
	}
	_ = la.Release(ctx)
}

// An UpdateAndRelease whose request never reached the item (a reset before it was sent)
// while the item was deleted and created again by another client's lock: the new life
// of the item had served ticket 1 and moved on, which the settling read took for our
// own release of ticket 1. It reported success for a write that never landed.
func TestItemUpdateAndReleaseNotSettledByAnotherLifeOfTheItem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	key := dataKey("life")
	c, _ := lockcore.NewItemLocker(e.db, e.data, fast("c")...)
	f := &droppedWrite{DynamoDB: e.db}
	f.between = func() {
		// The user deletes the item; another client locks the new item, writes and
		// releases it (its ticket is 1 again).
		if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.data, Key: key}); err != nil {
			t.Error(err)
			return
		}
		lc, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Errorf("c: %v", err)
			return
		}
		if _, err := lc.UpdateAndRelease(ctx, expression.Set(expression.Name("by"), expression.Value("c")), expression.ConditionBuilder{}); err != nil {
			t.Errorf("c: %v", err)
		}
	}
	a, _ := lockcore.NewItemLocker(f, e.data, fast("a")...)
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if la.Token() != 1 {
		t.Fatalf("setup: token %d", la.Token())
	}
	f.armed.Store(true)
	_, err = la.UpdateAndRelease(ctx, addN, expression.ConditionBuilder{})
	t.Logf("err = %v", err)
	if got := readN(t, e, key); got != "<none>" {
		t.Fatalf("setup: n = %s, the write landed", got)
	}
	if err == nil {
		t.Fatal("UpdateAndRelease reported success, but its write never reached the item")
	}
	if !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("want ErrLeaseLost, got %v", err)
	}
}
