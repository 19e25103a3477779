package demo

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"strings"
)

// ScalePoint is one concurrency of a sweep (make demo-scale): the per-order figures of
// each run at that concurrency.
type ScalePoint struct {
	Concurrency  int                 `json:"concurrency"`
	Runs         map[string]RunStats `json:"runs"`
	InvariantsOK bool                `json:"invariants_ok"`
	ChecksOK     bool                `json:"checks_ok"`
	Violations   []string            `json:"violations"`
}

// Scale is the result of a concurrency sweep.
type Scale struct {
	Orders int          `json:"orders"`
	Seed   uint64       `json:"seed"`
	Points []ScalePoint `json:"points"`
}

// Add records one demo run of the sweep.
func (s *Scale) Add(r *Report) {
	s.Points = append(s.Points, ScalePoint{
		Concurrency: r.Settings.Concurrency, Runs: r.Runs,
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

// scaleMetric is one column of the sweep's table and one panel of its chart.
type scaleMetric struct {
	title string
	unit  string
	value func(RunStats) float64
}

var scaleMetrics = []scaleMetric{
	{"DynamoDB calls per order", "", func(s RunStats) float64 { return s.CallsPerOrder }},
	{"Capacity units per order", "", func(s RunStats) float64 { return s.CapacityUnitsPerOrder }},
	{"Redeliveries per order", "", func(s RunStats) float64 { return s.RedeliveriesPerOrder }},
	{"Order latency p50", "s", func(s RunStats) float64 { return s.LatencyP50Ms / 1000 }},
	{"Order latency p99", "s", func(s RunStats) float64 { return s.LatencyP99Ms / 1000 }},
}

var scaleRuns = []string{"turnstile", "naive", "legacy"}

// WriteText writes the sweep's table.
func (s *Scale) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\nconcurrency sweep: %d orders, seed %d (per order; latency from first send to decision)\n\n", s.Orders, s.Seed)
	fmt.Fprintf(w, "  %-11s %-10s %8s %8s %8s %9s %9s %8s %8s\n", "concurrency", "run", "calls", "CU", "redeliv.", "p50 (s)", "p99 (s)", "DLQ ord", "DLQ bad")
	for _, p := range s.Points {
		for _, name := range scaleRuns {
			r, ok := p.Runs[name]
			if !ok {
				continue
			}
			fmt.Fprintf(w, "  %-11d %-10s %8.1f %8.1f %8.2f %9.1f %9.1f %8d %8d\n", p.Concurrency, name,
				r.CallsPerOrder, r.CapacityUnitsPerOrder, r.RedeliveriesPerOrder, r.LatencyP50Ms/1000, r.LatencyP99Ms/1000,
				r.DeadLetteredOrders, r.DeadLetteredPoison)
		}
		if !p.InvariantsOK || !p.ChecksOK {
			fmt.Fprintf(w, "  %-11d FAILED: %s\n", p.Concurrency, strings.Join(p.Violations, "; "))
		}
	}
}

// SVG draws the sweep: one panel per metric, one group of bars per concurrency, one bar
// per run.
func (s *Scale) SVG() string {
	const (
		pw, ph    = 300, 260
		left, top = 45, 36
		plotH     = 170
		gap       = 20
		titleH    = 30
		legendH   = 30
	)
	colors := map[string]string{"turnstile": "#4e79a7", "naive": "#f28e2b", "legacy": "#e15759"}
	w := len(scaleMetrics)*pw + (len(scaleMetrics)-1)*gap + 20
	h := titleH + ph + legendH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">make demo-scale: %d orders per run, by order-processor concurrency (seed %d)</text>`+"\n", s.Orders, s.Seed)
	for mi, m := range scaleMetrics {
		ox := 10 + mi*(pw+gap)
		oy := titleH
		plotW := pw - left - 10
		maxV := 0.0
		for _, p := range s.Points {
			for _, r := range p.Runs {
				maxV = math.Max(maxV, m.value(r))
			}
		}
		if maxV <= 0 {
			maxV = 1
		}
		step := niceStep(maxV / 4)
		maxV = step * math.Ceil(maxV/step)
		y := func(v float64) float64 { return float64(oy+top+plotH) - v/maxV*plotH }
		title := m.title
		if m.unit != "" {
			title += " (" + m.unit + ")"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", ox, oy+20, html.EscapeString(title))
		for v := 0.0; v <= maxV+step/2; v += step {
			yy := y(v)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", ox+left, yy, ox+left+plotW, yy)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", ox+left-4, yy+4, trim(v))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", ox+left, oy+top+plotH, ox+left+plotW, oy+top+plotH)
		if len(s.Points) == 0 {
			continue
		}
		group := float64(plotW) / float64(len(s.Points))
		barW := group * 0.8 / float64(len(scaleRuns))
		for pi, p := range s.Points {
			gx := float64(ox+left) + float64(pi)*group + group*0.1
			for ri, name := range scaleRuns {
				r, ok := p.Runs[name]
				if !ok {
					continue
				}
				v := m.value(r)
				x := gx + float64(ri)*barW
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s at %d: %s</title></rect>`+"\n",
					x, y(v), barW-1, float64(oy+top+plotH)-y(v), colors[name], name, p.Concurrency, trim(v))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", gx+group*0.4, oy+top+plotH+14, p.Concurrency)
		}
	}
	ly := titleH + ph
	for ri, name := range scaleRuns {
		lx := 20 + ri*120
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly, colors[name])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", lx+16, ly+10, name)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">x: concurrent order-processor invocations; legacy = 1 s wait then back to SQS (only where measured)</text>`+"\n", 20+3*120, ly+10)
	b.WriteString("</svg>\n")
	return b.String()
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
