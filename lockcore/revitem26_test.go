package lockcore_test

// Tests of review issue 26 on the locking read (ItemLocker): fencing tokens across the
// item's lives, and room for the lock on an item near DynamoDB's size limit.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// fencedWrite writes v to the data item key guarded by token, as a resource fenced with
// an ItemLocker's tokens would be (FenceCondition and FenceUpdate).
func fencedWrite(ctx context.Context, e *env, key map[string]types.AttributeValue, token lockcore.Fence, v string) error {
	b, err := expression.NewBuilder().
		WithCondition(lockcore.FenceCondition("fence", token)).
		WithUpdate(lockcore.FenceUpdate(expression.Set(expression.Name("v"), expression.Value(v)), "fence", token)).
		Build()
	if err != nil {
		return err
	}
	_, err = e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &e.data, Key: key, ConditionExpression: b.Condition(), UpdateExpression: b.Update(),
		ExpressionAttributeNames: b.Names(), ExpressionAttributeValues: b.Values(),
	})
	return err
}

func mustRefuse(t *testing.T, err error, who string) {
	t.Helper()
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("%s's fenced write with its older token: %v, want it refused by its condition", who, err)
	}
}

// An ItemLocker token used as documented to fence a second resource: the item is deleted
// while its holder A (its fourth acquisition: ticket 4) holds it, and B locks it again
// (the lock creates it). B's token must be above A's, so that B's fenced write passes and
// A's later one is refused. (Before: B's token was 1, its write refused, A's accepted.)
// The same across a deletion while unlocked followed by a plain PutItem, and across a
// PutItem replacing the item while it is held.
func TestItemTokensRiseAcrossTheItemsLives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	key, res := dataKey("lives"), dataKey("lives-resource")
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b", lockcore.WithHeartbeat(0))...)
	var last lockcore.Fence
	for i := range 3 {
		l, err := a.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if la.Token() != last+1 {
		t.Fatalf("fourth acquisition: token %d, want %d (the next ticket of this life)", la.Token(), last+1)
	}
	if err := fencedWrite(ctx, e, res, la.Token(), "a"); err != nil {
		t.Fatalf("A's fenced write: %v", err)
	}

	// The item is deleted while A holds it; B's lock creates it again.
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.data, Key: key}); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("after the item's deletion B's token is %d, not above the old holder A's %d: "+
			"a resource fenced with these tokens refuses the current holder and accepts the stale one", lb.Token(), la.Token())
	}
	if err := fencedWrite(ctx, e, res, lb.Token(), "b"); err != nil {
		t.Fatalf("B's fenced write (current holder) refused: %v", err)
	}
	mustRefuse(t, fencedWrite(ctx, e, res, la.Token(), "a-late"), "A (stale holder)")
	if err := la.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("A's release after the deletion: %v, want ErrLeaseLost", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Deleted while unlocked, put again without lock attributes, then locked.
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.data, Key: key}); err != nil {
		t.Fatal(err)
	}
	put := dataKey("lives")
	put["data"] = &types.AttributeValueMemberS{Value: "fresh"}
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.data, Item: put}); err != nil {
		t.Fatal(err)
	}
	lc, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Token() <= lb.Token() {
		t.Fatalf("after a delete and a plain put the token is %d, not above B's %d", lc.Token(), lb.Token())
	}
	if err := fencedWrite(ctx, e, res, lc.Token(), "c"); err != nil {
		t.Fatalf("C's fenced write: %v", err)
	}
	mustRefuse(t, fencedWrite(ctx, e, res, lb.Token(), "b-late"), "B")

	// Replaced by a plain put while held.
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.data, Item: put}); err != nil {
		t.Fatal(err)
	}
	ld, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Release(ctx)
	if ld.Token() <= lc.Token() {
		t.Fatalf("after a put replaced the held item the token is %d, not above the holder's %d", ld.Token(), lc.Token())
	}
	if err := fencedWrite(ctx, e, res, ld.Token(), "d"); err != nil {
		t.Fatalf("D's fenced write: %v", err)
	}
	mustRefuse(t, fencedWrite(ctx, e, res, lc.Token(), "c-late"), "C")

	// Inspect decodes the token: the life's epoch and the ticket.
	in, err := lockcore.NewInspector(e.db, e.locks)
	if err != nil {
		t.Fatal(err)
	}
	show, err := in.ShowItem(ctx, e.data, key, lockcore.ItemAttributes{})
	if err != nil {
		t.Fatal(err)
	}
	if show.Fence.Token != ld.Token() || show.Fence.Seq != 1 || show.Fence.Epoch <= 0 {
		t.Fatalf("ShowItem fence %+v, lease token %d", show.Fence, ld.Token())
	}
}

