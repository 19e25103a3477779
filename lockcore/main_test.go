package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// env is one test's engine client and fresh tables.
type env struct {
	db    *dynamodb.Client
	locks string // a lock table (CreateLockTable)
	data  string // a data table with string keys pk and sk, for counters and data items
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := engineClient(t)
	return &env{db: db, locks: lockTable(t, db), data: dataTable(t, db)}
}

// fast are options for tests: the shortest lease the library allows by default and
// snappy backoff.
func fast(owner string, extra ...lockcore.Option) []lockcore.Option {
	return append([]lockcore.Option{
		lockcore.WithOwner(owner),
		lockcore.WithLease(3 * time.Second),
		lockcore.WithBackoff(2*time.Millisecond, 50*time.Millisecond),
	}, extra...)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dataKey(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
}

// overlap detects two holders inside a critical section at once.
type overlap struct{ cur, max atomic.Int32 }

func (o *overlap) enter() {
	c := o.cur.Add(1)
	for {
		m := o.max.Load()
		if c <= m || o.max.CompareAndSwap(m, c) {
			return
		}
	}
}
func (o *overlap) exit() { o.cur.Add(-1) }

// counter is a shared data item incremented by read-modify-write: without mutual
// exclusion increments get lost. It also checks that fencing tokens seen at the data
// strictly rise.
type counter struct {
	e  *env
	pk string

	mu        sync.Mutex
	lastFence lockcore.Fence
	regress   int
}

func (c *counter) read(t *testing.T, ctx context.Context) int64 {
	out, err := c.e.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(c.e.data), Key: dataKey(c.pk), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Errorf("read counter: %v", err)
		return -1
	}
	v, ok := out.Item["n"].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}

func (c *counter) write(t *testing.T, ctx context.Context, v int64) {
	item := dataKey(c.pk)
	item["n"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	if _, err := c.e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(c.e.data), Item: item}); err != nil {
		t.Errorf("write counter: %v", err)
	}
}

func (c *counter) fence(f lockcore.Fence) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f <= c.lastFence {
		c.regress++
	}
	c.lastFence = f
}

// hammer runs workers × iters critical sections and checks the invariants.
func hammer(t *testing.T, workers, iters int, cs func(ctx context.Context, w int) error) {
	t.Helper()
	ctx := ctxT(t, 8*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iters {
				if err := cs(ctx, w); err != nil {
					errs <- fmt.Errorf("worker %d iteration %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func mustNot(t *testing.T, err error, target error) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error matching %v, got nil", target)
	}
	if !errors.Is(err, target) {
		t.Fatalf("want error matching %v, got %v", target, err)
	}
}
