package main

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"time"
)

//go:embed report.html.tmpl
var htmlSource string

var htmlTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(a, b uint64) string {
		if b == 0 {
			return "0"
		}
		return fmt.Sprintf("%.2f", 100*float64(a)/float64(b))
	},
	"clock": func(t *time.Time) string {
		if t == nil {
			return "–"
		}
		return t.Format("2006-01-02 15:04:05.000")
	},
	"rfc3339": func(t time.Time) string { return t.Format(time.RFC3339) },
}).Parse(htmlSource))

// bar is one rectangle of a chart, in SVG user units.
type bar struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// chart is an SVG chart: its bars and axis labels.
type chart struct {
	W, H   float64
	Bars   []bar
	Labels []label
}

type label struct {
	X, Y   float64
	Anchor string
	Text   string
}

// htmlPage is what the template renders.
type htmlPage struct {
	*Report
	Top      []Key
	Shared   []Key
	Timeline chart
	TopKeys  chart
	Per      string
}

// timelineChart stacks, per slot, allowed (grey), refused (red) and exempt
// (blue) requests.
func timelineChart(tl Timeline) chart {
	c := chart{W: 960, H: 240}
	const left, bottom, top = 56.0, 28.0, 10.0
	var peak uint64
	for i := range tl.Requests {
		peak = max(peak, tl.Requests[i])
	}
	n := len(tl.Requests)
	if n == 0 || peak == 0 {
		c.Labels = append(c.Labels, label{X: c.W / 2, Y: c.H / 2, Anchor: "middle", Text: "no requests"})
		return c
	}
	plotW, plotH := c.W-left-8, c.H-bottom-top
	w := plotW / float64(n)
	y0 := c.H - bottom
	scale := plotH / float64(peak)
	step := time.Duration(tl.Step * float64(time.Second))
	for i := range n {
		x := left + float64(i)*w
		at := tl.Start.Add(time.Duration(i) * step).Format("15:04:05")
		allowed := tl.Requests[i] - tl.Refused[i] - tl.Exempt[i]
		y := y0
		for _, part := range []struct {
			v     uint64
			class string
		}{{allowed, "allowed"}, {tl.Exempt[i], "exempt"}, {tl.Refused[i], "refused"}} {
			if part.v == 0 {
				continue
			}
			h := float64(part.v) * scale
			y -= h
			c.Bars = append(c.Bars, bar{X: x, Y: y, W: max(w-0.5, 0.5), H: h, Class: part.class,
				Title: fmt.Sprintf("%s (+%s): %d %s", at, step, part.v, part.class)})
		}
	}
	c.Labels = append(c.Labels,
		label{X: left - 6, Y: top + 4, Anchor: "end", Text: fmt.Sprint(peak)},
		label{X: left - 6, Y: y0, Anchor: "end", Text: "0"},
		label{X: left, Y: c.H - 8, Anchor: "start", Text: tl.Start.Format("2006-01-02 15:04:05")},
		label{X: c.W - 8, Y: c.H - 8, Anchor: "end", Text: tl.Start.Add(time.Duration(n)*step).Format("15:04:05") + fmt.Sprintf(" (slot %s)", step)},
	)
	return c
}

// topKeysChart draws one horizontal bar per key: allowed then refused.
func topKeysChart(keys []Key) chart {
	const rowH, left = 22.0, 300.0
	c := chart{W: 960, H: rowH*float64(len(keys)) + 8}
	var peak uint64
	for _, k := range keys {
		peak = max(peak, k.Requests)
	}
	if peak == 0 {
		return c
	}
	scale := (c.W - left - 90) / float64(peak)
	for i, k := range keys {
		y := 4 + float64(i)*rowH
		c.Labels = append(c.Labels, label{X: left - 8, Y: y + 14, Anchor: "end", Text: k.Key},
			label{X: left + float64(k.Requests)*scale + 6, Y: y + 14, Anchor: "start", Text: fmt.Sprintf("%d / %d", k.Refused, k.Requests)})
		aw := float64(k.Allowed) * scale
		c.Bars = append(c.Bars, bar{X: left, Y: y, W: aw, H: rowH - 6, Class: "allowed", Title: fmt.Sprintf("%s: %d allowed", k.Key, k.Allowed)})
		if k.Refused > 0 {
			c.Bars = append(c.Bars, bar{X: left + aw, Y: y, W: float64(k.Refused) * scale, H: rowH - 6, Class: "refused", Title: fmt.Sprintf("%s: %d refused", k.Key, k.Refused)})
		}
	}
	return c
}

// round keeps one decimal of the charts' coordinates (a tenth of a pixel).
func (c *chart) round() {
	r := func(x float64) float64 { return math.Round(x*10) / 10 }
	for i := range c.Bars {
		b := &c.Bars[i]
		b.X, b.Y, b.W, b.H = r(b.X), r(b.Y), r(b.W), r(b.H)
	}
	for i := range c.Labels {
		c.Labels[i].X, c.Labels[i].Y = r(c.Labels[i].X), r(c.Labels[i].Y)
	}
}

// perString names a period as a person would: "minute", or "90s".
func perString(d time.Duration) string {
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return d.String()
}

func writeHTML(w io.Writer, r *Report, rows int) error {
	p := htmlPage{Report: r, Top: r.Keys[:min(rows, len(r.Keys))], Timeline: timelineChart(r.Timeline), Per: perString(r.Limits.Per)}
	for _, k := range r.Keys {
		if k.SharedEgress && len(p.Shared) < rows {
			p.Shared = append(p.Shared, k)
		}
	}
	p.TopKeys = topKeysChart(p.Top)
	p.Timeline.round()
	p.TopKeys.round()
	return htmlTemplate.Execute(w, p)
}

func writeHTMLFile(name string, r *Report, rows int) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := writeHTML(f, r, rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
