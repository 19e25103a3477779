package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

// finalState is what a run left in its tables, read back with strongly consistent scans.
type finalState struct {
	status  map[string]string // order id -> status ("" when the item has none)
	stock   map[string]stockRow
	markers map[string][]int // SKU -> deltas of the applied-adjustment markers
	// rejectedAdjustments counts the markers of rejected adjustments (outcome REJECTED:
	// the service records a rejection instead of failing the event for retries).
	rejectedAdjustments int
}

type stockRow struct {
	available, reserved, ver int64
}

func scanAll(ctx context.Context, db *dynamodb.Client, table string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		out, err := db.Scan(ctx, &dynamodb.ScanInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", table, err)
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil
		}
		start = out.LastEvaluatedKey
	}
}

func readFinalState(ctx context.Context, db *dynamodb.Client, orders, inventory string) (*finalState, error) {
	fs := &finalState{status: map[string]string{}, stock: map[string]stockRow{}, markers: map[string][]int{}}
	items, err := scanAll(ctx, db, orders)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		fs.status[sAttr(it, "orderId")] = sAttr(it, "status")
	}
	items, err = scanAll(ctx, db, inventory)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		sku := strings.TrimPrefix(sAttr(it, "pk"), "SKU#")
		sk := sAttr(it, "sk")
		switch {
		case sk == "STOCK":
			fs.stock[sku] = stockRow{available: nAttr(it, "available"), reserved: nAttr(it, "reserved"), ver: nAttr(it, "ver")}
		case strings.HasPrefix(sk, "ADJ#") && sAttr(it, "outcome") == shop.OutcomeRejected:
			fs.rejectedAdjustments++
		case strings.HasPrefix(sk, "ADJ#"):
			fs.markers[sku] = append(fs.markers[sku], int(nAttr(it, "delta")))
		}
	}
	return fs, nil
}

// outcome is the measured result of one run (turnstile or baseline).
type outcome struct {
	submitted, final, reserved, rejected int
	notFinal                             []string // orders never decided (or missing)
	doubleProcessed                      int      // orders whose decision was written more than once
	doubleExamples                       []string
	lostUpdates                          int // see measure
	lostUpdatesExact                     bool
	oversoldUnits                        int
	residualUnits                        int // Σ|stock - replay of acknowledged updates|
	negative                             []string
	adjustmentsApplied                   int
	adjustmentsRejected                  int // recorded rejections (stock would go negative)
	skus                                 []skuOutcome
	violations                           []string
}

type skuOutcome struct {
	SKU                  string `json:"sku"`
	Initial              int    `json:"initial"`
	Adjustments          int    `json:"adjustments"`
	Available            int64  `json:"available"`
	Reserved             int64  `json:"reserved"`
	ReservedByOrders     int    `json:"reserved_by_orders"`
	UnitsPromised        int    `json:"units_promised"`
	StockWrites          int    `json:"stock_writes"`
	Conserved            bool   `json:"conserved"`
	LostUpdates          int    `json:"lost_updates"`
	OversoldUnits        int    `json:"oversold_units"`
	ResidualUnits        int    `json:"residual_units"`
	ReservationsMatching bool   `json:"reservations_match_orders"`
}

