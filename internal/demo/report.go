package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Report is the demo's result; it is written to demo-report.json. The first block holds
// the fields the issue asks for, under those names; the rest gives their context.
type Report struct {
	InvariantsOK            bool    `json:"invariants_ok"`
	OrdersSubmitted         int     `json:"orders_submitted"`
	OrdersCompleted         int     `json:"orders_completed"`
	OrdersRejected          int     `json:"orders_rejected"`
	DoubleProcessed         int     `json:"double_processed"`
	LostUpdates             int     `json:"lost_updates"`
	OversoldUnits           int     `json:"oversold_units"`
	AbandonedLocksInjected  int     `json:"abandoned_locks_injected"`
	AbandonedLocksDetected  int     `json:"abandoned_locks_detected"`
	BaselineLostUpdates     int     `json:"baseline_lost_updates"`
	BaselineOversoldUnits   int     `json:"baseline_oversold_units"`
	BaselineDoubleProcessed int     `json:"baseline_double_processed"`
	LockWaitP50Ms           float64 `json:"lock_wait_p50_ms"`
	LockWaitP99Ms           float64 `json:"lock_wait_p99_ms"`
	DynamoDBCallsPerOrder   float64 `json:"dynamodb_calls_per_order"`
	DurationS               float64 `json:"duration_s"`

	// Context.
	ChecksOK                bool     `json:"checks_ok"`
	Violations              []string `json:"violations"`
	OrdersReserved          int      `json:"orders_reserved"`
	CapacityUnitsPerOrder   float64  `json:"capacity_units_per_order"`
	LockContention          int      `json:"lock_contention"`
	Takeovers               int      `json:"takeovers"`
	HolderCrashes           int      `json:"holder_crashes"`
	OrderItemLocksAbandoned int      `json:"order_item_locks_abandoned"`
	AbandonedLeasesFound    int      `json:"abandoned_leases_found_total"`
	// ExpiredLeasesOfLiveHolders are leases the janitor found that no crash abandoned:
	// a live holder stalled past its lease (an overloaded machine), TTL removed the row,
	// and the holder's late writes were refused (LeaseLost).
	ExpiredLeasesOfLiveHolders int `json:"expired_leases_of_live_holders"`
	LeaseLost                  int `json:"lease_lost_writes_refused"`
	Redrives                   int `json:"redrive_messages"`
	// DecisionsConfirmedByReread are decisions whose write landed although the call
	// failed (a lost response, then a refused retry); the service found them by re-reading.
	DecisionsConfirmedByReread int              `json:"decisions_confirmed_by_reread"`
	OrdersRedriven             int              `json:"orders_redriven"`
	TTLDeletions               TTLStats         `json:"ttl_deletions"`
	SQS                        SQSStats         `json:"sqs"`
	Adjustments                AdjStats         `json:"adjustments"`
	CallsByFunction            map[string]int64 `json:"dynamodb_calls_by_function"`
	// OrderAttempts splits the order processor's calls by the outcome of each attempt at
	// an order: decided, duplicate (already final), contended (returned to the queue),
	// crashed, lease_lost, other.
	OrderAttempts map[string]AttemptStat `json:"order_attempts"`
	Baseline      Baseline               `json:"baseline"`
	// Optimistic is the optimistic run's outcome (Settings.Optimistic).
	Optimistic *OptimisticOutcome `json:"optimistic,omitempty"`
	SKUs       []skuOutcome       `json:"skus"`
	Settings   Settings           `json:"settings"`
	// Runs holds the per-order figures of each run: turnstile, naive, optimistic (unless
	// -optimistic=false) and (with -legacy) legacy.
	Runs   map[string]RunStats `json:"runs"`
	Phases map[string]float64  `json:"phase_seconds"`
}

// AttemptStat counts attempts at orders with one outcome and their DynamoDB requests.
type AttemptStat struct {
	Attempts      int     `json:"attempts"`
	Calls         int64   `json:"dynamodb_calls"`
	CallsPerOrder float64 `json:"dynamodb_calls_per_order"`
}