// itemBytesOf reads key and returns its size as DynamoDB counts it.
func itemBytesOf(t *testing.T, ctx context.Context, e *env, key map[string]types.AttributeValue) int {
	t.Helper()
	out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.data, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, v := range out.Item {
		n += len(k) + avSize(v)
	}
	return n
}

const itemLimit = 400 << 10 // DynamoDB's item size limit

// fillTo sets the blob attribute of key (with a plain UpdateItem, as another writer of
// the table would) so that free bytes of DynamoDB's item limit are left.
func fillTo(t *testing.T, ctx context.Context, e *env, key map[string]types.AttributeValue, free int) {
	t.Helper()
	rm, _ := expression.NewBuilder().WithUpdate(expression.Remove(expression.Name("blob"))).Build()
	if _, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.data, Key: key, UpdateExpression: rm.Update(),
		ExpressionAttributeNames: rm.Names()}); err != nil {
		t.Fatal(err)
	}
	n := itemLimit - itemBytesOf(t, ctx, e, key) - len("blob") - free
	b, _ := expression.NewBuilder().WithUpdate(expression.Set(expression.Name("blob"), expression.Value(make([]byte, n)))).Build()
	if _, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.data, Key: key, UpdateExpression: b.Update(),
		ExpressionAttributeNames: b.Names(), ExpressionAttributeValues: b.Values()}); err != nil {
		t.Fatalf("fill to %d bytes free: %v", free, err)
	}
	if got := itemLimit - itemBytesOf(t, ctx, e, key); got != free {
		t.Fatalf("setup: %d bytes free, want %d", got, free)
	}
}

