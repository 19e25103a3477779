package lockcore_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Every way an ItemLocker tenure ends by its holder records the hold time its waiters
// plan their reads with — UpdateAndRelease, the locking read's usual end, included:
// without it 16 clients passed a 15 s-lease item eight times more slowly, each waiter
// reading three times as often.
func TestItemReleaseRecordsHoldTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(t *testing.T, il *lockcore.ItemLocker, l *lockcore.ItemLease)
	}{
		{"Release", func(t *testing.T, _ *lockcore.ItemLocker, l *lockcore.ItemLease) {
			if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}},
		{"UpdateAndRelease", func(t *testing.T, il *lockcore.ItemLocker, l *lockcore.ItemLease) {
			if _, err := il.UpdateAndRelease(ctxT(t, 10*time.Second), l, expression.Set(expression.Name("n"), expression.Value(1)), nil); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			il, err := lockcore.NewItemLocker(e.db, e.data, fast("holder")...)
			if err != nil {
				t.Fatal(err)
			}
			l, err := il.Acquire(ctxT(t, 10*time.Second), dataKey("SKU#hold-"+tc.name))
			if err != nil {
				t.Fatal(err)
			}
			if n := lockcore.HoldsKnown(il); n != 0 {
				t.Fatalf("hold times known before the release: %d, want 0", n)
			}
			tc.release(t, il, l)
			if n := lockcore.HoldsKnown(il); n != 1 {
				t.Errorf("hold times known after %s: %d, want 1", tc.name, n)
			}
		})
	}
}
