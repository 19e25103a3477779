package lockcore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// TestTableAttributes: a lock table whose key and TTL attributes have names of the user's
// choosing serves every lock-table strategy, the Inspector and force-release; every row
// carries the chosen names and none of the defaults.
func TestTableAttributes(t *testing.T) {
	db := engineClient(t)
	ctx := ctxT(t, 2*time.Minute)
	names := lockcore.TableAttributes{PartitionKey: "PK", SortKey: "SK", TTL: "ttl"}
	table := uniqueName("attrs")
	if err := lockcore.CreateLockTable(ctx, db, table, lockcore.WithAttributes(names)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteTable(db, table) })
	opts := func(owner string) []lockcore.Option {
		return fast(owner, lockcore.WithTableAttributes(names))
	}

	m, err := lockcore.NewMutex(db, table, opts("a")...)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := lockcore.NewMutex(db, table, opts("b")...)
	l, err := m.Acquire(ctx, "k-mutex")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mb.TryAcquire(ctx, "k-mutex"); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("second Mutex holder: %v, want ErrLockHeld", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	ml, err := m.AcquireAll(ctx, []string{"k-all-1", "k-all-2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatal(err)
	}

	tl, _ := lockcore.NewTicketLock(db, table, opts("a")...)
	tlb, _ := lockcore.NewTicketLock(db, table, opts("b")...)
	lt, err := tl.Acquire(ctx, "k-ticket")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlb.TryAcquire(ctx, "k-ticket"); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("second TicketLock holder: %v, want ErrLockHeld", err)
	}

	q, _ := lockcore.NewQueue(db, table, opts("a")...)
	lq, err := q.Acquire(ctx, "k-queue")
	if err != nil {
		t.Fatal(err)
	}
	if err := lq.Release(ctx); err != nil {
		t.Fatal(err)
	}

	in, err := lockcore.NewInspector(db, table, lockcore.InspectTableAttributes(names))
	if err != nil {
		t.Fatal(err)
	}
	page, err := in.List(ctx, lockcore.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, lk := range page.Locks {
		got[lk.Key] = true
	}
	for _, k := range []string{"k-mutex", "k-all-1", "k-all-2", "k-ticket", "k-queue"} {
		if !got[k] {
			t.Errorf("Inspector.List lacks %q (listed: %v)", k, got)
		}
	}
	if _, err := in.ForceRelease(ctx, "k-ticket", lockcore.ForceOptions{Strategy: lockcore.StrategyTicket,
		Actor: "test", Reason: "custom attribute names"}); err != nil {
		t.Fatalf("force-release: %v", err)
	}
	if err := lt.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("release after a force-release: %v, want ErrLeaseLost", err)
	}

	items := itemsIn(t, db, table)
	if len(items) == 0 {
		t.Fatal("no rows written")
	}
	ttls := 0
	for _, it := range items {
		for _, def := range []string{"pk", "sk", "expiresAt"} {
			if _, has := it[def]; has {
				t.Errorf("a row carries the default attribute %q: %v", def, it)
			}
		}
		if _, ok := it["ttl"].(*types.AttributeValueMemberN); ok {
			ttls++
		}
	}
	if ttls == 0 {
		t.Error("no row carries the TTL attribute \"ttl\"")
	}

	// A client with the default names on this table fails with an error, not a hang.
	wrong, _ := lockcore.NewMutex(db, table, fast("c")...)
	if _, err := wrong.Acquire(ctxT(t, 20*time.Second), "k-wrong"); err == nil || errors.Is(err, lockcore.ErrLockHeld) {
		t.Errorf("a Mutex with the default key names on a PK/SK table: %v, want an engine error", err)
	}
}

// TestTableAttributesValidation: every refused name names its option and field.
func TestTableAttributesValidation(t *testing.T) {
	db := engineClient(t)
	cases := []struct {
		a     lockcore.TableAttributes
		field string
	}{
		{lockcore.TableAttributes{PartitionKey: "state"}, "WithTableAttributes.PartitionKey"},
		{lockcore.TableAttributes{SortKey: "w#x"}, "WithTableAttributes.SortKey"},
		{lockcore.TableAttributes{TTL: "pk"}, "WithTableAttributes.TTL"},
		{lockcore.TableAttributes{PartitionKey: "a", SortKey: "a"}, "WithTableAttributes.SortKey"},
		{lockcore.TableAttributes{TTL: strings.Repeat("t", 256)}, "WithTableAttributes.TTL"},
		{lockcore.TableAttributes{TTL: "fence"}, "WithTableAttributes.TTL"},
	}
	for _, c := range cases {
		_, err := lockcore.NewMutex(db, "t", lockcore.WithTableAttributes(c.a))
		var oe *lockcore.OptionError
		if !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, lockcore.ErrInvalidOption) {
			t.Errorf("%+v: %v, want an OptionError for %s", c.a, err, c.field)
		}
	}
	if _, err := lockcore.NewMutex(db, "t", lockcore.WithTableAttributes(lockcore.TableAttributes{PartitionKey: "PK"})); err != nil {
		t.Errorf("a partial TableAttributes (defaults for the rest): %v", err)
	}
	if _, err := lockcore.NewItemLocker(db, "t", lockcore.WithTableAttributes(lockcore.TableAttributes{PartitionKey: "PK"})); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("an ItemLocker with WithTableAttributes: %v, want ErrInvalidOption", err)
	}
	if _, err := lockcore.NewInspector(db, "t", lockcore.InspectTableAttributes(lockcore.TableAttributes{SortKey: "rev"})); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("InspectTableAttributes with a reserved name: %v, want ErrInvalidOption", err)
	}
}
