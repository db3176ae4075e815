package main

import (
	"bytes"
	"fmt"
	"html"
	"time"
)

// svg writes a plain SVG picture: no script, no external font or
// stylesheet, text in the reader's own sans-serif.
type svg struct {
	bytes.Buffer
}

func newSVG(width, height int, title, desc string) *svg {
	s := &svg{}
	fmt.Fprintf(s, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(s, "<title>%s</title>\n<desc>%s</desc>\n", html.EscapeString(title), html.EscapeString(desc))
	fmt.Fprintf(s, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	return s
}

func (s *svg) line(x1, y1, x2, y2 float64, stroke string, width float64) {
	fmt.Fprintf(s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", x1, y1, x2, y2, stroke, width)
}

func (s *svg) rect(x, y, w, h float64, fill string) {
	fmt.Fprintf(s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, fill)
}

// text writes t at x, y; anchor is start, middle or end.
func (s *svg) text(x, y float64, anchor, fill, t string, attrs ...string) {
	extra := ""
	for _, a := range attrs {
		extra += " " + a
	}
	fmt.Fprintf(s, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s"%s>%s</text>`+"\n", x, y, anchor, fill, extra, html.EscapeString(t))
}

func (s *svg) end() []byte {
	s.WriteString("</svg>\n")
	return s.Bytes()
}

// Colors of the pictures.
const (
	colorAxis    = "#666666"
	colorGrid    = "#e5e5e5"
	colorText    = "#222222"
	colorLevel   = "#3b75af"
	colorAllowed = "#2e8b3e"
	colorDenied  = "#c8372d"
)

// The algorithm picture's frame: the remaining capacity's plot above, the
// requests' strip below it.
const (
	plotLeft, plotRight = 60.0, 740.0
	plotTop, plotBottom = 62.0, 222.0
	stripTop            = 250.0
	markerGap           = 6.0
)

// plotRun draws one algorithm's run: the remaining capacity over time as
// a step line, and each request as a mark at its time, admitted (a green
// dot) or denied (a red cross), stacked when several arrive at once.
func plotRun(a algorithm, r run) []byte {
	height := int(stripTop + burst*markerGap + 40)
	desc := fmt.Sprintf("%s (%s), plotted from Sluice's Go model: %d requests at 0 s, then one a second until %s; the line is the capacity left for a request of cost 1, the marks below are the requests, admitted or denied.",
		a.title, a.params, burst, trickleEnd)
	s := newSVG(800, height, a.title+": a burst, then a trickle", desc)
	s.text(plotLeft, 22, "start", colorText, a.title, `font-size="16"`, `font-weight="bold"`)
	s.text(plotLeft, 42, "start", colorAxis, fmt.Sprintf("%s · %d requests at 0 s, then 1 a second until %s", a.params, burst, seconds(trickleEnd)))
	capacity := float64(a.limit.Capacity)
	x := func(at time.Duration) float64 { return plotLeft + (plotRight-plotLeft)*at.Seconds()/horizon.Seconds() }
	y := func(v int64) float64 { return plotBottom - (plotBottom-plotTop)*float64(v)/capacity }
	for v := int64(0); v <= a.limit.Capacity; v += 5 {
		s.line(plotLeft, y(v), plotRight, y(v), colorGrid, 1)
		s.text(plotLeft-8, y(v)+4, "end", colorAxis, fmt.Sprint(v))
	}
	for at := time.Duration(0); at <= horizon; at += 5 * time.Second {
		s.line(x(at), plotBottom, x(at), plotBottom+4, colorAxis, 1)
		s.text(x(at), plotBottom+17, "middle", colorAxis, seconds(at))
	}
	s.text(18, (plotTop+plotBottom)/2, "middle", colorAxis, "remaining", fmt.Sprintf(`transform="rotate(-90 18 %.1f)"`, (plotTop+plotBottom)/2))
	s.line(plotLeft, plotBottom, plotRight, plotBottom, colorAxis, 1)
	s.WriteString(`<polyline fill="none" stroke="` + colorLevel + `" stroke-width="2" points="`)
	for i, p := range r.remaining {
		if i > 0 && p.remaining != r.remaining[i-1].remaining && p.at != r.remaining[i-1].at {
			fmt.Fprintf(s, "%.1f,%.1f ", x(p.at), y(r.remaining[i-1].remaining)) // hold the level until the change
		}
		fmt.Fprintf(s, "%.1f,%.1f ", x(p.at), y(p.remaining))
	}
	s.WriteString(`"/>` + "\n")
	requestMarks(s, r.requests, x)
	return s.end()
}

// requestMarks draws the requests in the strip under the plot.
func requestMarks(s *svg, reqs []request, x func(time.Duration) float64) {
	s.text(plotLeft-8, stripTop+4, "end", colorAxis, "requests")
	stack := map[time.Duration]int{}
	admitted, denied := 0, 0
	for _, q := range reqs {
		cx, cy := x(q.at), stripTop+float64(stack[q.at])*markerGap
		stack[q.at]++
		if q.allowed {
			admitted++
			fmt.Fprintf(s, `<circle cx="%.1f" cy="%.1f" r="2.6" fill="%s"/>`+"\n", cx, cy, colorAllowed)
			continue
		}
		denied++
		s.line(cx-2.5, cy-2.5, cx+2.5, cy+2.5, colorDenied, 1.6)
		s.line(cx-2.5, cy+2.5, cx+2.5, cy-2.5, colorDenied, 1.6)
	}
	ly := stripTop + burst*markerGap + 22
	fmt.Fprintf(s, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", plotRight-230, ly-4, colorAllowed)
	s.text(plotRight-222, ly, "start", colorText, fmt.Sprintf("admitted (%d)", admitted))
	s.line(plotRight-113, ly-7, plotRight-107, ly-1, colorDenied, 1.6)
	s.line(plotRight-113, ly-1, plotRight-107, ly-7, colorDenied, 1.6)
	s.text(plotRight-100, ly, "start", colorText, fmt.Sprintf("denied (%d)", denied))
	s.text(plotLeft, ly, "start", colorAxis, "time since the burst (s)")
}

func seconds(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }
