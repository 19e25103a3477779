package demo

import (
	"context"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// TestOrdersPerDecisionWrite pins how the audit counts decision writes: a request that
// writes at least one order's final status is one decision write, however many orders
// it decides; PENDING orders, stock records and adjustment markers are not decisions.
func TestOrdersPerDecisionWrite(t *testing.T) {
	a := newAudit("orders", "inventory")
	decide := func(id, status string) types.TransactWriteItem { // the service's shape: an update of the order item
		return types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String("orders"), Key: map[string]types.AttributeValue{"orderId": s(id)},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": s(status), ":n": nv(1)},
		}}
	}
	stock := func(sku string) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String("inventory"), Key: map[string]types.AttributeValue{"pk": s("SKU#" + sku), "sk": s("STOCK")},
		}}
	}
	if n, per, most := a.decisionWriteStats(); n != 0 || per != 0 || most != 0 {
		t.Fatalf("no writes: %d, %v, %d", n, per, most)
	}
	// A group of three orders and two SKUs in one transaction.
	a.observe("TransactWriteItems", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		decide("o1", "RESERVED"), decide("o2", "REJECTED"), decide("o3", "RESERVED"), stock("A"), stock("B"),
	}})
	// One order by PutItem (the naive and optimistic shape), one in a transaction of its own.
	a.observe("PutItem", &dynamodb.PutItemInput{TableName: aws.String("orders"),
		Item: map[string]types.AttributeValue{"orderId": s("o4"), "status": s("REJECTED")}})
	a.observe("TransactWriteItems", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		stock("A"), {Put: &types.Put{TableName: aws.String("orders"),
			Item: map[string]types.AttributeValue{"orderId": s("o5"), "status": s("RESERVED")}}},
	}})
	// Not decisions: a PENDING order, a stock write, an adjustment marker, a stock-only
	// transaction.
	a.observe("PutItem", &dynamodb.PutItemInput{TableName: aws.String("orders"),
		Item: map[string]types.AttributeValue{"orderId": s("o6"), "status": s("PENDING")}})
	a.observe("UpdateItem", &dynamodb.UpdateItemInput{TableName: aws.String("inventory"),
		Key: map[string]types.AttributeValue{"pk": s("SKU#A"), "sk": s("STOCK")}})
	a.observe("PutItem", &dynamodb.PutItemInput{TableName: aws.String("inventory"),
		Item: map[string]types.AttributeValue{"pk": s("SKU#A"), "sk": s("ADJ#1")}})
	a.observe("TransactWriteItems", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{stock("A"), stock("B")}})

	n, per, most := a.decisionWriteStats()
	if n != 3 || per != 5.0/3 || most != 3 {
		t.Errorf("decision writes %d, %v orders each, at most %d; want 3 writes of 5 orders, at most 3", n, per, most)
	}
	if got := a.decided(); got != 5 {
		t.Errorf("decided %d orders, want 5", got)
	}
}

// TestHoldTimes pins the critical-section figures: only the watched key counts; each
// clean release contributes its Held duration; lost leases are counted apart, without a
// hold time; mean, p50 (nearest rank), p99 and max in ms.
func TestHoldTimes(t *testing.T) {
	h := newHoldTimes("sku#HOT", "HOT")
	o := h.observer()
	ctx := context.Background()
	for _, held := range []time.Duration{40, 10, 30, 20, 100} {
		o.Acquired(ctx, lockcore.AcquireEvent{Key: "sku#HOT"})
		o.Released(ctx, lockcore.LeaseEvent{Key: "sku#HOT", Held: held * time.Millisecond})
	}
	o.Acquired(ctx, lockcore.AcquireEvent{Key: "sku#HOT"})
	o.LeaseLost(ctx, lockcore.LeaseEvent{Key: "sku#HOT", Held: time.Hour})
	o.Acquired(ctx, lockcore.AcquireEvent{Key: "sku#OTHER"})
	o.Released(ctx, lockcore.LeaseEvent{Key: "sku#OTHER", Held: time.Hour})
	o.LeaseLost(ctx, lockcore.LeaseEvent{Key: "sku#OTHER"})

	got := h.stats("HOT", 7)
	want := HoldStats{SKU: "HOT", Orders: 7, Acquisitions: 6, Released: 5, LeasesLost: 1,
		MeanMs: 40, P50Ms: 30, P99Ms: 100, MaxMs: 100}
	if *got != want {
		t.Errorf("stats = %+v\nwant    %+v", *got, want)
	}
	if empty := newHoldTimes("k", "K").stats("K", 0); empty.Released != 0 || empty.P50Ms != 0 || empty.MeanMs != 0 {
		t.Errorf("no holds: %+v", *empty)
	}

	// The stock items the service locks are released by its own transactions: their
	// holds come from the service's hold events.
	h = newHoldTimes(stockLockLabel("HOT"), "HOT")
	o, ho := h.observer(), h.holdObserver()
	for _, held := range []time.Duration{40, 10, 30} {
		o.Acquired(ctx, lockcore.AcquireEvent{Key: stockLockLabel("HOT")})
		ho(ctx, shop.HoldEvent{SKU: "HOT", Held: held * time.Millisecond, Orders: 2})
	}
	o.Acquired(ctx, lockcore.AcquireEvent{Key: stockLockLabel("HOT")})
	ho(ctx, shop.HoldEvent{SKU: "HOT", Held: time.Hour, Lost: true})
	ho(ctx, shop.HoldEvent{SKU: "OTHER", Held: time.Hour})
	got = h.stats("HOT", 4)
	want = HoldStats{SKU: "HOT", Orders: 4, Acquisitions: 4, Released: 3, LeasesLost: 1,
		MeanMs: 26.7, P50Ms: 30, P99Ms: 40, MaxMs: 40}
	if *got != want {
		t.Errorf("stock holds: stats = %+v\nwant    %+v", *got, want)
	}
}