// TTLStats says who removed the abandoned leases.
type TTLStats struct {
	ByEngine int `json:"by_engine"` // DynamoDB Local's own TTL job
	// IdentitySynthesized counts engine TTL records that lacked the service identity and
	// got it from the stream poller (see streamMapping).
	IdentitySynthesized int `json:"identity_synthesized"`
	Emulated            int `json:"emulated"` // fallback deletions by the demo (engine without TTL)
	StreamRecords       int `json:"stream_records"`
	FilteredOut         int `json:"stream_records_filtered_out"`
	Unrecognised        int `json:"stream_records_unrecognised"`
	JanitorInvocations  int `json:"janitor_invocations"`
	JanitorDeadLettered int `json:"janitor_records_dead_lettered"`
}

// SQSStats describes the simulated orders queue.
type SQSStats struct {
	Messages           int `json:"messages_sent"`
	DuplicateSends     int `json:"duplicate_sends"`
	DuplicateDelivery  int `json:"duplicate_deliveries_planned"`
	Invocations        int `json:"invocations"`
	MessagesDelivered  int `json:"messages_delivered"`
	BatchItemFailures  int `json:"batch_item_failures"`
	CrashedInvocations int `json:"crashed_invocations"`
	DeadLettered       int `json:"dead_lettered"`
}

// AdjStats describes the StockAdjusted events.
type AdjStats struct {
	Events           int            `json:"events"`
	Duplicates       int            `json:"duplicate_deliveries"`
	Applied          int            `json:"applied"`
	Rejected         int            `json:"rejected"` // recorded rejections, not retried
	DeadLettered     int            `json:"dead_lettered"`
	DeadLetterCauses map[string]int `json:"dead_letter_causes"`
	Invocations      int            `json:"invocations"`
}

// Baseline is the naive run's measured damage.
type Baseline struct {
	OrdersCompleted int          `json:"orders_completed"`
	OrdersRejected  int          `json:"orders_rejected"`
	OrdersReserved  int          `json:"orders_reserved"`
	DoubleProcessed int          `json:"double_processed"`
	LostUpdates     int          `json:"lost_updates"`
	OversoldUnits   int          `json:"oversold_units"`
	ResidualUnits   int          `json:"stock_residual_units"`
	Violations      []string     `json:"violations"`
	CallsPerOrder   float64      `json:"dynamodb_calls_per_order"`
	DeadLettered    int          `json:"dead_lettered"`
	SKUs            []skuOutcome `json:"skus"`
}

// OptimisticOutcome is the optimistic run's measured outcome; its Violations fail the
// demo like the turnstile run's.
type OptimisticOutcome struct {
	OrdersCompleted     int          `json:"orders_completed"`
	OrdersRejected      int          `json:"orders_rejected"`
	OrdersReserved      int          `json:"orders_reserved"`
	DoubleProcessed     int          `json:"double_processed"`
	LostUpdates         int          `json:"lost_updates"`
	OversoldUnits       int          `json:"oversold_units"`
	ResidualUnits       int          `json:"stock_residual_units"`
	AdjustmentsApplied  int          `json:"adjustments_applied"`
	AdjustmentsRejected int          `json:"adjustments_rejected"`
	DeadLettered        int          `json:"dead_lettered"`
	Violations          []string     `json:"violations"`
	SKUs                []skuOutcome `json:"skus"`
}

