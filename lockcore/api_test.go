package lockcore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

func TestDo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	ran := false
	err := lockcore.Do(ctx, m, "do", func(ctx context.Context, l *lockcore.Lease) error {
		ran = true
		if l.Token() == 0 {
			t.Error("no token")
		}
		if _, err := b.TryAcquire(ctx, "do"); !errors.Is(err, lockcore.ErrLockHeld) {
			t.Errorf("inside Do another client got %v, want ErrLockHeld", err)
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	// Released afterwards, also when fn fails or panics.
	boom := errors.New("boom")
	if err := lockcore.Do(ctx, m, "do", func(context.Context, *lockcore.Lease) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if p := catch(func() { _ = lockcore.Do(ctx, m, "do", func(context.Context, *lockcore.Lease) error { panic("oops") }) }); p != "oops" {
		t.Fatalf("Do with a panicking fn: the panic did not go on (recovered %v)", p)
	}
	l, err := b.TryAcquire(ctx, "do")
	if err != nil {
		t.Fatalf("after Do the lock is still held: %v", err)
	}
	_ = l.Release(ctx)
	// The lease's context ends when the lease is lost.
	tl := newTicket(t, e.db, e.locks, "t")
	err = lockcore.Do(ctx, tl, "do", func(ctx context.Context, l *lockcore.Lease) error {
		select {
		case <-ctx.Done():
			t.Error("fn's context ended early")
		default:
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := lockcore.Do(ctx, nil, "k", func(context.Context, *lockcore.Lease) error { return nil }); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("Do(nil locker): %v", err)
	}
	if err := lockcore.Do(ctx, m, "k", nil); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("Do(nil fn): %v", err)
	}
}

// recorder collects observer events.
type recorder struct {
	mu                          sync.Mutex
	acquired, failed            []lockcore.AcquireEvent
	released, lost, unknownOuts []lockcore.LeaseEvent
}

func (r *recorder) observer() lockcore.Observer {
	return lockcore.Observer{
		Acquired: func(_ context.Context, e lockcore.AcquireEvent) {
			r.mu.Lock()
			r.acquired = append(r.acquired, e)
			r.mu.Unlock()
		},
		AcquireFailed: func(_ context.Context, e lockcore.AcquireEvent) {
			r.mu.Lock()
			r.failed = append(r.failed, e)
			r.mu.Unlock()
		},
		Released: func(_ context.Context, e lockcore.LeaseEvent) {
			r.mu.Lock()
			r.released = append(r.released, e)
			r.mu.Unlock()
		},
		LeaseLost: func(_ context.Context, e lockcore.LeaseEvent) { r.mu.Lock(); r.lost = append(r.lost, e); r.mu.Unlock() },
		UnknownOutcome: func(_ context.Context, e lockcore.LeaseEvent) {
			r.mu.Lock()
			r.unknownOuts = append(r.unknownOuts, e)
			r.mu.Unlock()
		},
	}
}

func TestObserver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	var rec recorder
	obs := lockcore.WithObserver(rec.observer())
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", obs)...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b", obs, lockcore.WithHeartbeat(0))...)
	la, err := a.Acquire(ctx, "obs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "obs"); !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("b: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// b takes a lease, and loses it to a takeover by a after a full lease.
	lb, err := b.Acquire(ctx, "obs")
	if err != nil {
		t.Fatal(err)
	}
	la2, err := a.Acquire(ctx, "obs", lockcore.Wait(lockcore.WaitUpTo(3*lb.Duration())))
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if err := lb.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("b's release after the takeover: %v", err)
	}
	_ = la2.Release(ctx)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acquired) != 3 || len(rec.failed) != 1 || len(rec.released) != 2 || len(rec.lost) != 1 {
		t.Fatalf("events: %d acquired, %d failed, %d released, %d lost; want 3, 1, 2, 1", len(rec.acquired), len(rec.failed), len(rec.released), len(rec.lost))
	}
	first, takeover := rec.acquired[0], rec.acquired[2]
	if first.Strategy != "mutex" || first.Key != "obs" || first.Contended || first.Takeover || first.Token == 0 {
		t.Errorf("first acquisition: %+v", first)
	}
	if !takeover.Contended || !takeover.Takeover || takeover.Wait < lb.Duration() {
		t.Errorf("takeover: %+v (want contended, takeover, waited at least a lease)", takeover)
	}
	if f := rec.failed[0]; !f.Contended || !errors.Is(f.Err, lockcore.ErrLockHeld) {
		t.Errorf("failed acquisition: %+v", f)
	}
	if r := rec.released[0]; r.Held < 50*time.Millisecond || r.LeaseID != la.ID() {
		t.Errorf("release: %+v", r)
	}
	if l := rec.lost[0]; l.LeaseID != lb.ID() || !errors.Is(l.Err, lockcore.ErrLeaseLost) {
		t.Errorf("lost: %+v", l)
	}
}

