package lockcore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// The acceptance bar of every strategy: 16 goroutines × 50 read-modify-write increments
// of one counter item end at exactly 800, never two holders at once, and the fencing
// tokens seen at the data strictly rise.
const (
	hotWorkers = 16
	hotIters   = 50
)

// hot are the options of the contention tests: a lease long enough that a loaded test
// machine (the race detector, other test binaries) never lets one expire mid-section —
// expiry has tests of its own.
func hot(owner string, extra ...lockcore.Option) []lockcore.Option {
	return fast(owner, append([]lockcore.Option{
		lockcore.WithLease(15 * time.Second),
		// 16 waiters polling every few ms saturate a 2-core DynamoDB Local under the race
		// detector; a higher cap keeps the engine responsive.
		lockcore.WithBackoff(5*time.Millisecond, 200*time.Millisecond),
	}, extra...)...)
}

func TestContentionMutex(t *testing.T) {
	e := newEnv(t)
	c := &counter{e: e, pk: "SKU#hot"}
	var ov overlap
	mutexes := make([]*lockcore.Mutex, hotWorkers)
	for w := range mutexes {
		m, err := lockcore.NewMutex(e.db, e.locks, hot(fmt.Sprintf("worker-%d", w))...)
		if err != nil {
			t.Fatal(err)
		}
		mutexes[w] = m
	}
	hammer(t, hotWorkers, hotIters, func(ctx context.Context, w int) error {
		l, err := mutexes[w].Acquire(ctx, "counter")
		if err != nil {
			return err
		}
		ov.enter()
		c.fence(l.Token())
		c.write(t, ctx, c.read(t, ctx)+1)
		ov.exit()
		return l.Release(ctx)
	})
	assertHammer(t, c, &ov)
}

func assertHammer(t *testing.T, c *counter, ov *overlap) {
	t.Helper()
	if got := c.read(t, context.Background()); got != hotWorkers*hotIters {
		t.Errorf("counter = %d, want %d", got, hotWorkers*hotIters)
	}
	if m := ov.max.Load(); m > 1 {
		t.Errorf("overlap detector saw %d holders at once", m)
	}
	if c.regress > 0 {
		t.Errorf("fencing token went backwards %d times", c.regress)
	}
}

func TestContentionLockingRead(t *testing.T) {
	e := newEnv(t)
	var ov overlap
	c := &counter{e: e, pk: "SKU#hot"}
	lockers := make([]*lockcore.ItemLocker, hotWorkers)
	for w := range lockers {
		il, err := lockcore.NewItemLocker(e.db, e.data, hot(fmt.Sprintf("worker-%d", w))...)
		if err != nil {
			t.Fatal(err)
		}
		lockers[w] = il
	}
	hammer(t, hotWorkers, hotIters, func(ctx context.Context, w int) error {
		l, err := lockers[w].Acquire(ctx, dataKey(c.pk))
		if err != nil {
			return err
		}
		ov.enter()
		c.fence(l.Token())
		var n int64
		if v, ok := l.Item()["n"].(*types.AttributeValueMemberN); ok {
			n, _ = strconv.ParseInt(v.Value, 10, 64)
		}
		ov.exit()
		_, err = lockers[w].UpdateAndRelease(ctx, l, expression.Set(expression.Name("n"), expression.Value(n+1)), nil)
		return err
	})
	assertHammer(t, c, &ov)
}

func TestContentionQueue(t *testing.T) {
	e := newEnv(t)
	var ov overlap
	c := &counter{e: e, pk: "SKU#hot"}
	queues := make([]*lockcore.Queue, hotWorkers)
	for w := range queues {
		q, err := lockcore.NewQueue(e.db, e.locks, hot(fmt.Sprintf("worker-%d", w))...)
		if err != nil {
			t.Fatal(err)
		}
		queues[w] = q
	}
	hammer(t, hotWorkers, hotIters, func(ctx context.Context, w int) error {
		l, err := queues[w].Acquire(ctx, "counter")
		if err != nil {
			return err
		}
		ov.enter()
		c.fence(l.Token())
		c.write(t, ctx, c.read(t, ctx)+1)
		ov.exit()
		return l.Release(ctx)
	})
	assertHammer(t, c, &ov)
}

func TestContentionVersioned(t *testing.T) {
	e := newEnv(t)
	c := &counter{e: e, pk: "SKU#hot"}
	v, err := lockcore.NewVersioned(e.db, e.data, append(hot("v"), lockcore.WithMaxAttempts(1000))...)
	if err != nil {
		t.Fatal(err)
	}
	hammer(t, hotWorkers, hotIters, func(ctx context.Context, w int) error {
		_, _, err := v.Update(ctx, dataKey(c.pk), func(cur map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
			var n int64
			if x, ok := cur["n"].(*types.AttributeValueMemberN); ok {
				n, _ = strconv.ParseInt(x.Value, 10, 64)
			}
			return map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: strconv.FormatInt(n+1, 10)}}, nil
		})
		return err
	})
	var ov overlap
	assertHammer(t, c, &ov)
}

// Multi-key: every worker takes two of three keys in varying order (both orders of each
// pair occur), so a lock that did not order keys would deadlock. Each key's counter must
// end exact.
func TestContentionMulti(t *testing.T) {
	e := newEnv(t)
	keys := []string{"a", "b", "c"}
	counters := map[string]*counter{}
	overlaps := map[string]*overlap{}
	for _, k := range keys {
		counters[k] = &counter{e: e, pk: "SKU#" + k}
		overlaps[k] = &overlap{}
	}
	mutexes := make([]*lockcore.Mutex, hotWorkers)
	for w := range mutexes {
		m, err := lockcore.NewMutex(e.db, e.locks, hot(fmt.Sprintf("worker-%d", w))...)
		if err != nil {
			t.Fatal(err)
		}
		mutexes[w] = m
	}
	pairs := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "b"}, {"c", "a"}, {"a", "c"}}
	counts := map[string]int{}
	for w := range hotWorkers {
		for i := range hotIters {
			for _, k := range pairs[(w+i)%len(pairs)] {
				counts[k]++
			}
		}
	}
	iter := make([]int, hotWorkers)
	hammer(t, hotWorkers, hotIters, func(ctx context.Context, w int) error {
		pair := pairs[(w+iter[w])%len(pairs)]
		iter[w]++
		ml, err := mutexes[w].AcquireAll(ctx, pair)
		if err != nil {
			return err
		}
		for _, k := range pair {
			overlaps[k].enter()
			c := counters[k]
			c.fence(ml.Token(k))
			c.write(t, ctx, c.read(t, ctx)+1)
			overlaps[k].exit()
		}
		return ml.Release(ctx)
	})
	for _, k := range keys {
		c := counters[k]
		if got := c.read(t, context.Background()); got != int64(counts[k]) {
			t.Errorf("counter %s = %d, want %d", k, got, counts[k])
		}
		if m := overlaps[k].max.Load(); m > 1 {
			t.Errorf("key %s: %d holders at once", k, m)
		}
		if c.regress > 0 {
			t.Errorf("key %s: fence went backwards %d times", k, c.regress)
		}
	}
}