// Settings records the scaled-down timings the demo ran with.
type Settings struct {
	Orders             int     `json:"orders"`
	Concurrency        int     `json:"concurrency"`
	Seed               uint64  `json:"seed"`
	Crashes            int     `json:"crashes"`
	HotSKUs            int     `json:"hot_skus"`
	Catalogue          int     `json:"catalogue_skus"`
	VisibilityTimeoutS float64 `json:"sqs_visibility_timeout_s"`
	MaxReceiveCount    int     `json:"sqs_max_receive_count"`
	LeaseS             float64 `json:"lease_s"`
	InvocationTimeoutS float64 `json:"invocation_timeout_s"`
	TTLGraceS          float64 `json:"ttl_grace_s"`
	Legacy             bool    `json:"legacy_run"`
	Optimistic         bool    `json:"optimistic_run"`
	Poison             int     `json:"malformed_messages"`
	TTLFallbackS       float64 `json:"ttl_fallback_after_s"`
	Engine             string  `json:"engine"`
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteText writes the human report.
func (r *Report) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAILED"
	}
	perOrder := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	p("")
	p("turnstile — %d orders, %d concurrent order-processor invocations, %d hot SKU%s, seed %d",
		r.OrdersSubmitted, r.Settings.Concurrency, r.Settings.HotSKUs, plural(r.Settings.HotSKUs), r.Settings.Seed)
	p("")
	// The outcome of each run: turnstile, naive and (when it ran) optimistic.
	type col struct {
		name                                                   string
		decided, reserved, rejected, double, lost, over, resid int
		calls                                                  float64
	}
	cols := []col{
		{"turnstile", r.OrdersCompleted, r.OrdersReserved, r.OrdersRejected, r.DoubleProcessed, r.LostUpdates,
			r.OversoldUnits, sumResidual(r.SKUs), r.DynamoDBCallsPerOrder},
		{"naive", r.Baseline.OrdersCompleted, r.Baseline.OrdersReserved, r.Baseline.OrdersRejected, r.BaselineDoubleProcessed,
			r.BaselineLostUpdates, r.BaselineOversoldUnits, r.Baseline.ResidualUnits, r.Baseline.CallsPerOrder},
	}
	if o := r.Optimistic; o != nil {
		cols = append(cols, col{"optimistic", o.OrdersCompleted, o.OrdersReserved, o.OrdersRejected, o.DoubleProcessed,
			o.LostUpdates, o.OversoldUnits, o.ResidualUnits, r.Runs["optimistic"].CallsPerOrder})
	}
	outcome := func(label string, f func(col) string) {
		line := fmt.Sprintf("  %-31s", label)
		for _, c := range cols {
			line += fmt.Sprintf("  %11s", f(c))
		}
		p("%s", line)
	}
	outcome("", func(c col) string { return c.name })
	outcome(fmt.Sprintf("orders decided (of %d)", r.OrdersSubmitted), func(c col) string { return fmt.Sprint(c.decided) })
	outcome("  reserved / rejected", func(c col) string { return fmt.Sprintf("%d / %d", c.reserved, c.rejected) })
	outcome("double processed orders", func(c col) string { return fmt.Sprint(c.double) })
	outcome("lost stock updates", func(c col) string { return fmt.Sprint(c.lost) })
	outcome("oversold units", func(c col) string { return fmt.Sprint(c.over) })
	outcome("stock off by (units)", func(c col) string { return fmt.Sprint(c.resid) })
	outcome("DynamoDB calls per order", func(c col) string { return perOrder(c.calls) })
	if r.Optimistic != nil {
		p("  (naive: read-then-write, no locks; optimistic: version-conditioned writes retried on conflict, no locks)")
	} else {
		p("  (naive: read-then-write, no locks)")
	}
	r.writeRuns(p)
	p("")
	p("turnstile run")
	p("  stock conservation   %s: for every SKU, initial + adjustments = available + reserved, reserved = RESERVED orders", mark(r.InvariantsOK))
	p("  lock wait            p50 %.1f ms, p99 %.1f ms; %d contended operations retried via batchItemFailures / async retry",
		r.LockWaitP50Ms, r.LockWaitP99Ms, r.LockContention)
	if r.OrderItemLocksAbandoned > 0 {
		p("  holder crashes       %d injected (%d SKU leases and %d order locks abandoned)",
			r.HolderCrashes, r.AbandonedLocksInjected, r.OrderItemLocksAbandoned)
	} else {
		p("  holder crashes       %d injected (%d stock locks abandoned)", r.HolderCrashes, r.AbandonedLocksInjected)
	}
	p("  abandoned leases     %d of %d found by the janitor (stock sweep, lock table's stream); %d orders re-driven",
		r.AbandonedLocksDetected, r.AbandonedLocksInjected, r.OrdersRedriven)
	ttl := fmt.Sprintf("%d removed by DynamoDB Local's own TTL", r.TTLDeletions.ByEngine)
	if n := r.TTLDeletions.IdentitySynthesized; n > 0 {
		ttl += fmt.Sprintf(" (userIdentity added by the poller to %d)", n)
	}
	if r.TTLDeletions.Emulated > 0 {
		ttl += fmt.Sprintf(", %d by the demo's TTL fallback", r.TTLDeletions.Emulated)
	}
	p("                       %s", ttl)
	if r.ExpiredLeasesOfLiveHolders > 0 {
		p("                       + %d leases of live holders that stalled past their lease (machine load): TTL removed",
			r.ExpiredLeasesOfLiveHolders)
		p("                         them, the janitor reported them, %d late writes were refused (LeaseLost)", r.LeaseLost)
	}
	p("  takeovers            %d (a waiter taking an abandoned lease over before the janitor cleared it)", r.Takeovers)
	p("  DynamoDB             %.1f calls and %.1f capacity units per order (%s)",
		r.DynamoDBCallsPerOrder, r.CapacityUnitsPerOrder, callsBreakdown(r.CallsByFunction))
	if a, ok := r.OrderAttempts["decided"]; ok {
		line := fmt.Sprintf("                       per order: %.1f calls on the attempt that decided it", a.CallsPerOrder)
		if c, ok := r.OrderAttempts["contended"]; ok {
			line += fmt.Sprintf(", %.1f on %d contended attempts (retried)", c.CallsPerOrder, c.Attempts)
		}
		if c, ok := r.OrderAttempts["duplicate"]; ok {
			line += fmt.Sprintf(", %.1f on %d duplicates", c.CallsPerOrder, c.Attempts)
		}
		p("%s", line)
	}
	p("  SQS                  %d messages (%d duplicate sends), %d invocations, %d batch item failures, %d crashed, %d dead-lettered",
		r.SQS.Messages, r.SQS.DuplicateSends, r.SQS.Invocations, r.SQS.BatchItemFailures, r.SQS.CrashedInvocations, r.SQS.DeadLettered)
	if r.DecisionsConfirmedByReread > 0 {
		p("  lost responses       %d decisions landed although their call failed (response lost, retry refused);",
			r.DecisionsConfirmedByReread)
		p("                       the service re-read the order, found its own decision and did not apply it twice")
	}
	p("  StockAdjusted        %d events (%d delivered twice), %d applied, %d rejected (recorded, not retried), %d to the DLQ%s",
		r.Adjustments.Events, r.Adjustments.Duplicates, r.Adjustments.Applied, r.Adjustments.Rejected, r.Adjustments.DeadLettered,
		causes(r.Adjustments.DeadLetterCauses))
	if o := r.Optimistic; o != nil {
		c := r.Runs["optimistic"].Conflicts
		p("")
		p("optimistic run")
		if len(o.Violations) == 0 {
			p("  invariants           ok: every order decided once, nothing oversold, stock conserved, no lost update")
		} else {
			p("  invariants           FAILED: %s", strings.Join(o.Violations, "; "))
		}
		if c != nil {
			p("  conflicts            %d attempts (read, then conditional write): %d decided, %d duplicates, %d retried after a conflict, %d failed",
				c.Attempts, c.Decided, c.Duplicates, c.Retries, c.Failed)
			p("                       (%.2f per order); %d deliveries ran out of attempts and went back to SQS, %d orders dead-lettered",
				c.RetriesPerOrder, c.Exhausted, r.Runs["optimistic"].DeadLetteredOrders)
		}
		p("  StockAdjusted        %d applied, %d rejected (recorded)", o.AdjustmentsApplied, o.AdjustmentsRejected)
	}
	if len(r.Baseline.Violations) > 0 {
		p("")
		p("naive run: what went wrong (measured, not asserted)")
		for _, v := range r.Baseline.Violations[:min(6, len(r.Baseline.Violations))] {
			p("  - %s", v)
		}
		if n := len(r.Baseline.Violations) - 6; n > 0 {
			p("  - ... and %d more (demo-report.json)", n)
		}
	}
	p("")
	if r.InvariantsOK && r.ChecksOK {
		p("invariants: ok — every order RESERVED or REJECTED exactly once, stock conserved, nothing negative (%.0fs)", r.DurationS)
	} else {
		if r.InvariantsOK {
			p("invariants: ok, but the demo's checks FAILED:")
		} else {
			p("INVARIANTS VIOLATED:")
		}
		for _, v := range r.Violations {
			p("  - %s", v)
		}
	}
}

