package main

// The plot is written as SVG by hand rather than through a plotting library: it is two panels of
// lines over a logarithmic axis, about two hundred lines of code here, while the pure-Go plotting
// libraries that draw it pull in fonts, image encoders and their own dependency trees into a
// binary operators copy onto every node. The output is checked in the tests (well formed, every
// series drawn).

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"unicode/utf8"
)

// series is one line of a panel: the points of one operation (at one batch and caller count), or
// ucx_perftest's figures beside them.
type series struct {
	name     string
	color    string
	perftest bool
	pts      []xy // x: block size; one y per panel
}

type xy struct {
	block int64
	gbps  float64
	lat   float64 // µs, p50
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// plotSeries groups the report's points into series, each velo series followed by its perftest
// one where the points have perftest figures.
func plotSeries(r *Report) []series {
	multiCallers := false
	for _, p := range r.Points {
		multiCallers = multiCallers || p.Callers != r.Points[0].Callers
	}
	name := func(p Point) string {
		n := p.Op
		if batched(p.Op) {
			n += fmt.Sprintf(" x%d", p.Batch)
		}
		if multiCallers {
			n += fmt.Sprintf(" %dc", p.Callers)
		}
		return n
	}
	var order []string
	velo, perf := map[string]*series{}, map[string]*series{}
	for _, p := range r.Points {
		n := name(p)
		s, ok := velo[n]
		if !ok {
			c := palette[len(order)%len(palette)]
			s = &series{name: n, color: c}
			velo[n] = s
			perf[n] = &series{name: "perftest " + p.perftestName(n), color: c, perftest: true}
			order = append(order, n)
		}
		s.pts = append(s.pts, xy{p.Block, p.GBps, p.Latency.P50})
		if p.Perftest != nil && p.Perftest.GBps > 0 {
			perf[n].pts = append(perf[n].pts, xy{p.Block, p.Perftest.GBps, p.Perftest.LatencyP50})
		}
	}
	var out []series
	for _, n := range order {
		for _, s := range []*series{velo[n], perf[n]} {
			if len(s.pts) == 0 {
				continue
			}
			sort.Slice(s.pts, func(a, b int) bool { return s.pts[a].block < s.pts[b].block })
			out = append(out, *s)
		}
	}
	return out
}

// perftestName is the baseline's legend entry: the perftest test beside the series it matches.
func (p Point) perftestName(series string) string {
	if p.Perftest != nil && p.Perftest.Test != "" {
		return p.Perftest.Test + " (" + series + ")"
	}
	return "(" + series + ")"
}

// Layout of the drawing, in SVG user units.
const (
	plotW, panelH       = 900, 300
	marginL, marginR    = 80, 250
	marginTop, panelGap = 70, 80
)

func writeSVG(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	ss := plotSeries(r)
	height := max(marginTop+2*panelH+panelGap+60, marginTop+20*len(ss)+20) // the legend fits
	// The legend's longest entry sets the width: at 12 px a character is about 7 px wide.
	longest := 0
	for _, s := range ss {
		longest = max(longest, utf8.RuneCountInString(s.name))
	}
	width := max(plotW, plotW-marginR+20+30+7*longest+10)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(bw, "<title>%s</title>\n", esc("velobench "+r.Velobench+": GB/s and latency against block size"))
	e := r.Initiator
	env := fmt.Sprintf("%s; UCX %s, UCX_TLS=%s; %s; %s; kernel %s; %s", r.Mode, e.UCX, e.UCXEnv["UCX_TLS"], e.Host, e.CPU, e.Kernel, e.Go)
	fmt.Fprintf(bw, "<desc>%s</desc>\n", esc(env+"; schema "+r.Schema))
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", marginL, esc("velobench "+r.Velobench+" — "+r.Started.Format("2006-01-02 15:04 UTC")))
	fmt.Fprintf(bw, `<text x="%d" y="44" fill="#444">%s</text>`+"\n", marginL, esc(env))

	var blocks []int64
	var maxGB, minLat, maxLat float64 = 0, math.Inf(1), 0
	seen := map[int64]bool{}
	for _, s := range ss {
		for _, p := range s.pts {
			if !seen[p.block] {
				seen[p.block] = true
				blocks = append(blocks, p.block)
			}
			maxGB = math.Max(maxGB, p.gbps)
			if p.lat > 0 {
				minLat, maxLat = math.Min(minLat, p.lat), math.Max(maxLat, p.lat)
			}
		}
	}
	sort.Slice(blocks, func(a, b int) bool { return blocks[a] < blocks[b] })
	if len(blocks) == 0 {
		fmt.Fprintf(bw, `<text x="%d" y="%d">no points were measured</text>`+"\n", marginL, marginTop+40)
		fmt.Fprintln(bw, "</svg>")
		return bw.Flush()
	}
	lo, hi := math.Log2(float64(blocks[0])), math.Log2(float64(blocks[len(blocks)-1]))
	if hi-lo < 1 {
		lo, hi = lo-0.5, hi+0.5
	}
	innerW := float64(plotW - marginL - marginR)
	xOf := func(b int64) float64 { return marginL + (math.Log2(float64(b))-lo)/(hi-lo)*innerW }

	gbTop := niceCeil(maxGB)
	latLo, latHi := math.Pow(10, math.Floor(math.Log10(minLat))), math.Pow(10, math.Ceil(math.Log10(maxLat)))
	if math.IsInf(minLat, 1) {
		latLo, latHi = 1, 10
	}
	if latHi <= latLo {
		latHi = latLo * 10
	}
	y0 := float64(marginTop)
	y1 := float64(marginTop + panelH + panelGap)
	gbY := func(v float64) float64 { return y0 + panelH - v/gbTop*panelH }
	latY := func(v float64) float64 {
		return y1 + panelH - (math.Log10(v)-math.Log10(latLo))/(math.Log10(latHi)-math.Log10(latLo))*panelH
	}

	// Frames, grid lines and axis labels.
	for _, panel := range []struct {
		top   float64
		label string
	}{{y0, "GB/s (1e9 bytes per second)"}, {y1, "latency p50 (µs, log scale)"}} {
		fmt.Fprintf(bw, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#888"/>`+"\n", marginL, panel.top, innerW, panelH)
		fmt.Fprintf(bw, `<text x="%d" y="%.1f" fill="#222">%s</text>`+"\n", marginL, panel.top-8, esc(panel.label))
		for _, b := range blocks {
			x := xOf(b)
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, panel.top, x, panel.top+panelH)
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", x, panel.top+panelH+16, esc(human(b)))
		}
	}
	for i := 0; i <= 4; i++ {
		v := gbTop * float64(i) / 4
		y := gbY(v)
		fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", marginL, y, marginL+innerW, y)
		fmt.Fprintf(bw, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", marginL-6, y+4, trimFloat(v))
	}
	for v := latLo; v <= latHi*1.0001; v *= 10 {
		y := latY(v)
		fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", marginL, y, marginL+innerW, y)
		fmt.Fprintf(bw, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", marginL-6, y+4, trimFloat(v))
	}
	if rate := r.Initiator.LineRateGbps; rate > 0 && rate/8 <= gbTop {
		y := gbY(rate / 8)
		fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="2 4"/>`+"\n", marginL, y, marginL+innerW, y)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", marginL+innerW-4, y-4, esc(fmt.Sprintf("line rate %s %.0f Gb/s", r.Initiator.LineRatePort, rate)))
	}

	// The series, then the legend.
	for _, s := range ss {
		dash := ""
		if s.perftest {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(bw, `<g class="series" data-series="%s">`+"\n", esc(s.name))
		var gb, lat []string
		for _, p := range s.pts {
			gb = append(gb, fmt.Sprintf("%.1f,%.1f", xOf(p.block), gbY(p.gbps)))
			if p.lat > 0 {
				lat = append(lat, fmt.Sprintf("%.1f,%.1f", xOf(p.block), latY(p.lat)))
			}
		}
		for _, pts := range [][]string{gb, lat} {
			if len(pts) == 0 {
				continue
			}
			fmt.Fprintf(bw, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash)
			for _, pt := range pts {
				x, y, _ := strings.Cut(pt, ",")
				fmt.Fprintf(bw, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", x, y, s.color)
			}
		}
		fmt.Fprintln(bw, "</g>")
	}
	lx := float64(plotW - marginR + 20)
	fmt.Fprintf(bw, `<g class="legend">`+"\n")
	for i, s := range ss {
		y := float64(marginTop) + float64(i)*20
		dash := ""
		if s.perftest {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, y, lx+24, y, s.color, dash)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+30, y+4, esc(s.name))
	}
	fmt.Fprintln(bw, "</g>")
	if !r.Complete {
		fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#b00">%s</text>`+"\n", marginL, height-16, esc("incomplete: "+r.Ended))
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
