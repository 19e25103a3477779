package lockcore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// SetIfAbsent initialises an item in the write that takes its lock — on a free item and
// on one that makes the caller queue — and never changes an attribute already there.
func TestItemSetIfAbsent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	b, _ := lockcore.NewItemLocker(e.db, e.data, fast("b")...)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	str := func(it map[string]types.AttributeValue, k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return "<absent>"
	}

	// A free, absent item: created with the attributes, which the lease's read shows.
	l, err := a.Acquire(ctx, dataKey("init"), lockcore.SetIfAbsent(map[string]types.AttributeValue{"status": s("PENDING"), "who": s("a")}))
	if err != nil {
		t.Fatal(err)
	}
	if got := str(l.Item(), "status"); got != "PENDING" {
		t.Fatalf("status after the take = %s, want PENDING", got)
	}
	if _, err := l.UpdateAndRelease(ctx, expression.Set(expression.Name("status"), expression.Value("DONE")), expression.ConditionBuilder{}); err != nil {
		t.Fatal(err)
	}

	// A held item: the queued take sets only what is missing.
	l, err = a.Acquire(ctx, dataKey("init"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockcore.ItemLease, 1)
	go func() {
		lb, err := b.Acquire(ctx, dataKey("init"), lockcore.WaitUpTo(10*time.Second),
			lockcore.SetIfAbsent(map[string]types.AttributeValue{"status": s("PENDING"), "who": s("b"), "extra": s("x")}))
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	time.Sleep(300 * time.Millisecond) // b queues meanwhile
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	it := lb.Item()
	if str(it, "status") != "DONE" || str(it, "who") != "a" || str(it, "extra") != "x" {
		t.Fatalf("item after b's take = status %s, who %s, extra %s; want DONE, a, x", str(it, "status"), str(it, "who"), str(it, "extra"))
	}
	_ = lb.Release(ctx)

	// Refused: other strategies, the key, lock attributes, nothing to set.
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	if _, err := m.Acquire(ctx, "k", lockcore.SetIfAbsent(map[string]types.AttributeValue{"x": s("1")})); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("Mutex with SetIfAbsent: %v, want ErrInvalidOption", err)
	}
	for _, bad := range []map[string]types.AttributeValue{
		{"pk": s("1")},
		{lockcore.DefaultItemAttributes.LockedBy: s("1")},
		{},
		{"x": nil},
	} {
		if _, err := a.Acquire(ctx, dataKey("init2"), lockcore.SetIfAbsent(bad)); !errors.Is(err, lockcore.ErrInvalidOption) {
			t.Errorf("SetIfAbsent(%v): %v, want ErrInvalidOption", bad, err)
		}
	}
}