// TestHottestSKU: with one hot SKU every hot order wants the same SKU, and it is the one
// whose critical section is timed.
func TestHottestSKU(t *testing.T) {
	w := newWorkload(1, 200, 1, 0, 0)
	if got := w.hottest(); got != hotNames[0] {
		t.Errorf("hottest = %s, want %s", got, hotNames[0])
	}
	n := w.wanting(hotNames[0])
	for _, sku := range w.skus() {
		if sku != hotNames[0] && w.wanting(sku) >= n {
			t.Errorf("%s is wanted by %d orders, the hot SKU by %d", sku, w.wanting(sku), n)
		}
	}
	if n < 100 {
		t.Errorf("the only hot SKU is wanted by %d of 200 orders, want most", n)
	}
}

// TestScaleReport: the sweep's table and chart show every run of every point, per number
// of hot SKUs, with the critical section only where there are locks and the conflict
// retries only for the optimistic run.
func TestScaleReport(t *testing.T) {
	runs := func(k float64) map[string]RunStats {
		return map[string]RunStats{
			"turnstile": {CallsPerOrder: 5 * k, OrdersPerDecisionWrite: 4.5, LatencyMaxMs: 9000,
				HotSKU: &HoldStats{SKU: "HOT", P50Ms: 80 * k, P99Ms: 200 * k}},
			"naive":      {CallsPerOrder: 6, OrdersPerDecisionWrite: 1},
			"optimistic": {CallsPerOrder: 4 * k, OrdersPerDecisionWrite: 1, Conflicts: &ConflictStats{RetriesPerOrder: 0.8 * k}},
		}
	}
	sc := &Scale{Orders: 150, Seed: 1}
	for _, hot := range []int{4, 1} {
		for _, c := range []int{12, 40} {
			sc.Add(&Report{Runs: runs(float64(5 - hot)), InvariantsOK: true, ChecksOK: true,
				Settings: Settings{HotSKUs: hot, Concurrency: c}})
		}
	}
	var b strings.Builder
	sc.WriteText(&b)
	text := b.String()
	for _, want := range []string{
		"  1    40    optimistic   16.0 ", // 4 calls × 4
		"  4    12    turnstile     5.0 ",
		"  1    12    turnstile    20.0 ",
		"320 / 800", // held p50 / p99 at 1 hot SKU
		" 3.20 ",    // conflict retries at 1 hot SKU
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, " naive "); n != 4 {
		t.Errorf("%d naive rows, want 4:\n%s", n, text)
	}
	svg := sc.SVG()
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("SVG does not parse: %v", err)
	}
	for _, want := range []string{"1 hot SKU<", "4 hot SKUs<", "optimistic, 1 hot, concurrency 40: 3.2<", "turnstile, 1 hot, concurrency 12: 320<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// 4 points; 5 panels every run has, one more for the critical section (turnstile)
	// and for the conflict retries (optimistic).
	for run, want := range map[string]int{"turnstile": 24, "naive": 20, "optimistic": 24} {
		if n := strings.Count(svg, "<title>"+run+", "); n != want {
			t.Errorf("SVG has %d bars of the %s run, want %d", n, run, want)
		}
	}
}
