package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// A watch that could not read the lock at all (here: no such table) must not exit 0:
// with --count a script samples the lock and trusts the exit status.
func TestLocksWatchFailedReadsExitNonZero(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	out, errs, code := f.run("locks", "watch", "sku#GPU", "--table", f.table+"-missing", "--interval", "20ms", "--count", "2")
	if code != 1 {
		t.Fatalf("watch of a missing table: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if !strings.Contains(out, "error:") || !strings.Contains(errs, "ResourceNotFound") {
		t.Fatalf("watch of a missing table: the error is not reported\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
}

// An item lock's queue is part of its state: the table output of show --strategy item
// must list the waiters (as it does for ticket locks, mutexes and queues, and as the
// JSON output does), not show a lone holder while others queue behind it.
func TestLocksShowItemWaiters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := testenv.Table(t, "InventoryTable")
	db := testenv.Client(t)
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#pear"}, "sk": &types.AttributeValueMemberS{Value: "STOCK"}}
	a, _ := lockcore.NewItemLocker(db, data, opts("worker-a")...)
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	b, _ := lockcore.NewItemLocker(db, data, opts("worker-b")...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lb, err := b.Acquire(wctx, key); err == nil {
			_ = lb.Release(ctx)
		}
	}()
	in, _ := lockcore.NewInspector(db, data)
	deadline := time.Now().Add(10 * time.Second)
	for {
		il, err := in.ShowItem(ctx, data, key, lockcore.ItemAttributes{})
		if err != nil {
			t.Fatal(err)
		}
		if len(il.Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no waiter queued")
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := f.ok("locks", "show", "--strategy", "item", "--item-table", data, "pk=SKU#pear,sk=STOCK")
	contains(t, out, "held", "worker-a", la.ID(), "waiters", "ticket 2")
	wcancel()
	<-done
	_ = la.Release(ctx)
}
