package benchkit

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// A Series is one line of a Plot.
type Series struct {
	Name     string
	Baseline bool      // drawn dashed
	Xs, Ys   []float64 // the points, by increasing x
	Failed   bool      // some point could not be measured
}

// A Plot is a line chart with a logarithmic x axis and a linear y axis
// from zero, or a logarithmic one if LogY is set, written as SVG by hand.
type Plot struct {
	Title, Subtitle string
	XLabel, YLabel  string
	XTicks          []float64 // x values to mark, with their labels
	XTickLabels     []string
	LogY            bool // then every Ys must be positive
	Series          []Series
}

// Plot geometry, in SVG user units.
const (
	plotWidth   = 780
	plotHeight  = 480
	plotLeft    = 80  // left edge of the plotting area
	plotRight   = 600 // right edge; the legend goes beyond it
	plotTop     = 70
	plotBottom  = 410
	legendLeft  = plotRight + 25
	fontFamily  = "DejaVu Sans, Helvetica, Arial, sans-serif"
	gridColor   = "#e3e3e3"
	axisColor   = "#333333"
	mutedColor  = "#666666"
	markerSize  = 3.5
	lineWidth   = 2
	legendSpace = 22
)

// seriesColors are the colors of the series, in order; the baseline is
// always drawn in the first.
var seriesColors = []string{"#555555", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// WriteSVG writes p as an SVG document.
func (p *Plot) WriteSVG(w io.Writer) error {
	var b strings.Builder
	x0, x1 := p.xDomain()
	sx := func(x float64) float64 {
		return plotLeft + (math.Log10(x)-x0)/(x1-x0)*(plotRight-plotLeft)
	}
	var (
		sy     func(y float64) float64
		yTicks []float64
		yLabel func(y float64) string
	)
	if p.LogY {
		y0, y1 := p.yLogDomain()
		sy = func(y float64) float64 {
			return plotBottom - (math.Log10(y)-y0)/(y1-y0)*(plotBottom-plotTop)
		}
		yTicks = logTicks(y0, y1)
		yLabel = func(y float64) string { return strconv.FormatFloat(y, 'f', -1, 64) }
	} else {
		yTop, yStep := niceScale(p.yMax())
		sy = func(y float64) float64 {
			return plotBottom - y/yTop*(plotBottom-plotTop)
		}
		for y := 0.0; y <= yTop+yStep/2; y += yStep {
			yTicks = append(yTicks, y)
		}
		yLabel = func(y float64) string { return formatTick(y, yStep) }
	}

	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">
`, plotWidth, plotHeight, plotWidth, plotHeight, fontFamily)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>
`)
	fmt.Fprintf(&b, `<text x="%d" y="30" font-size="17" font-weight="bold" text-anchor="middle">%s</text>
`, plotWidth/2, esc(p.Title))
	fmt.Fprintf(&b, `<text x="%d" y="50" font-size="12" fill="%s" text-anchor="middle">%s</text>
`, plotWidth/2, mutedColor, esc(p.Subtitle))

	// Grid and ticks.
	for _, y := range yTicks {
		py := sy(y)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>
`, plotLeft, py, plotRight, py, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="12" text-anchor="end" dominant-baseline="middle">%s</text>
`, plotLeft-8, py, esc(yLabel(y)))
	}
	for i, x := range p.XTicks {
		px := sx(x)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>
`, px, plotTop, px, plotBottom, gridColor)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>
`, px, plotBottom, px, plotBottom+5, axisColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle">%s</text>
`, px, plotBottom+20, esc(p.XTickLabels[i]))
	}

	// Axes and their labels.
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>
<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>
`, plotLeft, plotTop, plotLeft, plotBottom, axisColor, plotLeft, plotBottom, plotRight, plotBottom, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" text-anchor="middle">%s</text>
`, (plotLeft+plotRight)/2, plotBottom+45, esc(p.XLabel))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>
`, 25, (plotTop+plotBottom)/2, 25, (plotTop+plotBottom)/2, esc(p.YLabel))

	// Lines, markers and legend.
	for i, s := range p.Series {
		color := seriesColors[i%len(seriesColors)]
		dash := ""
		if s.Baseline {
			dash = ` stroke-dasharray="7 4"`
		}
		if len(s.Xs) > 1 {
			var pts []string
			for j := range s.Xs {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(s.Xs[j]), sy(s.Ys[j])))
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%d"%s/>
`, strings.Join(pts, " "), color, lineWidth, dash)
		}
		for j := range s.Xs {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>
`, sx(s.Xs[j]), sy(s.Ys[j]), markerSize, color)
		}

		ly := plotTop + 10 + i*legendSpace
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%d"%s/>
<circle cx="%d" cy="%d" r="%.1f" fill="%s"/>
`, legendLeft, ly, legendLeft+28, ly, color, lineWidth, dash, legendLeft+14, ly, markerSize, color)
		name := s.Name
		if s.Failed {
			name += " (failed)"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" dominant-baseline="middle">%s</text>
`, legendLeft+36, ly, esc(name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// xDomain returns the range of log10(x) the x axis spans: the ticks and
// points with a margin.
func (p *Plot) xDomain() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	see := func(x float64) {
		if x > 0 {
			lo, hi = min(lo, math.Log10(x)), max(hi, math.Log10(x))
		}
	}
	for _, x := range p.XTicks {
		see(x)
	}
	for _, s := range p.Series {
		for _, x := range s.Xs {
			see(x)
		}
	}
	switch {
	case math.IsInf(lo, 1):
		return 0, 1
	case hi-lo < 0.5:
		mid := (lo + hi) / 2
		return mid - 0.5, mid + 0.5
	}
	pad := 0.06 * (hi - lo)
	return lo - pad, hi + pad
}

