package loadtest

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
)

// The HTML report is one self-contained file: charts are SVG drawn here in Go, the
// style and a few lines of script (tooltips) are inline, and nothing is fetched, so
// it opens offline and can be archived with the JSON.

// palette is colour-blind friendly (Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

func color(i int) string { return palette[i%len(palette)] }

type series struct {
	name  string
	color string
	ys    []float64
}

const (
	chartW, chartH         = 720, 260
	padL, padR, padT, padB = 60, 150, 28, 36
	plotW, plotH           = chartW - padL - padR, chartH - padT - padB
	ticks                  = 5
	svgOpen                = `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`
	svgTitle               = `<text class="title" x="%d" y="16">%s</text>`
)

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// num is a chart's number: four significant digits, without an exponent below a
// billion.
func num(v float64) string {
	if a := math.Abs(v); a >= 1e4 && a < 1e9 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// axes draws the frame, the y grid with labels and the legend.
func axes(b *strings.Builder, title, yLabel string, ymax float64, ss []series) {
	fmt.Fprintf(b, svgOpen, chartW, chartH, esc(title))
	fmt.Fprintf(b, svgTitle, padL, esc(title))
	for i := 0; i <= ticks; i++ {
		v := ymax * float64(i) / ticks
		y := padT + plotH - plotH*float64(i)/ticks
		fmt.Fprintf(b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, padL+plotW, y, y)
		fmt.Fprintf(b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, esc(num(v)))
	}
	fmt.Fprintf(b, `<text class="axis" transform="translate(14 %d) rotate(-90)" text-anchor="middle">%s</text>`, padT+plotH/2, esc(yLabel))
	for i, s := range ss {
		y := padT + 8 + 18*i
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text class="legend" x="%d" y="%d">%s</text>`,
			padL+plotW+14, y, s.color, padL+plotW+32, y+10, esc(s.name))
	}
}

// lineChart draws series over xs (seconds).
func lineChart(title, yLabel string, xs []float64, ss []series) template.HTML {
	var b strings.Builder
	ymax := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) {
				ymax = math.Max(ymax, y)
			}
		}
	}
	ymax = niceCeil(ymax)
	xmax := 1.0
	if len(xs) > 0 {
		xmax = niceCeil(xs[len(xs)-1])
	}
	axes(&b, title, yLabel, ymax, ss)
	for i := 0; i <= ticks; i++ {
		v := xmax * float64(i) / ticks
		x := padL + plotW*float64(i)/ticks
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, padT+plotH+16, esc(num(v)))
	}
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="middle">seconds after warm-up</text>`, padL+plotW/2, chartH-4)
	px := func(x float64) float64 { return padL + plotW*x/xmax }
	py := func(y float64) float64 { return padT + plotH - plotH*y/ymax }
	for _, s := range ss {
		// A NaN (a bucket without a value) breaks the line.
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, s.color, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for i, y := range s.ys {
			if math.IsNaN(y) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[i]), py(y)))
		}
		flush()
		for i, y := range s.ys {
			if math.IsNaN(y) {
				continue
			}
			fmt.Fprintf(&b, `<circle class="pt" cx="%.1f" cy="%.1f" r="3" fill="%s" data-tip="%s"/>`, px(xs[i]), py(y), s.color,
				esc(fmt.Sprintf("%s at %ss: %s", s.name, num(xs[i]), num(y))))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it went through esc
}

