package demo

import (
	"strconv"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

// RunStats are one run's per-order figures, the same yardstick for every run: how often
// SQS delivered an order, what reached the dead-letter queue, what an order cost in
// DynamoDB and how long it took from its first send to its decision.
type RunStats struct {
	Orders int `json:"orders"`
	// ReceiveCounts is the distribution of the receives an order's original message took
	// until it was deleted or dead-lettered ("1": decided on its first delivery).
	ReceiveCounts map[string]int `json:"receive_count_distribution"`
	// RedeliveriesPerOrder counts every receive after the first of every order message
	// (duplicate sends and deliveries included), per order.
	RedeliveriesPerOrder float64 `json:"redeliveries_per_order"`
	// ContentionReturnsPerOrder are messages returned because their locks were still
	// held when the invocation's time (or the legacy wait budget) ran out, per order.
	ContentionReturnsPerOrder float64 `json:"contention_returns_per_order"`
	// DeadLetteredPoison are malformed messages in the DLQ (all of them belong there);
	// DeadLetteredOrders are valid orders' messages in the DLQ (contention, crashes).
	DeadLetteredPoison int `json:"dead_lettered_poison"`
	DeadLetteredOrders int `json:"dead_lettered_orders"`
	PoisonSent         int `json:"poison_sent"`
	// PoisonReceives are the receives each dead-lettered poison message took.
	PoisonReceives        []int   `json:"poison_receives"`
	CallsPerOrder         float64 `json:"dynamodb_calls_per_order"`
	CapacityUnitsPerOrder float64 `json:"capacity_units_per_order"`
	LatencyP50Ms          float64 `json:"order_latency_p50_ms"`
	LatencyP99Ms          float64 `json:"order_latency_p99_ms"`
	LatencyMaxMs          float64 `json:"order_latency_max_ms"`
	Undecided             int     `json:"orders_undecided"`
	DurationS             float64 `json:"duration_s"`
	// CallsByOperation counts the requests (first attempts) by function, operation
	// (UpdateItem with its ReturnValues) and table.
	CallsByOperation map[string]int64 `json:"calls_by_operation,omitempty"`
	// CapacityByOperation is the capacity units those requests consumed (a conditional
	// write refused by its condition counts 1 WCU, as AWS bills it).
	CapacityByOperation map[string]float64 `json:"capacity_by_operation,omitempty"`
	// DecisionWrites are the successful requests that wrote order decisions;
	// OrdersPerDecisionWrite is the decisions they wrote per request (the service writes a
	// batch's group of orders in one transaction; the naive and the optimistic code one
	// order per request), MaxOrdersPerDecisionWrite the most in one request.
	DecisionWrites            int     `json:"decision_writes"`
	OrdersPerDecisionWrite    float64 `json:"orders_per_decision_write"`
	MaxOrdersPerDecisionWrite int     `json:"max_orders_per_decision_write"`
	// HotSKU is the critical section of the hottest SKU's lock (runs with locks only).
	HotSKU *HoldStats `json:"hot_sku_critical_section,omitempty"`
	// Conflicts are the optimistic run's retries (optimistic run only).
	Conflicts *ConflictStats `json:"conflicts,omitempty"`
}

// HoldStats describe the critical section of one SKU's lock in the order processor: how
// often it was acquired and how long each acquisition held it, from the acquisition to
// its release (lockcore's Observer: Acquired, and Released with the Held duration).
type HoldStats struct {
	SKU string `json:"sku"`
	// Orders are the workload's orders that want the SKU (each copy of a message and each
	// retry of an order acquires it again, and one acquisition may cover several orders
	// of a batch).
	Orders       int `json:"orders_wanting_it"`
	Acquisitions int `json:"acquisitions"`
	Released     int `json:"released"` // acquisitions whose hold time is in the figures
	LeasesLost   int `json:"leases_lost"`
	// Hold time per acquisition, ms.
	MeanMs float64 `json:"hold_mean_ms"`
	P50Ms  float64 `json:"hold_p50_ms"`
	P99Ms  float64 `json:"hold_p99_ms"`
	MaxMs  float64 `json:"hold_max_ms"`
}

// ConflictStats count the optimistic run's attempts at orders (a consistent read of the
// order and its stock, then a conditional write) and how they ended.
type ConflictStats struct {
	Attempts int `json:"attempts"`
	// Retries are attempts whose write lost to a concurrent one (a stock version
	// changed since the read, or a transaction conflict); RetriesPerOrder divides them by
	// the workload's orders.
	Retries         int     `json:"conflict_retries"`
	RetriesPerOrder float64 `json:"conflict_retries_per_order"`
	// Exhausted are deliveries that ran out of attempts (or of the invocation's time
	// between attempts) and went back to SQS (batchItemFailures).
	Exhausted  int `json:"attempts_exhausted"`
	Decided    int `json:"decided"`
	Duplicates int `json:"duplicates"`
	// Failed are attempts that ended in an error: an injected crash, a failed request.
	// Attempts = Decided + Duplicates + Retries + Failed.
	Failed int `json:"failed"`
}

// runStats computes a run's RunStats from its queue and audit.
func (d *demo) runStats(r *runResult, calls int64, capacity float64, contentionReturns float64) RunStats {
	orders := len(d.w.orders)
	st := RunStats{Orders: orders, ReceiveCounts: map[string]int{}, PoisonSent: len(d.w.poison)}
	deleted, dead := r.q.finished()
	first := map[string]sqsMessage{} // order id -> its first-sent message
	redeliveries := 0
	for _, set := range [][]sqsMessage{deleted, dead} {
		for _, m := range set {
			o, err := shop.DecodeOrder([]byte(m.body))
			if err != nil {
				continue
			}
			redeliveries += max(m.receives-1, 0)
			if f, ok := first[o.OrderID]; !ok || m.sentAt.Before(f.sentAt) {
				first[o.OrderID] = m
			}
		}
	}
	for _, m := range dead {
		if _, err := shop.DecodeOrder([]byte(m.body)); err != nil {
			st.DeadLetteredPoison++
			st.PoisonReceives = append(st.PoisonReceives, m.receives)
		} else {
			st.DeadLetteredOrders++
		}
	}
	for _, m := range first {
		st.ReceiveCounts[strconv.Itoa(m.receives)]++
	}
	decided := r.aud.decisionTimes()
	var lat []float64
	for i := range d.w.orders {
		id := d.w.orders[i].order.OrderID
		f, sent := first[id]
		at, ok := decided[id]
		if !ok || !sent {
			if !ok {
				st.Undecided++
			}
			continue
		}
		lat = append(lat, float64(at.Sub(f.sentAt).Microseconds())/1000)
	}
	st.LatencyP50Ms = round1(percentile(lat, 50))
	st.LatencyP99Ms = round1(percentile(lat, 99))
	st.LatencyMaxMs = round1(percentile(lat, 100))
	st.RedeliveriesPerOrder = round2(float64(redeliveries) / float64(orders))
	st.ContentionReturnsPerOrder = round2(contentionReturns / float64(orders))
	st.CallsPerOrder = round1(float64(calls) / float64(orders))
	st.CapacityUnitsPerOrder = round1(capacity / float64(orders))
	var perWrite float64
	st.DecisionWrites, perWrite, st.MaxOrdersPerDecisionWrite = r.aud.decisionWriteStats()
	st.OrdersPerDecisionWrite = round2(perWrite)
	if r.hold != nil {
		sku := d.w.hottest()
		st.HotSKU = r.hold.stats(sku, d.w.wanting(sku))
	}
	if r.opt != nil {
		st.Conflicts = r.opt.stats(orders)
	}
	return st
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
