package handler_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/policycheck"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// acquireOn matches the lock acquisitions on a table (conditional UpdateItem returning
// ALL_NEW: lockcore's Mutex and ItemLocker attempts) and reports true for the first only.
func acquireOn(logicalID string, hit *atomic.Bool) func(in any) bool {
	return func(in any) bool {
		u, ok := in.(*dynamodb.UpdateItemInput)
		if !ok || !strings.HasPrefix(aws.ToString(u.TableName), logicalID+"-") ||
			u.ConditionExpression == nil || u.ReturnValues != types.ReturnValueAllNew {
			return false
		}
		return hit.CompareAndSwap(false, true)
	}
}

// The rare path of the order processor's policy: a lock write whose answer is lost after
// it was applied (a 5xx, a timeout) is resolved by a consistent re-read (GetItem) of the
// SKU's stock item, and the order is still reserved exactly once.
func TestAmbiguousLockWritesAreReRead(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})
	var lockHit atomic.Bool
	db := calls.Client(testenv.Client(t), policycheck.Fault(1, acquireOn("InventoryTable", &lockHit)))
	svc, err := shop.NewService(db, f.tables, shop.WithOwner("orderprocessor-ambiguous"), shop.WithWaitBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	f.h = handler.New(svc, handler.WithLogger(slog.New(slog.NewJSONHandler(f.logs, nil))),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(f.metrics, "test") }))
	if failed := f.invoke(t, loadEvent(t, "sqs-order.json")); len(failed) != 0 {
		t.Fatalf("failures: %v\n%s", failed, f.logs)
	}
	if !lockHit.Load() {
		t.Fatal("no fault injected")
	}
	if st := f.status(t, "ord-1001"); st != shop.StatusReserved {
		t.Errorf("status = %s", st)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{3, 2} {
		t.Errorf("MUG stock = %v, want 3 available, 2 reserved (reserved once)", got)
	}
}
