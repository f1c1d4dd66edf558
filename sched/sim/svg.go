package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
	// Err, when given, holds each point's uncertainty as the half-width
	// of an interval (a 95% confidence interval, say): the chart draws
	// Y±Err as a bar with caps. Empty: no intervals.
	Err []float64
}

// Chart is a line chart with axes, ticks, labels and a legend.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// LogY draws the y axis on a log₁₀ scale (positive values only).
	LogY bool
	// YMin and YMax fix the y range when YMax > YMin; otherwise it is fitted.
	YMin, YMax float64
	// Width and Height in pixels; zero means 720×450.
	Width, Height int
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// niceStep returns a round tick step for a span split into about n parts.
func niceStep(span float64, n int) float64 {
	if !(span > 0) {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtTick(v float64) string {
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
}

// WriteSVG draws c as a standalone SVG document.
func WriteSVG(w io.Writer, c Chart) error {
	W, H := c.Width, c.Height
	if W == 0 {
		W = 720
	}
	if H == 0 {
		H = 450
	}
	const ml, mr, mt, mb = 70.0, 170.0, 40.0, 55.0
	pw, ph := float64(W)-ml-mr, float64(H)-mt-mb
	if pw < 50 || ph < 50 {
		return fmt.Errorf("svg: %w: chart %d×%d is too small", ErrBadConfig, W, H)
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	tr := func(y float64) float64 {
		if c.LogY {
			return math.Log10(y)
		}
		return y
	}
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("svg: %w: series %q has %d x and %d y values", ErrBadConfig, s.Name, len(s.X), len(s.Y))
		}
		if len(s.Err) != 0 && len(s.Err) != len(s.Y) {
			return fmt.Errorf("svg: %w: series %q has %d y values and %d intervals", ErrBadConfig, s.Name, len(s.Y), len(s.Err))
		}
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) || (c.LogY && y <= 0) {
				continue
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, tr(y)), math.Max(ymax, tr(y))
			if lo, hi, ok := s.interval(i, c.LogY); ok {
				ymin, ymax = math.Min(ymin, tr(lo)), math.Max(ymax, tr(hi))
			}
		}
	}
	if math.IsInf(xmin, 0) {
		return fmt.Errorf("svg: %w: no finite points to plot", ErrBadConfig)
	}
	if c.YMax > c.YMin {
		ymin, ymax = tr(c.YMin), tr(c.YMax)
	} else if !c.LogY {
		ymin = math.Min(ymin, 0)
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if ymax == ymin {
		ymin, ymax = ymin-1, ymax+1
	}
	xs := niceStep(xmax-xmin, 8)
	xmin, xmax = math.Floor(xmin/xs+1e-9)*xs, math.Ceil(xmax/xs-1e-9)*xs
	var ys float64
	if c.LogY {
		ymin, ymax = math.Floor(ymin), math.Ceil(ymax)
		ys = 1
	} else {
		ys = niceStep(ymax-ymin, 6)
		ymin, ymax = math.Floor(ymin/ys+1e-9)*ys, math.Ceil(ymax/ys-1e-9)*ys
	}
	px := func(x float64) float64 { return ml + (x-xmin)/(xmax-xmin)*pw }
	py := func(y float64) float64 { return mt + ph - (tr(y)-ymin)/(ymax-ymin)*ph }
	pyRaw := func(ty float64) float64 { return mt + ph - (ty-ymin)/(ymax-ymin)*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%.1f" y="22" text-anchor="middle" font-size="15">%s</text>`+"\n", ml+pw/2, html.EscapeString(c.Title))
	// Grid and ticks.
	for x := xmin; x <= xmax+xs*1e-6; x += xs {
		X := px(x)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", X, mt, X, mt+ph)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", X, mt+ph, X, mt+ph+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", X, mt+ph+18, fmtTick(x))
	}
	for ty := ymin; ty <= ymax+ys*1e-6; ty += ys {
		Y := pyRaw(ty)
		label := fmtTick(ty)
		if c.LogY {
			label = fmtTick(math.Pow(10, ty))
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", ml, Y, ml+pw, Y)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", ml-5, Y, ml, Y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", ml-8, Y+4, label)
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="black"/>`+"\n", ml, mt, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", ml+pw/2, float64(H)-12, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", mt+ph/2, html.EscapeString(c.YLabel))
	// Lines, clipped to the plot area.
	fmt.Fprintf(&b, `<clipPath id="plot"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"/></clipPath>`+"\n", ml, mt, pw, ph)
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		var pts []string
		for k := range s.X {
			x, y := s.X[k], s.Y[k]
			if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) || (c.LogY && y <= 0) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(x), py(y)))
		}
		if len(pts) == 0 {
			continue
		}
		fmt.Fprintf(&b, `<g clip-path="url(#plot)"><polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, col, strings.Join(pts, " "))
		for k := range s.X {
			lo, hi, ok := s.interval(k, c.LogY)
			if !ok || math.IsNaN(s.X[k]) || math.IsInf(s.X[k], 0) {
				continue
			}
			X, y0, y1 := px(s.X[k]), py(lo), py(hi)
			fmt.Fprintf(&b, `<path class="interval" fill="none" stroke="%s" stroke-width="1.2" d="M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f"/>`,
				col, X, y0, y1, X-4, y0, X+4, X-4, y1, X+4)
		}
		for _, p := range pts {
			xy := strings.SplitN(p, ",", 2)
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, xy[0], xy[1], col)
		}
		b.WriteString("</g>\n")
		ly := mt + 10 + float64(i)*20
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, ml+pw+12, ly, ml+pw+36, ly, col)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", ml+pw+42, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// interval is point i's interval Y±Err, if it has one that can be drawn
// (on a log axis, its lower end is clipped to a tenth of the point).
func (s Series) interval(i int, logY bool) (lo, hi float64, ok bool) {
	if i >= len(s.Err) {
		return 0, 0, false
	}
	e, y := s.Err[i], s.Y[i]
	if !(e > 0) || math.IsInf(e, 0) || math.IsNaN(y) || math.IsInf(y, 0) || (logY && y <= 0) {
		return 0, 0, false
	}
	lo, hi = y-e, y+e
	if logY && lo <= 0 {
		lo = y / 10
	}
	return lo, hi, true
}
