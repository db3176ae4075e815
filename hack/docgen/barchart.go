package main

import "math"

// barRow is one labeled row of a bar chart: a bar per series.
type barRow struct {
	label string
	bars  []bar
}

// bar is one bar: its value, color and the text printed after it.
type bar struct {
	value float64
	color string
	text  string
}

// The bar chart's frame: each row's label on a line of its own, its bars
// under it, so that long configuration names need no truncation.
const (
	chartLeft, chartWidth = 20.0, 600.0
	labelHeight, barH     = 16.0, 11.0
	rowGap                = 10.0
)

// barChart draws rows of horizontal bars on one scale from 0.
func barChart(title, desc string, rows []barRow) []byte {
	top := 48.0
	height := top
	maxV := 0.0
	for _, r := range rows {
		height += labelHeight + float64(len(r.bars))*(barH+2) + rowGap
		for _, b := range r.bars {
			maxV = math.Max(maxV, b.value)
		}
	}
	s := newSVG(800, int(height+10), title, desc)
	s.text(chartLeft, 24, "start", colorText, title, `font-size="16"`, `font-weight="bold"`)
	s.text(chartLeft, 40, "start", colorAxis, desc)
	y := top
	for _, r := range rows {
		s.text(chartLeft, y+12, "start", colorText, r.label)
		y += labelHeight
		for _, b := range r.bars {
			w := 0.0
			if maxV > 0 {
				w = chartWidth * b.value / maxV
			}
			s.rect(chartLeft, y+1, math.Max(w, 1), barH, b.color)
			s.text(chartLeft+w+6, y+barH-0.5, "start", colorAxis, b.text, `font-size="11"`)
			y += barH + 2
		}
		y += rowGap
	}
	return s.end()
}
