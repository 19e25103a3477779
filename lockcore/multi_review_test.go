package lockcore_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// waitLockQueued polls until key's row shows a ticket waiting behind the served one (an
// AcquireAll that holds the earlier keys and waits for this one).
func waitLockQueued(t *testing.T, ctx context.Context, e *env, key string) {
	t.Helper()
	num := func(it map[string]types.AttributeValue, a string) int64 {
		n, _ := it[a].(*types.AttributeValueMemberN)
		if n == nil {
			return 0
		}
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	for {
		out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.locks), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}, "sk": &types.AttributeValueMemberS{Value: "lock"}}})
		if err == nil && num(out.Item, "fence") > num(out.Item, "serving") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nobody queued for %s", key)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// acquireResult is what an AcquireAll returned.
type acquireResult struct {
	ml  *lockcore.MultiLease
	err error
}

// acquireAllWaiting has client "c" hold key2 and client "a" (with hb, its heartbeat
// option) call AcquireAll(key1, key2), and returns once a holds key1 and waits for key2:
// c's lease on key2, and where a's AcquireAll will report.
func acquireAllWaiting(t *testing.T, ctx context.Context, e *env, hb lockcore.Option, key1, key2 string) (*lockcore.Lease, <-chan acquireResult) {
	t.Helper()
	a, _ := lockcore.NewMutex(e.db, e.locks, fast("a", hb)...)
	c, _ := lockcore.NewMutex(e.db, e.locks, fast("c")...)
	lc, err := c.Acquire(ctx, key2)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan acquireResult, 1)
	go func() {
		ml, err := a.AcquireAll(ctx, []string{key1, key2})
		done <- acquireResult{ml, err}
	}()
	waitLockQueued(t, ctx, e, key2)
	return lc, done
}

// AcquireAll must not return a set in which a key is no longer held. With automatic
// heartbeats off (WithHeartbeat(0): the caller renews), the lease on an earlier key runs
// out while AcquireAll waits for a later one; a waiter then skips the stalled ticket and
// holds the key, yet AcquireAll returned success with the expired lease in the set, so
// the caller worked on the key beside its new holder.
func TestAcquireAllNeverReturnsAnExpiredKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	d, _ := lockcore.NewMutex(e.db, e.locks, fast("d")...)
	lc, done := acquireAllWaiting(t, ctx, e, lockcore.WithHeartbeat(0), "m1", "m2") // a holds m1 and waits for m2
	// d queues for m1 and, after a lease of a's ticket unchanged, skips it.
	ld, err := d.Acquire(ctx, "m1", lockcore.WaitUpTo(20*time.Second))
	if err != nil {
		t.Fatalf("d: %v", err)
	}
	defer func() { _ = ld.Release(context.Background()) }()
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err == nil {
		defer func() { _ = r.ml.Release(context.Background()) }()
		l := r.ml.Leases()[0]
		t.Fatalf("AcquireAll succeeded while d holds m1 (a's m1 lease: Err %v, Remaining %v)", l.Err(), l.Remaining())
	}
	if !errors.Is(r.err, lockcore.ErrLeaseLost) {
		t.Fatalf("want ErrLeaseLost, got %v", r.err)
	}
	t.Logf("AcquireAll: %v", r.err)
	// Nothing of a's is left on m2.
	if _, err := d.TryAcquire(ctx, "m2"); err != nil {
		t.Fatalf("m2 left locked: %v", err)
	}
}

// The same with heartbeats on: a heartbeat that finds an earlier key's lease lost (the row
// removed behind the holder's back, and the key taken by another client) while AcquireAll
// waits for a later key. AcquireAll returned success with the lost lease in the set.
func TestAcquireAllNeverReturnsALostKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	d, _ := lockcore.NewMutex(e.db, e.locks, fast("d")...)
	// a holds n1 (its Acquire returned) and waits for n2.
	lc, done := acquireAllWaiting(t, ctx, e, lockcore.WithHeartbeat(500*time.Millisecond), "n1", "n2")
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.locks), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "n1"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}}); err != nil {
		t.Fatal(err)
	}
	ld, err := d.TryAcquire(ctx, "n1")
	if err != nil {
		t.Fatalf("d: %v", err)
	}
	defer func() { _ = ld.Release(context.Background()) }()
	time.Sleep(time.Second) // a's heartbeat on n1 finds its lease gone
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err == nil {
		defer func() { _ = r.ml.Release(context.Background()) }()
		t.Fatalf("AcquireAll succeeded while d holds n1 (set's Err: %v)", r.ml.Err())
	}
	if !errors.Is(r.err, lockcore.ErrLeaseLost) {
		t.Fatalf("want ErrLeaseLost, got %v", r.err)
	}
	if _, err := d.TryAcquire(ctx, "n2"); err != nil {
		t.Fatalf("n2 left locked: %v", err)
	}
}

// A rejected key is named by its index in the caller's slice. AcquireAll validated the
// sorted, deduplicated copy and reported that copy's index: for {"b", "c", ""} it blamed
// keys[0] ("b").
func TestAcquireAllNamesTheCallersIndex(t *testing.T) {
	m, err := lockcore.NewMutex(stubDB{}, "t")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.AcquireAll(context.Background(), []string{"b", "c", ""})
	var oe *lockcore.OptionError
	if !errors.As(err, &oe) || oe.Field != "key" {
		t.Fatalf("want an OptionError on key, got %v", err)
	}
	if !strings.Contains(err.Error(), "keys[2]") {
		t.Fatalf("the empty key is keys[2]; error says %q", err)
	}
}