// A waiter handed an item that another writer filled to within a few dozen bytes of
// DynamoDB's limit while its holder held it: the waiter's lease id, owner and lock time
// do not fit. Before, its first heartbeat was refused (a ValidationException) again and
// again until the lease ran out, although nobody else held the item, and its
// UpdateAndRelease then failed with ErrLeaseLost. The lease must stay held, renewals
// succeed, and UpdateAndRelease land.
func TestItemHandedOverNearFullItemKeepsTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	key := dataKey("nearfull")
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("waiter-with-a-much-longer-owner-name-than-a", lockcore.WithHeartbeat(0))...)
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcore.ItemLease, 1)
	go func() {
		l, err := w.Acquire(ctx, key, lockcore.WaitUpTo(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, e, key, 1)
	fillTo(t, ctx, e, key, 20)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lw := <-got
	if lw == nil {
		t.FailNow()
	}
	for i := range 3 { // the heartbeat, by hand
		if err := lw.Renew(ctx); err != nil {
			t.Fatalf("renewal %d of the handed-over lease: %v", i, err)
		}
	}
	if err := lw.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	if _, err := lw.UpdateAndRelease(ctx, expression.Set(expression.Name("by"), expression.Value("w")), expression.ConditionBuilder{}); err != nil {
		t.Fatalf("UpdateAndRelease: %v", err)
	}
	in, err := lockcore.NewInspector(e.db, e.locks)
	if err != nil {
		t.Fatal(err)
	}
	show, err := in.ShowItem(ctx, e.data, key, lockcore.ItemAttributes{})
	if err != nil {
		t.Fatal(err)
	}
	if show.State != lockcore.LockReleased || len(show.Waiters) != 0 {
		t.Fatalf("after UpdateAndRelease: %+v", show)
	}
}

// wantTooLarge checks that err is lockcore's clear error about the item's size, naming
// the key and the limit, not a raw ValidationException.
func wantTooLarge(t *testing.T, err error, what string) {
	t.Helper()
	var tl *lockcore.ItemTooLargeError
	if !errors.Is(err, lockcore.ErrItemTooLarge) || !errors.As(err, &tl) {
		t.Fatalf("%s: %v, want an ItemTooLargeError", what, err)
	}
	if tl.Limit != itemLimit || !strings.Contains(tl.Key, "pk=") || !strings.Contains(err.Error(), "409600") {
		t.Fatalf("%s: %+v (%v): want the key and the limit named", what, tl, err)
	}
}

// A waiter that does not fit on a busy item gets an ItemTooLargeError and leaves no
// ticket behind: one whose entry would leave less than the room the lock keeps for its
// holders (before: it queued, and the holder it was handed to could not claim), and one
// whose entry does not fit at all (before: the engine's raw ValidationException).
func TestItemWaiterWithoutRoomGetsItemTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	key := dataKey("noroom")
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("w", lockcore.WithHeartbeat(0))...)
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, free := range []int{1000, 4} {
		fillTo(t, ctx, e, key, free)
		_, err := w.Acquire(ctx, key, lockcore.WaitUpTo(300*time.Millisecond))
		wantTooLarge(t, err, fmt.Sprintf("a waiter on an item with %d bytes free", free))
		waitQueued(t, e, key, 0)
	}
	fillTo(t, ctx, e, key, 100<<10)
	if _, err := la.UpdateAndRelease(ctx, expression.Set(expression.Name("by"), expression.Value("a")), expression.ConditionBuilder{}); err != nil {
		t.Fatalf("the holder's UpdateAndRelease: %v", err)
	}
}

