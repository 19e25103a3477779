package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// itemsIn scans a table (strongly consistent) and returns its items.
func itemsIn(t *testing.T, db *dynamodb.Client, table string) []map[string]types.AttributeValue {
	t.Helper()
	out, err := db.Scan(ctxT(t, 30*time.Second), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("scan %s: %v", table, err)
	}
	return out.Items
}

// TestCancelledAcquireWritesNothing: an acquisition whose context has already ended sends
// no request at all. It used to take a ticket and, the take's result being unknown, leave
// a tombstone row (with a TTL of about a day) for a call that never waited; and the
// TicketLock reported "lock held after waiting 0s" on a free lock.
func TestCancelledAcquireWritesNothing(t *testing.T) {
	for _, name := range []string{"Mutex", "Mutex/NoWait", "TicketLock", "TicketLock/NoWait", "Queue", "AcquireAll", "ItemLocker"} {
		t.Run(name, func(t *testing.T) { cancelledAcquire(t, name) })
	}
}

func cancelledAcquire(t *testing.T, which string) {
	e := newEnv(t)
	m, err := lockcore.NewMutex(e.db, e.locks, fast("cancelled")...)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := lockcore.NewTicketLock(e.db, e.locks, fast("cancelled")...)
	if err != nil {
		t.Fatal(err)
	}
	q, err := lockcore.NewQueue(e.db, e.locks, fast("cancelled")...)
	if err != nil {
		t.Fatal(err)
	}
	il, err := lockcore.NewItemLocker(e.db, e.data, fast("cancelled")...)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		table   string
		acquire func(ctx context.Context) error
	}{
		{"Mutex", e.locks, func(ctx context.Context) error { _, err := m.Acquire(ctx, "k-mutex"); return err }},
		{"Mutex/NoWait", e.locks, func(ctx context.Context) error { _, err := m.TryAcquire(ctx, "k-mutex"); return err }},
		{"TicketLock", e.locks, func(ctx context.Context) error { _, err := tl.Acquire(ctx, "k-ticket"); return err }},
		{"TicketLock/NoWait", e.locks, func(ctx context.Context) error { _, err := tl.TryAcquire(ctx, "k-ticket"); return err }},
		{"Queue", e.locks, func(ctx context.Context) error { _, err := q.Acquire(ctx, "k-queue"); return err }},
		{"AcquireAll", e.locks, func(ctx context.Context) error {
			_, err := m.AcquireAll(ctx, []string{"k-all-1", "k-all-2"})
			return err
		}},
		{"ItemLocker", e.data, func(ctx context.Context) error { _, err := il.Acquire(ctx, dataKey("k-item")); return err }},
	}
	for _, c := range cases {
		if c.name != which {
			continue
		}
		func() {
			for _, cause := range []string{"cancelled", "deadline"} {
				var ctx context.Context
				var cancel context.CancelFunc
				want := context.Canceled
				if cause == "cancelled" {
					ctx, cancel = context.WithCancel(context.Background())
				} else {
					ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
					want = context.DeadlineExceeded
				}
				cancel()
				err := c.acquire(ctx)
				if !errors.Is(err, want) {
					t.Fatalf("%s: Acquire = %v, want an error matching %v", cause, err, want)
				}
				if errors.Is(err, lockcore.ErrLockHeld) {
					t.Errorf("%s: Acquire on a free lock reports it held: %v", cause, err)
				}
				if items := itemsIn(t, e.db, c.table); len(items) != 0 {
					t.Fatalf("%s: a cancelled Acquire wrote %d item(s): %v", cause, len(items), items)
				}
			}
		}()
	}
}