// CreateLockTable makes a lock table the strategies work on (the application's tests
// check that it matches template.yaml's LockTable).
func TestCreateLockTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	name := e.locks + "-created"
	t.Cleanup(func() {
		_, _ = e.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	if err := lockcore.CreateLockTable(ctx, e.db, name, lockcore.WithStream()); err != nil {
		t.Fatal(err)
	}
	if err := lockcore.CreateLockTable(ctx, e.db, name); err != nil {
		t.Fatalf("second call on an existing lock table: %v", err)
	}
	out, err := e.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(ks []types.KeySchemaElement) string {
		var s []string
		for _, k := range ks {
			s = append(s, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
		}
		return strings.Join(s, ",")
	}
	if got := keys(out.Table.KeySchema); got != "pk:HASH,sk:RANGE" {
		t.Errorf("keys %s, want pk:HASH,sk:RANGE", got)
	}
	if out.Table.StreamSpecification == nil || out.Table.StreamSpecification.StreamViewType != types.StreamViewTypeOldImage {
		t.Errorf("stream %+v, want OLD_IMAGE", out.Table.StreamSpecification)
	}
	ttl, err := e.db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != "expiresAt" {
		t.Errorf("TTL attribute %q, want expiresAt", got)
	}
	m, _ := lockcore.NewMutex(e.db, name, fast("a")...)
	l, err := m.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	// A table with another key schema is refused.
	if err := lockcore.CreateLockTable(ctx, e.db, e.data+"x"); err != nil {
		t.Fatal(err) // a fresh name: created
	}
	t.Cleanup(func() {
		_, _ = e.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(e.data + "x")})
	})
	orders := testTableWithKey(t, e, "orderId")
	if err := lockcore.CreateLockTable(ctx, e.db, orders); err == nil || !strings.Contains(err.Error(), "no lock table") {
		t.Errorf("CreateLockTable on a table keyed by orderId: %v", err)
	}
}

func testTableWithKey(t *testing.T, e *env, key string) string {
	t.Helper()
	name := e.data + "-" + key
	_, err := e.db.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(key), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

func TestAcquireOptionForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
	b, _ := lockcore.NewMutex(e.db, e.locks, fast("b")...)
	l, err := m.Acquire(ctx, "forms", lockcore.LeaseDuration(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Duration() != 5*time.Second {
		t.Errorf("lease %s, want the per-call 5s", l.Duration())
	}
	info, _ := m.Get(ctx, "forms")
	if info.Holder == nil || info.Holder.Lease != 5*time.Second {
		t.Errorf("row records %+v, want a 5s lease", info.Holder)
	}
	// A WaitPolicy is an acquire option by itself.
	start := time.Now()
	if _, err := b.Acquire(ctx, "forms", lockcore.WaitUpTo(100*time.Millisecond)); !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Errorf("WaitUpTo as an option: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("WaitUpTo(100ms) waited %s", time.Since(start))
	}
	_ = l.Release(ctx)
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"lease below minimum", func() error { _, err := m.Acquire(ctx, "x", lockcore.LeaseDuration(time.Second)); return err }, "lease"},
		{"lease not whole ms", func() error { _, err := m.Acquire(ctx, "x", lockcore.LeaseDuration(3*time.Second+1)); return err }, "lease"},
		{"itemlocker namespace", func() error {
			il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
			_, err := il.Acquire(ctx, dataKey("x"), lockcore.Namespace("n"))
			return err
		}, "namespace"},
		{"itemlocker data", func() error {
			il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
			_, err := il.Acquire(ctx, dataKey("x"), lockcore.Data([]byte("d")))
			return err
		}, "data"},
		{"queue data", func() error {
			q, _ := lockcore.NewQueue(e.db, e.locks, fast("a")...)
			_, err := q.Acquire(ctx, "x", lockcore.Data([]byte("d")))
			return err
		}, "data"},
	} {
		err := c.err()
		var oe *lockcore.OptionError
		if !errors.As(err, &oe) || oe.Field != c.want {
			t.Errorf("%s: %v, want an OptionError naming %q", c.name, err, c.want)
		}
	}
}

func TestItemLeaseMethods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	l, err := il.Acquire(ctx, dataKey("m"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Update(ctx, addN, expression.ConditionBuilder{}); err != nil {
		t.Fatal(err)
	}
	notThere := expression.AttributeNotExists(expression.Name("n"))
	if _, err := l.Update(ctx, addN, notThere); !errors.Is(err, lockcore.ErrConditionFailed) {
		t.Fatalf("Update with a failing condition: %v", err)
	}
	out, err := l.UpdateAndRelease(ctx, addN, expression.ConditionBuilder{})
	if err != nil {
		t.Fatal(err)
	}
	if v := out["n"].(*types.AttributeValueMemberN).Value; v != "2" {
		t.Fatalf("n = %s", v)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after UpdateAndRelease: %v", err)
	}
}

// Strategy options are Options; a strategy refuses another strategy's.
func TestStrategyOptionsRefusedElsewhere(t *testing.T) {
	t.Parallel()
	db := newClient("http://127.0.0.1:1") // never called
	for _, c := range []struct {
		name  string
		err   error
		field string
	}{
		{"RequireItem on a Mutex", func() error { _, err := lockcore.NewMutex(db, "t", lockcore.WithRequiredItem()); return err }(), "requireItem"},
		{"MaxAttempts on an ItemLocker", func() error { _, err := lockcore.NewItemLocker(db, "t", lockcore.WithMaxAttempts(3)); return err }(), "maxAttempts"},
		{"WithItemAttributes on a Queue", func() error {
			_, err := lockcore.NewQueue(db, "t", lockcore.WithItemAttributes(lockcore.DefaultItemAttributes))
			return err
		}(), "itemAttributes"},
		{"VersionAttribute on a TicketLock", func() error {
			_, err := lockcore.NewTicketLock(db, "t", lockcore.WithVersionAttribute("v"))
			return err
		}(), "versionAttribute"},
	} {
		var oe *lockcore.OptionError
		if !errors.As(c.err, &oe) || oe.Field != c.field {
			t.Errorf("%s: %v, want an OptionError naming %s", c.name, c.err, c.field)
		}
	}
	if _, err := lockcore.NewItemLocker(db, "t", lockcore.WithRequiredItem(), lockcore.WithOwner("a")); err != nil {
		t.Errorf("ItemLocker with its own options: %v", err)
	}
	if _, err := lockcore.NewVersioned(db, "t", lockcore.WithMaxAttempts(3), lockcore.WithVersionAttribute("ver")); err != nil {
		t.Errorf("Versioned with its own options: %v", err)
	}
}
