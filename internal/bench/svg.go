package bench

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// ChartFile is the chart's file name beside RESULTS.md.
const ChartFile = "chart.svg"

// panel is one bar chart of the SVG: a value per strategy and worker count.
type panel struct {
	title  string
	target float64 // drawn as a dashed line; 0: none
	tlabel string
	fixed  float64 // the axis maximum, if fixed
	value  func(*Record) *float64
}

// Chart draws the hot-key results at the target RTT: efficiency, the lock's capacity
// units per critical section and Jain's index, one group of bars per strategy, one bar
// per worker count. The dashed lines are the fan-out targets Evaluate checks (the same
// constants). Each axis is scaled to lockcore's strategies and the target: a published
// design (baseline) far above them would flatten every other bar, so its bar is cut at
// the top of the axis, marked with a break and labelled with its value.
func (r *Results) Chart() string {
	rtt := r.Params.TargetRTTms
	var recs []Record
	for _, x := range r.Records {
		if x.Scenario == ScenarioHotKey && x.RTTms == rtt {
			recs = append(recs, x)
		}
	}
	var strategies []string
	var workers []int
	for _, x := range recs {
		if !slices.Contains(strategies, x.Strategy) {
			strategies = append(strategies, x.Strategy)
		}
		if !slices.Contains(workers, x.Workers) {
			workers = append(workers, x.Workers)
		}
	}
	slices.Sort(workers)
	fanOut := fmt.Sprintf("N = %s", joinInts(FanOutWorkers, ", "))
	panels := []panel{
		{title: "Efficiency (achieved ÷ ideal CS/s)", target: TargetEfficiency,
			tlabel: fmt.Sprintf("target ≥ %g at %s", TargetEfficiency, fanOut),
			value:  func(x *Record) *float64 { return x.Efficiency }},
		{title: "Lock capacity units per CS (WCU + RCU/5)", target: TargetCheapLockCU,
			tlabel: fmt.Sprintf("target ≤ %g: %s", float64(TargetCheapLockCU), strings.Join(CheapStrategies, ", ")),
			value:  func(x *Record) *float64 { return x.LockCUPerCS }},
		{title: "Jain's fairness index", target: TargetJain,
			tlabel: fmt.Sprintf("target ≥ %g at %s", TargetJain, fanOut), fixed: 1,
			value: func(x *Record) *float64 { return x.Jain }},
	}
	const (
		pw, ph     = 420, 300 // panel size
		left, top  = 50, 40
		plotH      = 180
		gap        = 30
		legendH    = 40
		footH      = 20
		titleH     = 30
		barPadding = 0.2
	)
	colors := []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2"}
	w := len(panels)*pw + (len(panels)-1)*gap + 20
	h := titleH + ph + legendH + footH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">Hot key at +%g ms RTT: lockcore strategies and baselines (†)</text>`+"\n", rtt)
	clipped := false
	for pi, p := range panels {
		ox := 10 + pi*(pw+gap)
		oy := titleH
		plotW := pw - left - 10
		maxV, step := axisMax(recs, p)
		y := func(v float64) float64 { return float64(oy+top+plotH) - math.Min(v, maxV)/maxV*plotH }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", ox, oy+20, html.EscapeString(p.title))
		// Axis and grid.
		for v := 0.0; v <= maxV+step/2; v += step {
			yy := y(v)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", ox+left, yy, ox+left+plotW, yy)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", ox+left-4, yy+4, trimFloat(v))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", ox+left, oy+top, ox+left, oy+top+plotH)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", ox+left, oy+top+plotH, ox+left+plotW, oy+top+plotH)
		if len(strategies) == 0 {
			continue
		}
		group := float64(plotW) / float64(len(strategies))
		barW := group * (1 - barPadding) / float64(max(1, len(workers)))
		for si, s := range strategies {
			gx := float64(ox+left) + float64(si)*group + group*barPadding/2
			for wi, n := range workers {
				var rec *Record
				for i := range recs {
					if recs[i].Strategy == s && recs[i].Workers == n {
						rec = &recs[i]
					}
				}
				if rec == nil {
					continue
				}
				v := p.value(rec)
				if v == nil || math.IsNaN(*v) {
					continue
				}
				x := gx + float64(wi)*barW
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s N=%d: %s</title></rect>`+"\n",
					x, y(*v), barW-1, float64(oy+top+plotH)-y(*v), colors[wi%len(colors)], html.EscapeString(s), n, trimFloat(*v))
				if *v > maxV {
					// Cut: a white break across the bar near the top, the value written
					// upwards inside the bar.
					clipped = true
					by := float64(oy+top) + 14
					fmt.Fprintf(&b, `<path d="M%.1f %.1f L%.1f %.1f M%.1f %.1f L%.1f %.1f" stroke="white" stroke-width="2"/>`+"\n",
						x-1, by+3, x+barW, by-3, x-1, by+7, x+barW, by+1)
					cx, cy := x+(barW-1)/2+3.5, float64(oy+top)+24
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="white" text-anchor="end" transform="rotate(-90 %.1f %.1f)">%s ▲</text>`+"\n",
						cx, cy, cx, cy, trimFloat(math.Round(*v*10)/10))
				}
			}
			label := s
			if recBaseline(recs, s) {
				label += " †"
			}
			cx := float64(ox+left) + (float64(si)+0.5)*group
			cy := oy + top + plotH + 8
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end" transform="rotate(-35 %.1f %d)">%s</text>`+"\n",
				cx, cy+4, cx, cy+4, html.EscapeString(label))
		}
		if p.target > 0 {
			ty := y(p.target)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c00" stroke-dasharray="5,3"/>`+"\n", ox+left, ty, ox+left+plotW, ty)
			// A white halo keeps the label readable over the bars.
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#c00" stroke="white" stroke-width="3" paint-order="stroke">%s</text>`+"\n",
				ox+left+plotW, ty-3, html.EscapeString(p.tlabel))
		}
	}
	ly := titleH + ph + 10
	for wi, n := range workers {
		lx := 20 + wi*110
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly, colors[wi%len(colors)])
		fmt.Fprintf(&b, `<text x="%d" y="%d">N = %d workers</text>`+"\n", lx+16, ly+10, n)
	}
	note := "† baseline: a published design or AWS's lock client"
	if clipped {
		note += "; a bar cut at the top of its axis shows its value"
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s. Generated %s, %s.</text>`+"\n",
		20+len(workers)*110+20, ly+10, html.EscapeString(note), r.Generated.Format("2006-01-02 15:04 MST"), html.EscapeString(r.Params.Duration+" per run"))
	b.WriteString("</svg>\n")
	return b.String()
}

// axisMax returns the top of a panel's axis and its grid step: p.fixed if set, else the
// largest of p's target and lockcore's values, rounded up; published designs count only
// when lockcore has no value at all (their bars above it are cut).
func axisMax(recs []Record, p panel) (top, step float64) {
	if p.fixed > 0 {
		return p.fixed, p.fixed / 4
	}
	m, baseline := p.target, p.target
	for i := range recs {
		v := p.value(&recs[i])
		if v == nil || math.IsNaN(*v) {
			continue
		}
		if recs[i].Baseline {
			baseline = math.Max(baseline, *v)
		} else {
			m = math.Max(m, *v)
		}
	}
	if m <= 0 {
		m = baseline
	}
	if m <= 0 {
		return 1, 0.25
	}
	step = niceCeil(m / 4)
	return step * math.Ceil(m/step), step
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

func recBaseline(recs []Record, s string) bool {
	for _, x := range recs {
		if x.Strategy == s {
			return x.Baseline
		}
	}
	return false
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
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

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