// A holder's write that would leave the next holder no room for its lock attributes is
// refused with an ItemTooLargeError, nothing written and the lease still held (before:
// it landed, and the waiter handed the item could not claim it); a smaller one lands, and
// the waiter handed the item then writes, its lease id with it, and renews.
func TestItemHolderWriteKeepsRoomForTheNextHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	key := dataKey("keeproom")
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a", lockcore.WithHeartbeat(0))...)
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("w", lockcore.WithHeartbeat(0))...)
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcore.ItemLease, 1)
	go func() {
		l, err := w.Acquire(ctx, key, lockcore.WaitUpTo(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, e, key, 1)
	size := itemBytesOf(t, ctx, e, key)
	blob := func(free int) expression.UpdateBuilder {
		return expression.Set(expression.Name("blob"), expression.Value(make([]byte, itemLimit-size-len("blob")-free)))
	}
	_, err = la.Update(ctx, blob(100), expression.ConditionBuilder{})
	wantTooLarge(t, err, "an Update leaving 100 bytes free")
	if itemBytesOf(t, ctx, e, key) != size {
		t.Fatal("the refused Update was written")
	}
	_, err = la.UpdateAndRelease(ctx, blob(1000), expression.ConditionBuilder{})
	wantTooLarge(t, err, "an UpdateAndRelease leaving 1000 bytes free")
	if err := la.Err(); err != nil {
		t.Fatalf("the holder's lease after the refused writes: %v", err)
	}
	if _, err := la.UpdateAndRelease(ctx, blob(4000), expression.ConditionBuilder{}); err != nil {
		t.Fatalf("UpdateAndRelease leaving 4000 bytes free: %v", err)
	}
	lw := <-got
	if lw == nil {
		t.FailNow()
	}
	if _, err := lw.Update(ctx, expression.Set(expression.Name("by"), expression.Value("w")), expression.ConditionBuilder{}); err != nil {
		t.Fatalf("the next holder's first write: %v", err)
	}
	if err := lw.Renew(ctx); err != nil {
		t.Fatalf("the next holder's first heartbeat: %v", err)
	}
	in, err := lockcore.NewInspector(e.db, e.locks)
	if err != nil {
		t.Fatal(err)
	}
	show, err := in.ShowItem(ctx, e.data, key, lockcore.ItemAttributes{})
	if err != nil {
		t.Fatal(err)
	}
	if show.Holder == nil || show.Holder.LeaseID != lw.ID() {
		t.Fatalf("holder %+v: the next holder's heartbeat did not write its lease id", show.Holder)
	}
	if _, err := lw.UpdateAndRelease(ctx, expression.Remove(expression.Name("blob")), expression.ConditionBuilder{}); err != nil {
		t.Fatal(err)
	}
}

// TestShowItemWithdrawnServedTicketIsReleased: a holder's release hands the item to the
// next ticket; when that waiter had already given up, nobody holds the item (the next take
// skips the ticket at once). ShowItem showed it abandoned, held by "ticket 2", at once —
// an operator's `locks abandoned` listed a lock no holder had left behind. The Mutex and
// the TicketLock show the same situation as released.
func TestShowItemWithdrawnServedTicketIsReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("w")...)
	l, err := a.Acquire(ctx, dataKey("withdrawn-served"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Acquire(ctx, dataKey("withdrawn-served"), lockcore.WaitUpTo(300*time.Millisecond)); !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("w: %v, want ErrWaitTimeout", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := lockcore.NewInspector(e.db, e.data)
	if err != nil {
		t.Fatal(err)
	}
	li, err := in.ShowItem(ctx, e.data, dataKey("withdrawn-served"), lockcore.ItemAttributes{})
	if err != nil {
		t.Fatal(err)
	}
	if li.State != lockcore.LockReleased || li.Holder != nil {
		t.Fatalf("ShowItem after the release to a withdrawn ticket: state %s, holder %+v; want released, no holder", li.State, li.Holder)
	}
	// And the next caller gets it at once.
	l2, err := w.Acquire(ctx, dataKey("withdrawn-served"), lockcore.NoWait())
	if err != nil {
		t.Fatalf("next take: %v", err)
	}
	_ = l2.Release(ctx)
}

// A holder handed the item fills it, in its first write (which also claims the item),
// to just outside the room the lock keeps, while another waiter queued; then it hands
// the item over with an UpdateAndRelease that grows nothing. Before, that release was
// refused as too large, every attempt (an ItemTooLargeError for a write that grew
// nothing), and the lease stayed with the holder: the release's padding was sized as if
// it left no holder attributes behind, but a handoff writes the next ticket's marker,
// ticket and lease end, and the first write's padding had counted the claim at its
// largest. Found by the simulator's near-full items (I7); each free size is a fresh item.
func TestItemHandoffUpdateAndReleaseNearTheRoomLands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 90*time.Second)
	lockers := map[string]*lockcore.ItemLocker{}
	for _, n := range []string{"a", "b", "w"} {
		lockers[n], _ = lockcore.NewItemLocker(e.db, e.data, fast(n, lockcore.WithHeartbeat(0))...)
	}
	landed := 0
	for free := 1990; free <= 2100; free += 5 {
		key := dataKey(fmt.Sprintf("roomedge%d", free))
		la, err := lockers["a"].Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]chan *lockcore.ItemLease{}
		for i, n := range []string{"b", "w"} {
			got[n] = make(chan *lockcore.ItemLease, 1)
			go func() {
				l, err := lockers[n].Acquire(ctx, key, lockcore.WaitUpTo(20*time.Second))
				if err != nil {
					t.Error(err)
				}
				got[n] <- l
			}()
			waitQueued(t, e, key, i+1)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb := <-got["b"]
		if lb == nil {
			t.FailNow()
		}
		size := itemBytesOf(t, ctx, e, key)
		blob := expression.Set(expression.Name("blob"), expression.Value(make([]byte, itemLimit-size-len("blob")-free)))
		if _, err := lb.Update(ctx, blob, expression.ConditionBuilder{}); err != nil {
			wantTooLarge(t, err, fmt.Sprintf("an Update leaving %d bytes free", free))
		} else {
			landed++
		}
		if _, err := lb.UpdateAndRelease(ctx, expression.Set(expression.Name("by"), expression.Value(1)), expression.ConditionBuilder{}); err != nil {
			t.Fatalf("%d bytes free: UpdateAndRelease that grows nothing, handing the item over: %v", free, err)
		}
		lw := <-got["w"]
		if lw == nil {
			t.FailNow()
		}
		if err := lw.Renew(ctx); err != nil {
			t.Fatalf("%d bytes free: the next holder's heartbeat: %v", free, err)
		}
		if err := lw.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if landed == 0 {
		t.Fatal("setup: no Update near the room's edge landed")
	}
}

// holdAfterTake passes a client's UpdateItems through until one lands (a waiter's
// ticket take), reports that, and holds the next (the waiter's withdrawal) until open
// is closed: a waiter slow to leave again.
type holdAfterTake struct {
	lockcore.DynamoDB
	landed     atomic.Bool
	took, open chan struct{}
}

func (f *holdAfterTake) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.landed.Load() {
		<-f.open
		return f.DynamoDB.UpdateItem(ctx, in, o...)
	}
	out, err := f.DynamoDB.UpdateItem(ctx, in, o...)
	if err == nil {
		f.landed.Store(true)
		close(f.took)
	}
	return out, err
}