// SetIfAbsent names top-level attributes. A name with path characters made ItemLocker's
// Acquire panic while building its expression ("a[", "a..b", ".a") or fail at DynamoDB
// with a ValidationException ("a.b", read as a document path) instead of an OptionError
// naming the option.
func TestSetIfAbsentRefusesPathNames(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("a")...)
	for _, n := range []string{"a[", "a..b", ".a", "a.b", "a[0]"} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%q: Acquire panicked: %v", n, r)
				}
			}()
			l, err := il.Acquire(ctx, dataKey("init"), lockcore.SetIfAbsent(map[string]types.AttributeValue{
				n: &types.AttributeValueMemberS{Value: "v"}}))
			if l != nil {
				_ = l.Release(ctx)
			}
			var oe *lockcore.OptionError
			if !errors.As(err, &oe) || oe.Field != "setIfAbsent" {
				t.Errorf("%q: want an OptionError on setIfAbsent, got %v", n, err)
			}
		}()
	}
}

// shiftedClock is a Clock with a pointer receiver that reads its field.
type shiftedClock struct{ off time.Duration }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(c.off) }

// WithClock refuses a nil clock, but a typed nil pointer (a *shiftedClock left unset) was
// accepted and made the first Acquire panic on the client's first Now. The db argument
// already refuses typed nil pointers; the clock must too, with an OptionError on clock.
func TestWithClockRefusesTypedNil(t *testing.T) {
	var clk *shiftedClock
	m, err := lockcore.NewMutex(stubDB{}, "t", lockcore.WithClock(clk))
	var oe *lockcore.OptionError
	if errors.As(err, &oe) && oe.Field == "clock" {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("NewMutex accepted a nil *shiftedClock (err %v) and Acquire panicked: %v", err, r)
		}
	}()
	_, aerr := m.Acquire(context.Background(), "k")
	t.Fatalf("want an OptionError on clock from NewMutex, got %v (Acquire: %v)", err, aerr)
}

// slowKey delays every write to one lock key (a slow network, a throttled partition).
type slowKey struct {
	lockcore.DynamoDB
	key   string
	delay time.Duration
}

func (s *slowKey) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if v, ok := in.Key["pk"].(*types.AttributeValueMemberS); ok && v.Value == s.key {
		time.Sleep(s.delay)
	}
	return s.DynamoDB.UpdateItem(ctx, in, o...)
}

// The wait policy covers the whole set: when WaitUpTo's time is spent on earlier keys
// and a later key is held, AcquireAll must fail with ErrWaitTimeout, as Acquire does
// when its time runs out. It turned the spent budget into NoWait and returned a plain
// ErrLockHeld, as if the caller had asked not to wait.
func TestAcquireAllSpentBudgetIsATimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	a, _ := lockcore.NewMutex(&slowKey{DynamoDB: e.db, key: "s1", delay: 400 * time.Millisecond}, e.locks, fast("a")...)
	d, _ := lockcore.NewMutex(e.db, e.locks, fast("d")...)
	ld, err := d.Acquire(ctx, "s2")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ld.Release(context.Background()) }()
	_, err = a.AcquireAll(ctx, []string{"s1", "s2"}, lockcore.WaitUpTo(200*time.Millisecond))
	mustNot(t, err, lockcore.ErrLockHeld)
	if !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("WaitUpTo spent on s1, s2 held: want ErrWaitTimeout, got %v", err)
	}
	if _, err := d.TryAcquire(ctx, "s1"); err != nil {
		t.Fatalf("s1 left locked: %v", err)
	}
}

// A held row's TTL lies a lease and the grace ahead. WithTTLGrace(math.MaxInt64) (the
// natural way to say "never let TTL remove a held row") was accepted, and lease + grace
// overflowed to a negative duration: once the client knew the server's clock, the rows it
// held got an expiresAt about 292 years in the past. The option must be refused with an
// error naming it, or the TTL must stay ahead.
func TestTTLGraceOverflowRefused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	m, err := lockcore.NewMutex(e.db, e.locks, fast("a", lockcore.WithTTLGrace(math.MaxInt64))...)
	var oe *lockcore.OptionError
	if errors.As(err, &oe) && oe.Field == "ttlGrace" {
		return
	}
	if err != nil {
		t.Fatalf("want an OptionError on ttlGrace or none, got %v", err)
	}
	for range 2 { // the second acquisition knows the server's clock
		l, err := m.Acquire(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.locks), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "g"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := out.Item["expiresAt"].(*types.AttributeValueMemberN)
		ttl, _ := strconv.ParseInt(n.Value, 10, 64)
		if ttl < time.Now().Unix() {
			t.Fatalf("held row's expiresAt %s lies in the past", time.Unix(ttl, 0).UTC())
		}
		_ = l.Release(ctx)
	}
}

// The same overflow through a per-call lease: LeaseDuration near math.MaxInt64 with the
// default grace must be refused with an error naming the lease.
func TestLeaseDurationOverflowRefused(t *testing.T) {
	m, err := lockcore.NewMutex(stubDB{}, "t")
	if err != nil {
		t.Fatal(err)
	}
	huge := time.Duration(math.MaxInt64).Truncate(time.Millisecond)
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("LeaseDuration(%s) reached DynamoDB (panic on the stub: %v)", huge, r)
		}
	}()
	_, err = m.Acquire(context.Background(), "k", lockcore.LeaseDuration(huge))
	var oe *lockcore.OptionError
	if !errors.As(err, &oe) || oe.Field != "lease" {
		t.Fatalf("want an OptionError on lease, got %v", err)
	}
}