func sumResidual(skus []skuOutcome) int {
	t := 0
	for _, s := range skus {
		t += s.ResidualUnits
	}
	return t
}

func callsBreakdown(m map[string]int64) string {
	var parts []string
	for _, k := range []string{"orderprocessor", "inventoryupdater", "janitor"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
	}
	return strings.Join(parts, ", ")
}

func causes(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], strings.ReplaceAll(k, "_", " "))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// writeRuns writes the per-order figures of each run side by side.
func (r *Report) writeRuns(p func(string, ...any)) {
	var names []string
	for _, n := range []string{"turnstile", "naive", "optimistic", "legacy"} {
		if _, ok := r.Runs[n]; ok {
			names = append(names, n)
		}
	}
	if len(r.Runs) == 0 {
		return
	}
	row := func(label string, f func(RunStats) string) {
		line := fmt.Sprintf("  %-31s", label)
		for _, n := range names {
			line += fmt.Sprintf("  %11s", f(r.Runs[n]))
		}
		p("%s", line)
	}
	p("")
	head := fmt.Sprintf("  %-31s", "per order (maxReceiveCount "+fmt.Sprint(r.Settings.MaxReceiveCount)+")")
	for _, n := range names {
		head += fmt.Sprintf("  %11s", n)
	}
	p("%s", head)
	row("receives: 1 / 2 / 3+", func(s RunStats) string {
		more := 0
		for k, v := range s.ReceiveCounts {
			if k != "1" && k != "2" {
				more += v
			}
		}
		return fmt.Sprintf("%d/%d/%d", s.ReceiveCounts["1"], s.ReceiveCounts["2"], more)
	})
	row("redeliveries per order", func(s RunStats) string { return fmt.Sprintf("%.2f", s.RedeliveriesPerOrder) })
	row("contention returns per order", func(s RunStats) string { return fmt.Sprintf("%.2f", s.ContentionReturnsPerOrder) })
	row("dead-lettered: orders / poison", func(s RunStats) string {
		return fmt.Sprintf("%d / %d", s.DeadLetteredOrders, s.DeadLetteredPoison)
	})
	row("DynamoDB calls per order", func(s RunStats) string { return fmt.Sprintf("%.1f", s.CallsPerOrder) })
	row("capacity units per order", func(s RunStats) string { return fmt.Sprintf("%.1f", s.CapacityUnitsPerOrder) })
	row("latency p50 / p99 (s)", func(s RunStats) string {
		return fmt.Sprintf("%.1f / %.1f", s.LatencyP50Ms/1000, s.LatencyP99Ms/1000)
	})
	row("latency max (s)", func(s RunStats) string { return fmt.Sprintf("%.1f", s.LatencyMaxMs/1000) })
	row("orders per decision write", func(s RunStats) string { return fmt.Sprintf("%.2f", s.OrdersPerDecisionWrite) })
	hot := ""
	for _, n := range names {
		if h := r.Runs[n].HotSKU; h != nil {
			hot = h.SKU
		}
	}
	if hot != "" {
		row("hot SKU acquisitions", func(s RunStats) string {
			if s.HotSKU == nil {
				return "-"
			}
			return fmt.Sprint(s.HotSKU.Acquisitions)
		})
		row("  held p50 / p99 (ms)", func(s RunStats) string {
			if s.HotSKU == nil {
				return "-"
			}
			return fmt.Sprintf("%.0f / %.0f", s.HotSKU.P50Ms, s.HotSKU.P99Ms)
		})
	}
	if _, ok := r.Runs["optimistic"]; ok {
		row("conflict retries per order", func(s RunStats) string {
			if s.Conflicts == nil {
				return "-"
			}
			return fmt.Sprintf("%.2f", s.Conflicts.RetriesPerOrder)
		})
	}
	row("orders undecided", func(s RunStats) string { return fmt.Sprint(s.Undecided) })
	if hot != "" {
		p("  (hot SKU: %s, the SKU the most orders want; held: from the lock's acquisition to its release)", hot)
	}
}
