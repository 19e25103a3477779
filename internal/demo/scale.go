package demo

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// ScalePoint is one point of a sweep (make demo-scale): the per-order figures of each run
// at one number of hot SKUs and one concurrency.
type ScalePoint struct {
	HotSKUs      int                 `json:"hot_skus"`
	Concurrency  int                 `json:"concurrency"`
	Runs         map[string]RunStats `json:"runs"`
	InvariantsOK bool                `json:"invariants_ok"`
	ChecksOK     bool                `json:"checks_ok"`
	Violations   []string            `json:"violations"`
}

// Scale is the result of a sweep over concurrencies, for each number of hot SKUs.
type Scale struct {
	Orders int          `json:"orders"`
	Seed   uint64       `json:"seed"`
	Points []ScalePoint `json:"points"`
}

// Add records one demo run of the sweep.
func (s *Scale) Add(r *Report) {
	s.Points = append(s.Points, ScalePoint{
		HotSKUs: r.Settings.HotSKUs, Concurrency: r.Settings.Concurrency, Runs: r.Runs,
		InvariantsOK: r.InvariantsOK, ChecksOK: r.ChecksOK, Violations: r.Violations,
	})
}

// WriteJSON writes the sweep to path.
func (s *Scale) WriteJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// scaleMetric is one panel of the sweep's chart; value reports false where a run has no
// such figure (no lock: no critical section).
type scaleMetric struct {
	title string
	unit  string
	value func(RunStats) (float64, bool)
}

func always(f func(RunStats) float64) func(RunStats) (float64, bool) {
	return func(s RunStats) (float64, bool) { return f(s), true }
}

var scaleMetrics = []scaleMetric{
	{"DynamoDB calls per order", "", always(func(s RunStats) float64 { return s.CallsPerOrder })},
	{"Capacity units per order", "", always(func(s RunStats) float64 { return s.CapacityUnitsPerOrder })},
	{"Order latency p50", "s", always(func(s RunStats) float64 { return s.LatencyP50Ms / 1000 })},
	{"Order latency p99", "s", always(func(s RunStats) float64 { return s.LatencyP99Ms / 1000 })},
	{"Orders per decision write", "", always(func(s RunStats) float64 { return s.OrdersPerDecisionWrite })},
	{"Hot SKU held per acquisition, p50", "ms", func(s RunStats) (float64, bool) {
		if s.HotSKU == nil {
			return 0, false
		}
		return s.HotSKU.P50Ms, true
	}},
	{"Conflict retries per order", "", func(s RunStats) (float64, bool) {
		if s.Conflicts == nil {
			return 0, false
		}
		return s.Conflicts.RetriesPerOrder, true
	}},
}

var scaleRuns = []string{"turnstile", "naive", "optimistic", "legacy"}

// hotSettings returns the numbers of hot SKUs of the sweep, in the order first measured.
func (s *Scale) hotSettings() []int {
	var out []int
	for _, p := range s.Points {
		if !slices.Contains(out, p.HotSKUs) {
			out = append(out, p.HotSKUs)
		}
	}
	return out
}

// WriteText writes the sweep's table.
func (s *Scale) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\nsweep: %d orders, seed %d, per order (latency from first send to decision)\n\n", s.Orders, s.Seed)
	const format = "  %-4s %-5s %-10s %6s %6s %8s %7s %7s %7s %9s %13s %9s %7s %7s\n"
	fmt.Fprintf(w, format, "hot", "conc.", "run", "calls", "CU", "redeliv.", "p50 (s)", "p99 (s)", "max (s)",
		"ord/write", "held p50/p99", "conflicts", "DLQ ord", "DLQ bad")
	for _, p := range s.Points {
		for _, name := range scaleRuns {
			r, ok := p.Runs[name]
			if !ok {
				continue
			}
			held, conflicts := "-", "-"
			if r.HotSKU != nil {
				held = fmt.Sprintf("%.0f / %.0f", r.HotSKU.P50Ms, r.HotSKU.P99Ms)
			}
			if r.Conflicts != nil {
				conflicts = fmt.Sprintf("%.2f", r.Conflicts.RetriesPerOrder)
			}
			fmt.Fprintf(w, format, fmt.Sprint(p.HotSKUs), fmt.Sprint(p.Concurrency), name,
				fmt.Sprintf("%.1f", r.CallsPerOrder), fmt.Sprintf("%.1f", r.CapacityUnitsPerOrder),
				fmt.Sprintf("%.2f", r.RedeliveriesPerOrder), fmt.Sprintf("%.1f", r.LatencyP50Ms/1000),
				fmt.Sprintf("%.1f", r.LatencyP99Ms/1000), fmt.Sprintf("%.1f", r.LatencyMaxMs/1000),
				fmt.Sprintf("%.2f", r.OrdersPerDecisionWrite), held, conflicts,
				fmt.Sprint(r.DeadLetteredOrders), fmt.Sprint(r.DeadLetteredPoison))
		}
		if !p.InvariantsOK || !p.ChecksOK {
			fmt.Fprintf(w, "  %-4d %-5d FAILED: %s\n", p.HotSKUs, p.Concurrency, strings.Join(p.Violations, "; "))
		}
	}
	fmt.Fprintln(w, "\n  hot: hot SKUs (1: every hot order wants the same SKU); ord/write: orders decided per decision write;")
	fmt.Fprintln(w, "  held: ms from acquisition to release of the hottest SKU's lock (runs with locks); conflicts: retries per order")
}