// yMax returns the largest y value plotted.
func (p *Plot) yMax() float64 {
	m := 0.0
	for _, s := range p.Series {
		for _, y := range s.Ys {
			m = max(m, y)
		}
	}
	return m
}

// yLogDomain returns the range of log10(y) a logarithmic y axis spans:
// whole decades around the points, at least one.
func (p *Plot) yLogDomain() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, y := range s.Ys {
			if y > 0 {
				lo, hi = min(lo, math.Log10(y)), max(hi, math.Log10(y))
			}
		}
	}
	if math.IsInf(lo, 1) {
		return 0, 1
	}
	lo, hi = math.Floor(lo), math.Ceil(hi)
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// logTicks returns the ticks of a logarithmic axis from 10^lo to 10^hi:
// 1, 2 and 5 times each power of ten when it spans up to three decades,
// the powers of ten alone when it spans more.
func logTicks(lo, hi float64) []float64 {
	steps := []float64{1, 2, 5}
	if hi-lo > 3 {
		steps = []float64{1}
	}
	var ticks []float64
	for e := lo; e <= hi; e++ {
		for _, m := range steps {
			if t := m * math.Pow(10, e); math.Log10(t) <= hi+1e-9 {
				ticks = append(ticks, t)
			}
		}
	}
	return ticks
}

// niceScale returns the top of a linear axis from zero that holds max with
// some room, and a round tick step that divides it into about five parts.
func niceScale(maxValue float64) (top, step float64) {
	if maxValue <= 0 || math.IsNaN(maxValue) || math.IsInf(maxValue, 0) {
		return 1, 0.2
	}
	raw := maxValue * 1.05 / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return math.Ceil(maxValue*1.05/step) * step, step
}

// formatTick formats an axis value with as many decimals as its step needs.
func formatTick(v, step float64) string {
	decimals := 0
	for scaled := step; decimals < 6 && math.Abs(scaled-math.Round(scaled)) > 1e-9*scaled; scaled *= 10 {
		decimals++
	}
	return fmt.Sprintf("%.*f", decimals, v)
}

// esc escapes s for SVG text and attribute values.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
