package lockcore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// The ItemLocker's version of TestTicketTimeoutIsDecidedOnAConsistentView: a waiter far
// back reads the item eventually consistently, and such a view may be old. The wait
// policy's time must run out on what a consistent read shows: before, WaitUpTo ended
// with a timeout (and the ticket, handed over meanwhile, passed on) on an item whose
// line had moved on to the waiter.
func TestItemTimeoutIsDecidedOnAConsistentView(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	key := dataKey("old-item-view")
	slow := lockcore.WithLease(10 * time.Second) // no takeover within the test
	open := func(db lockcore.DynamoDB, owner string) *lockcore.ItemLocker {
		il, err := lockcore.NewItemLocker(db, e.data, fast(owner, slow)...)
		if err != nil {
			t.Fatal(err)
		}
		return il
	}
	h := open(e.db, "h")
	lh, err := h.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Two waiters behind h, then w: far back, so it reads eventually consistently.
	type held struct {
		il *lockcore.ItemLocker
		l  *lockcore.ItemLease
	}
	var ahead []chan held
	for i := range 2 {
		x := open(e.db, fmt.Sprintf("x%d", i))
		got := make(chan held, 1)
		go func() {
			l, err := x.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- held{x, l}
		}()
		ahead = append(ahead, got)
		waitQueued(t, e, key, i+1)
	}
	f := &frozenTicketView{DynamoDB: e.db}
	w := open(f, "w")
	type res struct {
		l   *lockcore.ItemLease
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, err := w.Acquire(ctx, key, lockcore.WaitUpTo(1500*time.Millisecond))
		done <- res{l, err}
	}()
	waitQueued(t, e, key, 3)
	out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.data), ConsistentRead: aws.Bool(true), Key: key})
	if err != nil || out.Item == nil {
		t.Fatalf("setup: the item: %v", err)
	}
	f.view = out.Item
	f.armed.Store(true)
	// The line ahead of w moves on; w's replica does not show it.
	if _, err := h.UpdateAndRelease(ctx, lh, addOne(), nil); err != nil {
		t.Fatal(err)
	}
	for _, got := range ahead {
		x := <-got
		if x.l == nil {
			return
		}
		if _, err := x.il.UpdateAndRelease(ctx, x.l, addOne(), nil); err != nil {
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
	if _, err := w.UpdateAndRelease(ctx, r.l, addOne(), nil); err != nil {
		t.Fatal(err)
	}
}
