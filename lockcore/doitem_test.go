package lockcore_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// TestDoItem: Do for the locking read. fn gets the item and the lease; the lease is
// released however fn ends (returns, releases it itself, panics, or calls Goexit).
func TestDoItem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
	free := func(key string) {
		t.Helper()
		l, err := b.TryAcquire(ctx, dataKey(key))
		if err != nil {
			t.Fatalf("after DoItem the item is still locked: %v", err)
		}
		_ = l.Release(ctx)
	}

	// fn writes and releases the item itself; DoItem's own release is a no-op.
	err := lockcore.DoItem(ctx, a, dataKey("di"), func(ctx context.Context, l *lockcore.ItemLease) error {
		if _, err := b.TryAcquire(ctx, dataKey("di")); !errors.Is(err, lockcore.ErrLockHeld) {
			t.Errorf("inside DoItem another client got %v, want ErrLockHeld", err)
		}
		_, err := l.UpdateAndRelease(ctx, addN, expression.ConditionBuilder{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var n string
	err = lockcore.DoItem(ctx, a, dataKey("di"), func(_ context.Context, l *lockcore.ItemLease) error {
		n = l.Item()["n"].(*types.AttributeValueMemberN).Value
		return nil
	})
	if err != nil || n != "1" {
		t.Fatalf("DoItem read n=%q: %v", n, err)
	}
	free("di")

	boom := errors.New("boom")
	if err := lockcore.DoItem(ctx, a, dataKey("di"), func(context.Context, *lockcore.ItemLease) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("DoItem returned %v, want fn's error", err)
	}
	free("di")

	if p := catch(func() {
		_ = lockcore.DoItem(ctx, a, dataKey("di"), func(context.Context, *lockcore.ItemLease) error { panic(boom) })
	}); p != boom {
		t.Fatalf("DoItem with a panicking fn: recovered %v, want fn's panic", p)
	}
	free("di")

	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lockcore.DoItem(context.Background(), a, dataKey("di"), func(context.Context, *lockcore.ItemLease) error {
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	free("di")

	var il *lockcore.ItemLocker
	var oe *lockcore.OptionError
	if err := lockcore.DoItem(ctx, il, dataKey("k"), func(context.Context, *lockcore.ItemLease) error { return nil }); !errors.As(err, &oe) || oe.Field != "locker" {
		t.Errorf("DoItem(nil): %v, want an OptionError naming \"locker\"", err)
	}
	if err := lockcore.DoItem(ctx, a, dataKey("k"), nil); !errors.As(err, &oe) || oe.Field != "fn" {
		t.Errorf("DoItem(nil fn): %v, want an OptionError naming \"fn\"", err)
	}
}