// A release whose form flips from freeing the item to handing it over keeps padding
// sized for the form it sends. The holder's item has less than the lock's 2 KiB room
// free; a waiter takes a ticket after the holder's last look (and will withdraw, the item
// being too full to wait on, but has not yet); the holder's UpdateAndRelease is first
// sent in the form that frees the item, is refused, and is sent again as a handoff.
// Before, the handoff kept the free form's padding, 68 bytes more than the item had, and
// a release that grew nothing was refused as too large. Found by the simulator (I7).
func TestItemUpdateAndReleaseTurnedHandoffNearTheRoomLands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 90*time.Second)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b", lockcore.WithHeartbeat(0))...)
	took := 0
	for free := 1900; free <= 2040; free += 20 {
		key := dataKey(fmt.Sprintf("flipedge%d", free))
		lb, err := b.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		fillTo(t, ctx, e, key, 100) // as another writer of the table would
		out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.data, Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		n := len(out.Item["blob"].(*types.AttributeValueMemberB).Value) - (free - 100)
		shrink := expression.Set(expression.Name("blob"), expression.Value(make([]byte, n)))
		if _, err := lb.Update(ctx, shrink, expression.ConditionBuilder{}); err != nil {
			t.Fatalf("%d bytes free: an Update shrinking the item: %v", free, err)
		}
		f := &holdAfterTake{DynamoDB: e.db, took: make(chan struct{}), open: make(chan struct{})}
		w, _ := lockcore.NewItemLocker(f, e.data, fast("w", lockcore.WithHeartbeat(0))...)
		got := make(chan *lockcore.ItemLease, 1)
		go func() {
			l, err := w.Acquire(ctx, key, lockcore.WaitUpTo(20*time.Second))
			if err != nil && !errors.Is(err, lockcore.ErrItemTooLarge) {
				t.Error(err)
			}
			got <- l
		}()
		var lw *lockcore.ItemLease
		answered := false
		select {
		case <-f.took:
			took++
		case lw = <-got: // refused before it took a ticket
			answered = true
		}
		_, err = lb.UpdateAndRelease(ctx, expression.Set(expression.Name("by"), expression.Value(1)), expression.ConditionBuilder{})
		close(f.open)
		if err != nil {
			t.Fatalf("%d bytes free: UpdateAndRelease that grows nothing: %v", free, err)
		}
		if !answered {
			lw = <-got
		}
		if lw != nil {
			if err := lw.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("the waiter took a ticket in %d of 8 rounds", took)
	if took == 0 {
		t.Fatal("setup: the waiter never took a ticket")
	}
}
