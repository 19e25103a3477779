package lockcore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// stubDB satisfies the interface for constructor tests; no call reaches it because
// every case below fails validation first.
type stubDB struct{ lockcore.DynamoDB }

func TestInvalidOptions(t *testing.T) {
	db := stubDB{}
	cases := []struct {
		name  string
		opts  []lockcore.Option
		field string
	}{
		{"zero lease", []lockcore.Option{lockcore.WithLease(0)}, "lease"},
		{"negative lease", []lockcore.Option{lockcore.WithLease(-time.Second)}, "lease"},
		{"lease below minimum", []lockcore.Option{lockcore.WithLease(time.Second)}, "lease"},
		{"sub-millisecond lease", []lockcore.Option{lockcore.WithLease(3*time.Second + time.Microsecond)}, "lease"},
		{"heartbeat equal to lease", []lockcore.Option{lockcore.WithLease(4 * time.Second), lockcore.WithHeartbeat(4 * time.Second)}, "heartbeat"},
		{"heartbeat above lease", []lockcore.Option{lockcore.WithLease(4 * time.Second), lockcore.WithHeartbeat(5 * time.Second)}, "heartbeat"},
		{"negative heartbeat", []lockcore.Option{lockcore.WithHeartbeat(-time.Second)}, "heartbeat"},
		{"empty owner", []lockcore.Option{lockcore.WithOwner("")}, "owner"},
		{"long owner", []lockcore.Option{lockcore.WithOwner(strings.Repeat("o", 300))}, "owner"},
		{"nil clock", []lockcore.Option{lockcore.WithClock(nil)}, "clock"},
		{"negative skew", []lockcore.Option{lockcore.WithTakeover(lockcore.WallClockTakeover(-time.Second))}, "takeover"},
		{"zero min lease", []lockcore.Option{lockcore.WithMinLease(0)}, "minLease"},
		{"negative ttl grace", []lockcore.Option{lockcore.WithTTLGrace(-time.Second)}, "ttlGrace"},
		{"zero retention", []lockcore.Option{lockcore.WithRetention(0)}, "retention"},
		{"backoff max below base", []lockcore.Option{lockcore.WithBackoff(time.Second, time.Millisecond)}, "backoff.max"},
		{"zero backoff", []lockcore.Option{lockcore.WithBackoff(0, time.Second)}, "backoff.base"},
		{"zero wait policy", []lockcore.Option{lockcore.WithWait(lockcore.WaitPolicy{})}, "wait"},
		{"negative wait", []lockcore.Option{lockcore.WithWait(lockcore.WaitUpTo(-time.Second))}, "wait"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for ctor, build := range map[string]func() error{
				"Mutex":      func() error { _, err := lockcore.NewMutex(db, "t", c.opts...); return err },
				"Queue":      func() error { _, err := lockcore.NewQueue(db, "t", c.opts...); return err },
				"ItemLocker": func() error { _, err := lockcore.NewItemLocker(db, "t", c.opts...); return err },
				"Versioned":  func() error { _, err := lockcore.NewVersioned(db, "t", c.opts...); return err },
			} {
				err := build()
				var oe *lockcore.OptionError
				if !errors.As(err, &oe) || !errors.Is(err, lockcore.ErrInvalidOption) || oe.Field != c.field {
					t.Errorf("%s: want OptionError on field %q, got %v", ctor, c.field, err)
				}
			}
		})
	}
	if _, err := lockcore.NewMutex(db, ""); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("empty table: %v", err)
	}
	if _, err := lockcore.NewMutex(nil, "t"); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := lockcore.NewQueue(db, "t", lockcore.WithHeartbeat(0)); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("queue without heartbeat: %v", err)
	}
	if _, err := lockcore.NewItemLocker(db, "t", lockcore.WithItemAttributes(lockcore.ItemAttributes{LockedBy: "x"})); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("incomplete item attributes: %v", err)
	}
	dup := lockcore.DefaultItemAttributes
	dup.Owner = dup.LockedBy
	if _, err := lockcore.NewItemLocker(db, "t", lockcore.WithItemAttributes(dup)); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("duplicate item attributes: %v", err)
	}
	if _, err := lockcore.NewVersioned(db, "t", lockcore.WithMaxAttempts(0)); !errors.Is(err, lockcore.ErrInvalidOption) {
		t.Errorf("zero attempts: %v", err)
	}
}

func TestInvalidKeys(t *testing.T) {
	db := stubDB{}
	m, err := lockcore.NewMutex(db, "t")
	if err != nil {
		t.Fatal(err)
	}
	q, _ := lockcore.NewQueue(db, "t")
	il, _ := lockcore.NewItemLocker(db, "t")
	ctx := context.Background()
	cases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"empty key", func() error { _, err := m.Acquire(ctx, ""); return err }, "key"},
		{"oversized key", func() error { _, err := m.Acquire(ctx, strings.Repeat("k", 2049)); return err }, "key"},
		{"invalid utf8", func() error { _, err := m.Acquire(ctx, "\xff"); return err }, "key"},
		{"reserved prefix", func() error { _, err := m.Acquire(ctx, "turnstile#x"); return err }, "key"},
		{"empty namespace", func() error { _, err := m.Acquire(ctx, "k", lockcore.Namespace("")); return err }, "namespace"},
		{"oversized namespace", func() error { _, err := m.Acquire(ctx, "k", lockcore.Namespace(strings.Repeat("n", 1025))); return err }, "namespace"},
		{"queue oversized namespace", func() error { _, err := q.Acquire(ctx, "k", lockcore.Namespace(strings.Repeat("n", 1000))); return err }, "namespace"},
		{"queue empty key", func() error { _, err := q.Acquire(ctx, ""); return err }, "key"},
		{"get empty key", func() error { _, err := m.Get(ctx, ""); return err }, "key"},
		{"multi empty", func() error { _, err := m.AcquireAll(ctx, nil); return err }, "keys"},
		{"multi bad member", func() error { _, err := m.AcquireAll(ctx, []string{"a", ""}); return err }, "key"},
		{"item empty key", func() error { _, err := il.Acquire(ctx, nil); return err }, "key"},
		{"item empty value", func() error {
			_, err := il.Acquire(ctx, map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{}})
			return err
		}, "key.pk"},
		{"item oversized value", func() error {
			_, err := il.Acquire(ctx, map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: strings.Repeat("k", 2049)}})
			return err
		}, "key.pk"},
		{"item key collides with lock attribute", func() error {
			_, err := il.Acquire(ctx, map[string]types.AttributeValue{"lockedBy": &types.AttributeValueMemberS{Value: "x"}})
			return err
		}, "key.lockedBy"},
		{"item key name with path characters", func() error {
			_, err := il.Acquire(ctx, map[string]types.AttributeValue{"a[": &types.AttributeValueMemberS{Value: "x"}})
			return err
		}, "key"},
		{"data too large", func() error { _, err := m.Acquire(ctx, "k", lockcore.Data(make([]byte, 65<<10))); return err }, "data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			var oe *lockcore.OptionError
			if !errors.As(err, &oe) || oe.Field != c.field {
				t.Fatalf("want OptionError on %q, got %v", c.field, err)
			}
		})
	}
}