// measure compares a run's final state with its workload and its audit.
//
//   - double processing: orders whose final decision was written more than once (audit);
//   - oversold units: per SKU, units promised by RESERVED decisions beyond the stock that
//     existed (initial + applied adjustments);
//   - lost updates: versioned (the baseline's stock records carry ver, see naiveStore):
//     successful stock writes minus the versions they produced, exactly; otherwise (the
//     service's writes are relative and fenced, a lost update could only show as stock
//     that disagrees with the acknowledged updates): one per SKU whose stock differs from
//     the replay of its acknowledged updates — a lower bound, 0 exactly when every
//     acknowledged update is reflected.
func measure(w *workload, fs *finalState, aud *audit, versioned bool) *outcome {
	decisions, stockWrites := aud.snapshot()
	o := &outcome{submitted: len(w.orders), lostUpdatesExact: versioned}
	lines := map[string][]orderLine{}
	for _, po := range w.orders {
		for _, l := range po.order.Lines {
			lines[po.order.OrderID] = append(lines[po.order.OrderID], orderLine{l.SKU, l.Qty})
		}
		switch st := fs.status[po.order.OrderID]; st {
		case "RESERVED":
			o.final++
			o.reserved++
		case "REJECTED":
			o.final++
			o.rejected++
		default:
			o.notFinal = append(o.notFinal, po.order.OrderID)
		}
		if n := len(decisions[po.order.OrderID]); n > 1 {
			o.doubleProcessed++
			if len(o.doubleExamples) < 3 {
				o.doubleExamples = append(o.doubleExamples,
					fmt.Sprintf("%s: %s", po.order.OrderID, strings.Join(decisions[po.order.OrderID], ", ")))
			}
		}
	}
	reservedByOrders := map[string]int{}
	promised := map[string]int{}
	for id, st := range fs.status {
		if st == "RESERVED" {
			for _, l := range lines[id] {
				reservedByOrders[l.sku] += l.qty
			}
		}
	}
	for id, ds := range decisions {
		for _, d := range ds {
			if d == "RESERVED" {
				for _, l := range lines[id] {
					promised[l.sku] += l.qty
				}
			}
		}
	}
	o.adjustmentsRejected = fs.rejectedAdjustments
	var skuViolations []string
	skus := w.skus()
	sort.Strings(skus)
	for _, sku := range skus {
		st := fs.stock[sku]
		adj := 0
		for _, d := range fs.markers[sku] {
			adj += d
			o.adjustmentsApplied++
		}
		supply := w.initial[sku] + adj
		so := skuOutcome{
			SKU: sku, Initial: w.initial[sku], Adjustments: adj, Available: st.available, Reserved: st.reserved,
			ReservedByOrders: reservedByOrders[sku], UnitsPromised: promised[sku], StockWrites: stockWrites[sku],
		}
		so.Conserved = int64(supply) == st.available+st.reserved
		so.ReservationsMatching = st.reserved == int64(reservedByOrders[sku])
		so.ResidualUnits = abs(int64(supply)-st.available-st.reserved) + abs(st.reserved-int64(reservedByOrders[sku]))
		so.OversoldUnits = max(0, promised[sku]-supply)
		if versioned {
			so.LostUpdates = max(0, stockWrites[sku]-int(st.ver))
		} else if so.ResidualUnits != 0 {
			so.LostUpdates = 1
		}
		o.lostUpdates += so.LostUpdates
		o.oversoldUnits += so.OversoldUnits
		o.residualUnits += so.ResidualUnits
		if st.available < 0 || st.reserved < 0 {
			o.negative = append(o.negative, fmt.Sprintf("%s: available %d, reserved %d", sku, st.available, st.reserved))
		}
		if !so.Conserved {
			skuViolations = append(skuViolations, fmt.Sprintf(
				"stock of %s not conserved: initial %d + adjustments %+d = %d, but available %d + reserved %d = %d",
				sku, w.initial[sku], adj, supply, st.available, st.reserved, st.available+st.reserved))
		}
		if !so.ReservationsMatching {
			skuViolations = append(skuViolations, fmt.Sprintf(
				"reserved stock of %s is %d, but the RESERVED orders hold %d", sku, st.reserved, reservedByOrders[sku]))
		}
		o.skus = append(o.skus, so)
	}
	if o.doubleProcessed > 0 {
		o.violations = append(o.violations, fmt.Sprintf("%d orders were decided more than once (e.g. %s)",
			o.doubleProcessed, strings.Join(o.doubleExamples, "; ")))
	}
	if o.oversoldUnits > 0 {
		o.violations = append(o.violations, fmt.Sprintf("%d units promised to customers beyond the stock that existed", o.oversoldUnits))
	}
	if len(o.notFinal) > 0 {
		ex := o.notFinal[:min(5, len(o.notFinal))]
		o.violations = append(o.violations, fmt.Sprintf("%d orders did not end RESERVED or REJECTED (e.g. %s)",
			len(o.notFinal), strings.Join(ex, ", ")))
	}
	for _, n := range o.negative {
		o.violations = append(o.violations, "negative stock: "+n)
	}
	o.violations = append(o.violations, skuViolations...)
	return o
}

type orderLine struct {
	sku string
	qty int
}

func abs(v int64) int {
	if v < 0 {
		return int(-v)
	}
	return int(v)
}
