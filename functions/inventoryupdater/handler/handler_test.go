package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/policycheck"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// calls records the DynamoDB calls of the handler under test; after the tests they are
// compared with the function's role in template.yaml (policycheck).
var calls = policycheck.NewRecorder()

func TestMain(m *testing.M) { testenv.Main(policycheck.Run(m, "InventoryUpdaterFunction", calls)) }

func loadEvent(t *testing.T, name string) events.EventBridgeEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

func withDetail(ev events.EventBridgeEvent, detail string) events.EventBridgeEvent {
	ev.Detail = json.RawMessage(detail)
	return ev
}

func TestHandle(t *testing.T) {
	names := testenv.Tables(t, "LockTable", "InventoryTable")
	// The function's environment has no orders table.
	tables := shop.Tables{Locks: names["LockTable"], Inventory: names["InventoryTable"]}
	db := testenv.Client(t)
	// The handler's calls are recorded (policycheck); the fixture's (seed, stock) are not.
	hsvc, err := shop.NewService(calls.Client(db), tables, shop.WithOwner("inventoryupdater-test"), shop.WithWaitBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := shop.NewService(db, tables, shop.WithOwner("inventoryupdater-fixture"), shop.WithWaitBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	var logs, metrics bytes.Buffer
	h := handler.New(hsvc, handler.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		handler.WithMetrics(func(context.Context) handler.Metrics { return emf.New(&metrics, "test") }))
	if err := svc.SeedStock(context.Background(), "MUG-RED-350", 10); err != nil {
		t.Fatal(err)
	}
	good := loadEvent(t, "eventbridge-stock-adjusted.json") // +25
	negative := withDetail(good, `{"adjustmentId":"adj-neg","sku":"MUG-RED-350","delta":-36,"reason":"write-off"}`)
	drain := withDetail(good, `{"adjustmentId":"adj-drain","sku":"MUG-RED-350","delta":-35,"reason":"write-off"}`)
	wrongType := good
	wrongType.DetailType = "StockCounted"

	steps := []struct {
		name      string
		ev        events.EventBridgeEvent
		wantErr   error  // nil: success
		wantInErr string // the error names this
		avail     int
	}{
		{"applied", good, nil, "", 35},
		{"duplicate delivery", good, nil, "", 35},
		{"would go negative", negative, shop.ErrInsufficientStock, "would leave -1", 35},
		{"down to zero", drain, nil, "", 0},
		{"malformed", loadEvent(t, "eventbridge-stock-adjusted-malformed.json"), shop.ErrInvalid, "detail.delta", 0},
		{"missing sku", withDetail(good, `{"adjustmentId":"adj-x","delta":1}`), shop.ErrInvalid, "detail.sku: is required", 0},
		{"wrong detail-type", wrongType, nil, `detail-type "StockCounted"`, 0},
	}
	for _, st := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := h.Handle(ctx, st.ev)
		cancel()
		switch {
		case st.wantInErr == "" && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.wantInErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantInErr)):
			t.Fatalf("%s: err = %v, want one naming %q", st.name, err, st.wantInErr)
		case st.wantErr != nil && !errors.Is(err, st.wantErr):
			t.Fatalf("%s: err = %v, want %v", st.name, err, st.wantErr)
		}
		a, r, err := svc.Stock(context.Background(), "MUG-RED-350")
		if err != nil {
			t.Fatal(err)
		}
		if a != st.avail || r != 0 {
			t.Fatalf("%s: stock = %d/%d, want %d available", st.name, a, r, st.avail)
		}
	}
	for _, want := range []string{`"AdjustmentsApplied":1`, `"AdjustmentsDuplicate":1`, `"AdjustmentsRejected":1`} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, metrics.String())
		}
	}
	if !strings.Contains(logs.String(), `"field":"detail.delta"`) {
		t.Errorf("malformed event not logged with its field:\n%s", logs.String())
	}

	// Contention: an order reservation holds the SKU.
	other, err := lockcore.NewMutex(db, tables.Locks, lockcore.WithOwner("orderprocessor-x"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.Acquire(context.Background(), shop.SKULockKey("MUG-RED-350"))
	if err != nil {
		t.Fatal(err)
	}
	restock := withDetail(good, `{"adjustmentId":"adj-later","sku":"MUG-RED-350","delta":5,"reason":"restock"}`)
	if err := h.Handle(context.Background(), restock); !errors.Is(err, shop.ErrBusy) {
		t.Fatalf("under contention: %v, want ErrBusy", err)
	}
	_ = held.Release(context.Background())
	if err := h.Handle(context.Background(), restock); err != nil {
		t.Fatalf("retry: %v", err)
	}
}