// SVG draws the sweep: one row of panels per number of hot SKUs, one panel per metric,
// one group of bars per concurrency, one bar per run. A panel's scale is shared by the
// rows, so they compare.
func (s *Scale) SVG() string {
	const (
		pw, ph    = 260, 250
		left, top = 45, 36
		plotH     = 160
		gap       = 16
		titleH    = 30
		legendH   = 30
	)
	colors := map[string]string{"turnstile": "#4e79a7", "naive": "#f28e2b", "optimistic": "#59a14f", "legacy": "#e15759"}
	hots := s.hotSettings()
	w := len(scaleMetrics)*pw + (len(scaleMetrics)-1)*gap + 20
	h := titleH + max(len(hots), 1)*ph + legendH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">make demo-scale: %d orders per run, by order-processor concurrency, per number of hot SKUs (seed %d)</text>`+"\n", s.Orders, s.Seed)
	for mi, m := range scaleMetrics {
		maxV := 0.0
		for _, p := range s.Points {
			for _, r := range p.Runs {
				if v, ok := m.value(r); ok {
					maxV = math.Max(maxV, v)
				}
			}
		}
		if maxV <= 0 {
			maxV = 1
		}
		step := niceStep(maxV / 4)
		maxV = step * math.Ceil(maxV/step)
		for hi, hot := range hots {
			var points []ScalePoint
			for _, p := range s.Points {
				if p.HotSKUs == hot {
					points = append(points, p)
				}
			}
			ox := 10 + mi*(pw+gap)
			oy := titleH + hi*ph
			plotW := pw - left - 10
			y := func(v float64) float64 { return float64(oy+top+plotH) - v/maxV*plotH }
			title := m.title
			if m.unit != "" {
				title += " (" + m.unit + ")"
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" font-weight="bold">%s</text>`+"\n", ox, oy+14, html.EscapeString(title))
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%d hot SKU%s</text>`+"\n", ox, oy+27, hot, plural(hot))
			for v := 0.0; v <= maxV+step/2; v += step {
				yy := y(v)
				fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", ox+left, yy, ox+left+plotW, yy)
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", ox+left-4, yy+4, trim(v))
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", ox+left, oy+top+plotH, ox+left+plotW, oy+top+plotH)
			if len(points) == 0 {
				continue
			}
			group := float64(plotW) / float64(len(points))
			barW := group * 0.8 / float64(len(scaleRuns))
			for pi, p := range points {
				gx := float64(ox+left) + float64(pi)*group + group*0.1
				for ri, name := range scaleRuns {
					r, ok := p.Runs[name]
					if !ok {
						continue
					}
					v, ok := m.value(r)
					if !ok {
						continue
					}
					x := gx + float64(ri)*barW
					fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %d hot, concurrency %d: %s</title></rect>`+"\n",
						x, y(v), barW-1, float64(oy+top+plotH)-y(v), colors[name], name, hot, p.Concurrency, trim(v))
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", gx+group*0.4, oy+top+plotH+14, p.Concurrency)
			}
		}
	}
	ly := titleH + max(len(hots), 1)*ph
	for ri, name := range scaleRuns {
		lx := 20 + ri*110
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly, colors[name])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", lx+16, ly+10, name)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">x: concurrent order-processor invocations; optimistic = version-conditioned writes retried on conflict; legacy = 1 s wait then back to SQS (only where measured)</text>`+"\n", 20+len(scaleRuns)*110, ly+10)
	b.WriteString("</svg>\n")
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
