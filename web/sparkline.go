package web

import (
	"fmt"
	"html/template"
	"strings"
)

// Sparkline geometry, in SVG user units.
const (
	sparkW   = 240.0
	sparkH   = 48.0
	sparkPad = 3.0
)

// sparkline draws processed (area and line) and failed (line) per minute as
// inline SVG. It is built from numbers only, so it is safe as HTML.
func sparkline(processed, failed []int) template.HTML {
	top := 1
	var sumOK, sumErr int
	for _, v := range processed {
		top = max(top, v)
		sumOK += v
	}
	for _, v := range failed {
		top = max(top, v)
		sumErr += v
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" viewBox="0 0 %g %g" preserveAspectRatio="none" role="img" aria-label="last hour: %d processed, %d failed">`, sparkW, sparkH, sumOK, sumErr)
	fmt.Fprintf(&b, `<title>Last hour, per minute: %d processed, %d failed (peak %d/min)</title>`, sumOK, sumErr, top)
	fmt.Fprintf(&b, `<line class="spark-base" x1="0" y1="%g" x2="%g" y2="%g" vector-effect="non-scaling-stroke"/>`, sparkH-sparkPad, sparkW, sparkH-sparkPad)
	if len(processed) > 0 {
		pts := sparkPoints(processed, top)
		fmt.Fprintf(&b, `<path class="spark-ok-area" d="M0,%g L%s L%g,%g Z"/>`, sparkH-sparkPad, pts, sparkW, sparkH-sparkPad)
		fmt.Fprintf(&b, `<polyline class="spark-ok" points="%s" vector-effect="non-scaling-stroke"/>`, pts)
	}
	if sumErr > 0 {
		fmt.Fprintf(&b, `<polyline class="spark-err" points="%s" vector-effect="non-scaling-stroke"/>`, sparkPoints(failed, top))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers only
}

func sparkPoints(vals []int, top int) string {
	var b strings.Builder
	step := sparkW
	if len(vals) > 1 {
		step = sparkW / float64(len(vals)-1)
	}
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(' ')
		}
		y := sparkH - sparkPad - float64(v)/float64(top)*(sparkH-2*sparkPad)
		fmt.Fprintf(&b, "%.1f,%.1f", float64(i)*step, y)
	}
	return b.String()
}
