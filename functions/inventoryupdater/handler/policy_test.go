package handler_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/policycheck"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// The rare path of the inventory updater's policy: a lock acquisition whose answer is lost
// after it was applied is resolved by a consistent re-read (GetItem) of the stock item,
// and the adjustment is applied once.
func TestAmbiguousLockWriteIsReRead(t *testing.T) {
	names := testenv.Tables(t, "LockTable", "InventoryTable")
	tables := shop.Tables{Locks: names["LockTable"], Inventory: names["InventoryTable"]}
	var hit atomic.Bool
	db := calls.Client(testenv.Client(t), policycheck.Fault(1, func(in any) bool {
		u, ok := in.(*dynamodb.UpdateItemInput)
		if !ok || !strings.HasPrefix(aws.ToString(u.TableName), "InventoryTable-") ||
			u.ConditionExpression == nil || u.ReturnValues != types.ReturnValueAllNew {
			return false
		}
		return hit.CompareAndSwap(false, true)
	}))
	svc, err := shop.NewService(db, tables, shop.WithOwner("inventoryupdater-ambiguous"), shop.WithWaitBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	fixture, err := shop.NewService(testenv.Client(t), tables, shop.WithOwner("inventoryupdater-fixture"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fixture.SeedStock(context.Background(), "MUG-RED-350", 10); err != nil {
		t.Fatal(err)
	}
	h := handler.New(svc, handler.WithLogger(slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Handle(ctx, loadEvent(t, "eventbridge-stock-adjusted.json")); err != nil { // +25
		t.Fatal(err)
	}
	if !hit.Load() {
		t.Fatal("no fault injected")
	}
	if a, r, err := fixture.Stock(context.Background(), "MUG-RED-350"); err != nil || a != 35 || r != 0 {
		t.Errorf("stock = %d/%d (%v), want 35 available: applied once", a, r, err)
	}
}