// barChart draws grouped bars: one group per label, one bar per series; stacked
// piles the series instead.
func barChart(title, yLabel string, labels []string, ss []series, stacked bool) template.HTML {
	var b strings.Builder
	ymax := 0.0
	for g := range labels {
		tot := 0.0
		for _, s := range ss {
			if stacked {
				tot += s.ys[g]
			} else {
				tot = math.Max(tot, s.ys[g])
			}
		}
		ymax = math.Max(ymax, tot)
	}
	ymax = niceCeil(ymax)
	axes(&b, title, yLabel, ymax, ss)
	if len(labels) == 0 {
		b.WriteString(`</svg>`)
		return template.HTML(b.String())
	}
	gw := float64(plotW) / float64(len(labels))
	bars := len(ss)
	if stacked {
		bars = 1
	}
	bw := math.Max(1, gw*0.8/float64(max(bars, 1)))
	every := max(1, len(labels)/12) // label at most 12 groups
	for g, l := range labels {
		x0 := padL + gw*float64(g) + gw*0.1
		if g%every == 0 {
			fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle"><title>%s</title>%s</text>`, padL+gw*(float64(g)+0.5), padT+plotH+16,
				esc(l), esc(fitLabel(l, gw*float64(every))))
		}
		base := 0.0
		for i, s := range ss {
			v := s.ys[g]
			h := plotH * v / ymax
			x := x0 + bw*float64(i)
			y := padT + plotH - h
			if stacked {
				x = x0
				y -= plotH * base / ymax
				base += v
			}
			if v == 0 {
				continue
			}
			fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" data-tip="%s"/>`, x, y, bw, h, s.color,
				esc(fmt.Sprintf("%s, %s: %s", l, s.name, num(v))))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// fitLabel shortens l to fit width (SVG units) at the tick font's size (about 6
// units a character), so that neighbouring labels do not run into each other: an
// ellipsis replaces its middle, keeping the start and the end, where names like
// tenant-01 and tenant-02 differ. The full label stays in the tick's title.
func fitLabel(l string, width float64) string {
	n := max(int(width/6.2)-1, 3)
	r := []rune(l)
	if len(r) <= n {
		return l
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

type htmlRow struct {
	Name      string
	Overall   bool
	M         Metrics
	Errs      string
	ErrCounts []int // per htmlData.ErrKeys
	F         TenantFairness
}

type htmlData struct {
	R       *Report
	Rows    []htmlRow
	ErrKeys []string // of the overall errors, for the errors-by-kind table
	Jain    string
	Asked   *askedTable
	Charts  []template.HTML
}

// WriteHTML writes the self-contained HTML report.
func (r *Report) WriteHTML(w io.Writer) error {
	d := htmlData{R: r, Jain: "n/a"}
	if r.Fairness.Jain != nil {
		d.Jain = strconv.FormatFloat(*r.Fairness.Jain, 'f', 3, 64)
	}
	names := r.tenantNames()
	for _, n := range names {
		m := r.Tenants[n]
		d.Rows = append(d.Rows, htmlRow{Name: n, M: m, Errs: errorsText(m.Errors), F: r.Fairness.Tenants[n]})
	}
	d.Rows = append(d.Rows, htmlRow{Name: "overall", Overall: true, M: r.Overall, Errs: errorsText(r.Overall.Errors)})
	d.ErrKeys = errorKeys(r.Overall.Errors)
	for i := range d.Rows {
		for _, k := range d.ErrKeys {
			d.Rows[i].ErrCounts = append(d.Rows[i].ErrCounts, d.Rows[i].M.Errors[k])
		}
	}
	if len(r.Overall.Asked) > 0 {
		d.Asked = newAskedTable(r.Overall.Asked, r.Overall.AskedLatency)
	}

	tl := r.Timeline
	xs := make([]float64, len(tl))
	col := func(f func(TimePoint) float64) []float64 {
		out := make([]float64, len(tl))
		for i, p := range tl {
			out[i] = f(p)
		}
		return out
	}
	for i, p := range tl {
		xs[i] = p.T
	}
	gap := func(v float64) float64 { // a bucket without successes has no latency
		if v == 0 {
			return math.NaN()
		}
		return v
	}
	d.Charts = append(d.Charts,
		lineChart("Latency over time (by start time)", "ms", xs, []series{
			{"e2e p50", color(0), col(func(p TimePoint) float64 { return gap(p.E2EP50) })},
			{"e2e p99", color(1), col(func(p TimePoint) float64 { return gap(p.E2EP99) })},
			{"ttft p50", color(2), col(func(p TimePoint) float64 { return gap(p.TTFTP50) })},
			{"ttft p99", color(3), col(func(p TimePoint) float64 { return gap(p.TTFTP99) })},
		}),
		lineChart("Throughput over time", "per second", xs, []series{
			{"requests/s", color(0), col(func(p TimePoint) float64 { return p.RPS })},
			{"tokens/s ÷ 10", color(1), col(func(p TimePoint) float64 { return p.TokensPerS / 10 })},
		}))
	pct := func(get func(Metrics) Percentiles) []series {
		ss := []series{{name: "p50", color: color(0)}, {name: "p90", color: color(1)}, {name: "p99", color: color(3)}}
		for _, n := range names {
			p := get(r.Tenants[n])
			ss[0].ys, ss[1].ys, ss[2].ys = append(ss[0].ys, p.P50), append(ss[1].ys, p.P90), append(ss[2].ys, p.P99)
		}
		return ss
	}
	d.Charts = append(d.Charts,
		barChart("Time to first token per tenant", "ms", names, pct(func(m Metrics) Percentiles { return m.TTFT }), false),
		barChart("End-to-end latency per tenant", "ms", names, pct(func(m Metrics) Percentiles { return m.E2E }), false),
		barChart("Throughput per tenant", "per second", names, []series{
			{"requests/s", color(0), tenantCol(r, names, func(m Metrics) float64 { return m.RPS })},
			{"goodput/s", color(2), tenantCol(r, names, func(m Metrics) float64 { return m.GoodputRPS })},
		}, false))
	if d.Asked != nil {
		labels := make([]string, len(d.Asked.Rows))
		ss := []series{{name: "p50", color: color(0)}, {name: "p90", color: color(1)}, {name: "p99", color: color(3)}}
		for i, row := range d.Asked.Rows {
			labels[i] = row.Label
			ss[0].ys, ss[1].ys, ss[2].ys = append(ss[0].ys, row.E2E.P50), append(ss[1].ys, row.E2E.P90), append(ss[2].ys, row.E2E.P99)
		}
		d.Charts = append(d.Charts, barChart("End-to-end latency per tier options sent", "ms", labels, ss, false))
	}
	// Errors over time, stacked by key.
	keys := errorKeys(r.Overall.Errors)
	labels := make([]string, len(tl))
	for i, p := range tl {
		labels[i] = num(p.T) + "s"
	}
	var es []series
	for i, k := range keys {
		es = append(es, series{name: k, color: color(i + 3), ys: col(func(p TimePoint) float64 { return float64(p.Errors[k]) })})
	}
	d.Charts = append(d.Charts, barChart("Errors over time (by start time)", "requests", labels, es, true))

	if err := htmlTmpl.Execute(w, d); err != nil {
		return fmt.Errorf("loadtest: writing html: %w", err)
	}
	return nil
}

// msNum is a latency for a table whose header names the unit: "-" without samples.
func msNum(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmtNum(v)
}

func tenantCol(r *Report, names []string, f func(Metrics) float64) []float64 {
	out := make([]float64, len(names))
	for i, n := range names {
		out[i] = f(r.Tenants[n])
	}
	return out
}

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{"num": msNum, "errTotal": func(m Metrics) int { return m.Requests - m.OK }}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>lmlite loadtest: {{.R.Meta.Scenario}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222}
p{max-width:75em}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:8px 0;font-size:13px;font-variant-numeric:tabular-nums}
td,th{padding:3px 5px;border-bottom:1px solid #ddd;text-align:right}
th{font-weight:600;white-space:nowrap}thead th{border-bottom:1px solid #999}th.group{border-bottom:1px solid #bbb;text-align:center}
td:first-child,th:first-child{text-align:left}tr.overall td{font-weight:bold}
td.name{max-width:15em;overflow-wrap:break-word}
td.sep,th.sep{border-left:1px solid #ddd}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,540px),1fr));gap:8px 24px}
.chart{width:100%;height:auto;display:block;margin:12px 0}
.chart .grid{stroke:#e5e5e5}.chart .tick,.chart .axis,.chart .legend{font-size:11px;fill:#444}
.chart .title{font-size:13px;font-weight:bold;fill:#222}
.missed{color:#b00;font-weight:bold}.met{color:#070}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:2px 6px;border-radius:3px;font-size:12px;display:none}
</style></head><body>
<h1>lmlite loadtest: {{.R.Meta.Scenario}}</h1>
{{with .R.Meta.Description}}<p>{{.}}</p>{{end}}
<p>Target {{.R.Meta.Target}}, started {{.R.Meta.Started.Format "2006-01-02 15:04:05 UTC"}}; measured window {{printf "%.1f" .R.Meta.WindowS}} s,
stopped by {{.R.Meta.StoppedBy}}; {{.R.Meta.WarmupRequests}} warm-up requests not counted.
Fairness (Jain's index of served ÷ weighted fair share): <b id="jain">{{.Jain}}</b>.
{{with .R.Meta.SendLag}}{{if .N}}Open-loop send lag (how late the generator sent a request after its scheduled time) over {{.N}} requests: p50 {{printf "%.1f" .P50}} ms, p99 {{printf "%.1f" .P99}} ms, max {{printf "%.1f" .Max}} ms.{{end}}{{end}}
{{with .R.Overall.Retried}}{{.}} requests were sent again on a new connection: the server had closed the reused keep-alive connection before answering.{{end}}</p>
{{with .R.Meta.ErrorSamples}}<h2>First error of each kind</h2><table id="errors">{{range $k, $v := .}}<tr><td>{{$k}}</td><td style="text-align:left">{{$v}}</td></tr>{{end}}</table>{{end}}
{{if .R.SLO}}<h2>SLOs</h2><table id="slo"><tr><th>target</th><th>wanted</th><th>actual</th><th></th></tr>
{{range .R.SLO}}<tr><td>{{.Spec}}</td><td>{{printf "%.4g" .Target}}</td><td>{{printf "%.4g" .Actual}}</td>{{if .Met}}<td class="met">met</td>{{else}}<td class="missed">MISSED</td>{{end}}</tr>
{{end}}</table>{{end}}
<h2>Summary</h2>
<div class="scroll"><table id="summary"><thead>
<tr><th rowspan="2">tenant</th><th rowspan="2">requests</th><th rowspan="2">ok</th><th rowspan="2">errors</th>
<th class="group sep" colspan="3">TTFT (ms)</th><th class="group sep" colspan="2">ITL (ms)</th><th class="group sep" colspan="3">end to end (ms)</th>
<th class="group sep" colspan="3">per second</th><th class="group sep" colspan="2">fairness</th></tr>
<tr><th class="sep">p50</th><th>p90</th><th>p99</th><th class="sep">p50</th><th>p99</th><th class="sep">p50</th><th>p90</th><th>p99</th>
<th class="sep" title="successful requests per second">req</th><th title="completion tokens of successes per second">tok</th><th title="requests within every goodput limit per second">good</th>
<th class="sep" title="share of all successes">share</th><th title="weighted max-min fair share">fair</th></tr>
</thead><tbody>
{{range .Rows}}<tr{{if .Overall}} class="overall"{{end}}><td class="name">{{.Name}}</td><td>{{.M.Requests}}</td><td>{{.M.OK}}</td><td title="{{.Errs}}">{{errTotal .M}}</td>
<td class="sep">{{num .M.TTFT.P50}}</td><td>{{num .M.TTFT.P90}}</td><td>{{num .M.TTFT.P99}}</td><td class="sep">{{num .M.ITL.P50}}</td><td>{{num .M.ITL.P99}}</td>
<td class="sep">{{num .M.E2E.P50}}</td><td>{{num .M.E2E.P90}}</td><td>{{num .M.E2E.P99}}</td><td class="sep">{{printf "%.2f" .M.RPS}}</td><td>{{printf "%.1f" .M.TokensPerS}}</td>
<td>{{printf "%.2f" .M.GoodputRPS}}</td>
<td class="sep">{{if not .Overall}}{{printf "%.3f" .F.Share}}{{end}}</td><td>{{if not .Overall}}{{printf "%.3f" .F.FairShare}}{{end}}</td></tr>
{{end}}</tbody></table></div>
{{if .ErrKeys}}<h2>Errors by kind</h2>
<div class="scroll"><table id="errkinds"><thead>
<tr><th rowspan="2">tenant</th><th class="group sep" colspan="{{len .ErrKeys}}">HTTP status or class</th><th class="group sep" colspan="3">refusals</th></tr>
<tr>{{range $i, $k := .ErrKeys}}<th{{if not $i}} class="sep"{{end}}>{{$k}}</th>{{end}}<th class="sep" title="429 insufficient_quota: the budget ran out">quota</th><th title="429 other than insufficient_quota">rate limit</th><th title="402 payment required">402</th></tr>
</thead><tbody>
{{range .Rows}}<tr{{if .Overall}} class="overall"{{end}}><td class="name">{{.Name}}</td>{{range $i, $n := .ErrCounts}}<td{{if not $i}} class="sep"{{end}}>{{$n}}</td>{{end}}<td class="sep">{{.M.QuotaExhausted}}</td><td>{{.M.RateLimited}}</td><td>{{.M.PaymentRequired}}</td></tr>
{{end}}</tbody></table></div>{{end}}
{{with .R.Overall.Tiers}}<p>Tiers served: {{range $k, $v := .}}{{$k}} {{$v}}; {{end}}</p>{{end}}
{{with .R.Overall.Models}}<p>Models served: {{range $k, $v := .}}{{$k}} {{$v}}; {{end}}</p>{{end}}
{{with .Asked}}<h2>Tier options sent: what served them, and their latency</h2>
<div class="scroll"><table id="asked"><thead>
<tr><th rowspan="2">options sent</th><th class="group sep" colspan="{{len .Cols}}">served by (or refused with)</th><th class="group sep" colspan="2">TTFT (ms)</th><th class="group sep" colspan="2">end to end (ms)</th></tr>
<tr>{{range $i, $c := .Cols}}<th{{if not $i}} class="sep"{{end}}>{{$c}}</th>{{end}}<th class="sep">p50</th><th>p99</th><th class="sep">p50</th><th>p99</th></tr>
</thead><tbody>
{{range .Rows}}<tr><td class="name">{{.Label}}</td>{{range $i, $n := .Counts}}<td{{if not $i}} class="sep"{{end}}>{{$n}}</td>{{end}}<td class="sep">{{num .TTFT.P50}}</td><td>{{num .TTFT.P99}}</td><td class="sep">{{num .E2E.P50}}</td><td>{{num .E2E.P99}}</td></tr>
{{end}}</tbody></table></div>{{end}}
<h2>Charts</h2>
<div class="charts">
{{range .Charts}}{{.}}
{{end}}</div>
<div id="tip"></div>
<script>
(function () {
  var tip = document.getElementById("tip");
  document.querySelectorAll("[data-tip]").forEach(function (el) {
    el.addEventListener("mousemove", function (e) {
      tip.textContent = el.getAttribute("data-tip");
      tip.style.left = (e.clientX + 12) + "px";
      tip.style.top = (e.clientY + 12) + "px";
      tip.style.display = "block";
    });
    el.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  });
  document.body.setAttribute("data-charts", String(document.querySelectorAll("svg.chart").length));
})();
</script>
</body></html>
`))
