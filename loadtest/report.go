package loadtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run, written as report.json. Its core is
// {"overall": M, "tenants": {"NAME": M}}; the rest describes the run.
type Report struct {
	Meta     Meta               `json:"meta"`
	Overall  Metrics            `json:"overall"`
	Tenants  map[string]Metrics `json:"tenants"`
	Fairness Fairness           `json:"fairness"`
	SLO      []SLOResult        `json:"slo,omitempty"`
	Timeline []TimePoint        `json:"timeline,omitempty"`
	// Batch compares the interactive traffic with and without a batch job beside it
	// (scenarios with a batch: block).
	Batch *BatchPhase `json:"batch,omitempty"`
}

// Meta describes a run.
type Meta struct {
	Scenario       string     `json:"scenario"`
	Description    string     `json:"description,omitempty"`
	Target         string     `json:"target"`
	Started        time.Time  `json:"started"`
	WindowS        float64    `json:"window_s"` // measured seconds (after warm-up)
	WarmupRequests int        `json:"warmup_requests"`
	StoppedBy      string     `json:"stopped_by"` // duration, requests or interrupt
	Goodput        GoodputSLO `json:"goodput_slo"`
	TenantOrder    []string   `json:"tenant_order"` // as in the scenario
	// SendLag is how late open-loop requests left after their scheduled times
	// (only late ones are counted); a large p99 means the generator fell behind
	// and the measured latencies understate the server's.
	SendLag Percentiles `json:"send_lag_ms"`
	// Spec is the scenario run, after defaults and command-line bounds, without
	// keys (Scenario.Spec); reports written before it have none.
	Spec map[string]any `json:"scenario_spec,omitempty"`
	// ErrorSamples holds, per errors key, the code and message of its first error.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
}

// tenantNames returns the tenants in scenario order, falling back to sorted names.
func (r *Report) tenantNames() []string {
	if len(r.Meta.TenantOrder) == len(r.Tenants) {
		return r.Meta.TenantOrder
	}
	ns := make([]string, 0, len(r.Tenants))
	for n := range r.Tenants {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// WriteFiles writes dir/report.json and dir/report.html, creating dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("loadtest: encoding report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	return nil
}

// ReadReport reads a report.json.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("loadtest: %s: %w", path, err)
	}
	return &r, nil
}

// WriteSummary prints the terminal table: one row per tenant and one overall.
func (r *Report) WriteSummary(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "tenant\treqs\tok\terrors\tttft p50\tp99\titl p50\tp99\te2e p50\tp90\tp99\trps\ttok/s\tgoodput/s\t\n")
	row := func(name string, m Metrics) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.1f\t%.2f\t\n", name, m.Requests, m.OK, errorsText(m.Errors),
			msText(m.TTFT.P50), msText(m.TTFT.P99), msText(m.ITL.P50), msText(m.ITL.P99),
			msText(m.E2E.P50), msText(m.E2E.P90), msText(m.E2E.P99), m.RPS, m.TokensPerS, m.GoodputRPS)
	}
	for _, n := range r.tenantNames() {
		row(n, r.Tenants[n])
	}
	row("overall", r.Overall)
	if err := tw.Flush(); err != nil {
		return err
	}
	jain := "n/a"
	if r.Fairness.Jain != nil {
		jain = strconv.FormatFloat(*r.Fairness.Jain, 'f', 3, 64)
	}
	fmt.Fprintf(w, "window %.1fs (%d warm-up requests not counted), stopped by %s; fairness (Jain, weighted) %s\n",
		r.Meta.WindowS, r.Meta.WarmupRequests, r.Meta.StoppedBy, jain)
	if o := r.Overall; o.CachedTokens > 0 && o.PromptTokens > 0 {
		fmt.Fprintf(w, "prefix cache: %d of %d prompt tokens (%.1f%%) came from the server's cache\n",
			o.CachedTokens, o.PromptTokens, 100*float64(o.CachedTokens)/float64(o.PromptTokens))
	}
	if n := r.Overall.Retried; n > 0 {
		fmt.Fprintf(w, "%d requests were sent again on a new connection: the server had closed the reused keep-alive connection before answering\n", n)
	}
	if l := r.Meta.SendLag; l.P99 > 10 {
		fmt.Fprintf(w, "warning: open-loop requests left late (send lag p99 %.1fms, max %.1fms, over %d requests); the load generator may be short of CPU\n", l.P99, l.Max, l.N)
	}
	if len(r.Overall.Asked) > 0 {
		t := newAskedTable(r.Overall.Asked, r.Overall.AskedLatency)
		for _, row := range t.Rows {
			var parts []string
			for i, n := range row.Counts {
				if n > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", t.Cols[i], n))
				}
			}
			lat := ""
			if row.E2E.N > 0 {
				lat = fmt.Sprintf("; e2e p50 %s p99 %s", msText(row.E2E.P50), msText(row.E2E.P99))
				if row.TTFT.N > 0 {
					lat += fmt.Sprintf(", ttft p50 %s p99 %s", msText(row.TTFT.P50), msText(row.TTFT.P99))
				}
			}
			fmt.Fprintf(w, "tier options %q: %s%s\n", row.Label, strings.Join(parts, ", "), lat)
		}
	}
	for _, k := range errorKeys(r.Meta.ErrorSamples) {
		fmt.Fprintf(w, "first %s error: %s\n", k, r.Meta.ErrorSamples[k])
	}
	if b := r.Batch; b != nil {
		fmt.Fprintf(w, "batch %s: %d lines, %s at the end of the window (%d completed, %d failed; %s); it ran %.0fs from the start of the warm-up (window %.1fs)\n",
			b.ID, b.Lines, b.Status, b.Completed, b.Failed, b.End, b.RanS, r.Meta.WindowS)
		fmt.Fprintf(w, "interactive ttft p99: %s without the batch, %s beside it (×%.2f); p50 %s and %s\n",
			msText(b.Without.TTFT.P99), msText(b.With.TTFT.P99), b.Ratio, msText(b.Without.TTFT.P50), msText(b.With.TTFT.P50))
	}
	for _, s := range r.SLO {
		status := "ok"
		if !s.Met {
			status = "MISSED"
		}
		fmt.Fprintf(w, "slo %-20s target %-10s actual %-10s %s\n", s.Spec, fmtNum(s.Target), fmtNum(s.Actual), status)
	}
	return nil
}

func msText(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmtNum(v) + "ms"
}

func fmtNum(v float64) string {
	switch {
	case v == math.Trunc(v) || math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func errorsText(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range errorKeys(m) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// SLO is one release-gating target, e.g. ttft_p99=500ms, or quiet:ttft_p99=500ms
// for one tenant.
type SLO struct {
	Spec   string  // as written
	Tenant string  // "" for the overall metrics
	Metric string  // e.g. ttft_p99, error_rate, rps
	Target float64 // ms for latencies, a fraction for rates, per second for throughputs
	Min    bool    // the actual must be at least Target (throughputs, fairness); else at most
}

// SLOResult is an SLO judged against a report.
type SLOResult struct {
	Spec   string  `json:"spec"`
	Target float64 `json:"target"`
	Actual float64 `json:"actual"`
	Met    bool    `json:"met"`
}

// ErrSLO is wrapped by errors about an --slo specification.
var ErrSLO = errors.New("loadtest: invalid slo")

// sloMetrics names every SLO metric and whether it is a floor.
var sloMetrics = map[string]bool{
	"ttft_p50": false, "ttft_p90": false, "ttft_p99": false,
	"itl_p50": false, "itl_p90": false, "itl_p99": false,
	"e2e_p50": false, "e2e_p90": false, "e2e_p99": false,
	"error_rate": false, "rps": true, "tokens_per_s": true, "goodput_rps": true,
	"goodput_ratio": true, "fairness": true,
}

// ParseSLOs parses "ttft_p99=500ms,e2e_p90=2s,error_rate=1%,rps=5". Latencies take
// Go durations or bare milliseconds; error_rate takes a fraction or a percentage.
// A "TENANT:" prefix (quiet-a:ttft_p99=500ms) judges that tenant's metrics alone
// (fairness is only overall).
func ParseSLOs(spec string) ([]SLO, error) {
	var out []SLO
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		tenant, scoped := "", false
		if i := strings.LastIndex(k, ":"); i >= 0 {
			tenant, k, scoped = strings.TrimSpace(k[:i]), strings.TrimSpace(k[i+1:]), true
		}
		floor, known := sloMetrics[k]
		if !ok || !known || (scoped && (tenant == "" || k == "fairness")) {
			return nil, fmt.Errorf("%w: %q (want METRIC=VALUE; metrics: ttft|itl|e2e_p50|p90|p99, error_rate, rps, tokens_per_s, goodput_rps, goodput_ratio, fairness)", ErrSLO, part)
		}
		var t float64
		var err error
		switch {
		case strings.HasPrefix(k, "ttft_") || strings.HasPrefix(k, "itl_") || strings.HasPrefix(k, "e2e_"):
			if d, derr := time.ParseDuration(v); derr == nil {
				t = float64(d) / float64(time.Millisecond)
			} else {
				t, err = strconv.ParseFloat(v, 64)
			}
		case strings.HasSuffix(v, "%"):
			t, err = strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
			t /= 100
		default:
			t, err = strconv.ParseFloat(v, 64)
		}
		if err != nil || math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			return nil, fmt.Errorf("%w: %q: bad value %q", ErrSLO, part, v)
		}
		out = append(out, SLO{Spec: part, Tenant: tenant, Metric: k, Target: t, Min: floor})
	}
	return out, nil
}

// GoodputFrom returns per-request limits taken from the latency SLOs (whatever
// their percentile), for scenarios that set none of their own.
func GoodputFrom(slos []SLO) GoodputSLO {
	var g GoodputSLO
	set := func(p *float64, t float64) {
		if *p == 0 || t < *p {
			*p = t
		}
	}
	for _, s := range slos {
		switch {
		case strings.HasPrefix(s.Metric, "ttft_"):
			set(&g.TTFTms, s.Target)
		case strings.HasPrefix(s.Metric, "itl_"):
			set(&g.ITLms, s.Target)
		case strings.HasPrefix(s.Metric, "e2e_"):
			set(&g.E2Ems, s.Target)
		}
	}
	return g
}

// value returns the report's value of an SLO metric for m (the overall metrics
// or one tenant's).
func (r *Report) value(m Metrics, metric string) float64 {
	pick := func(p Percentiles, q string) float64 {
		switch q {
		case "p50":
			return p.P50
		case "p90":
			return p.P90
		}
		return p.P99
	}
	kind, q, _ := strings.Cut(metric, "_")
	switch kind {
	case "ttft":
		return pick(m.TTFT, q)
	case "itl":
		return pick(m.ITL, q)
	case "e2e":
		return pick(m.E2E, q)
	}
	switch metric {
	case "error_rate":
		if m.Requests == 0 {
			return 0
		}
		return round3(float64(m.Requests-m.OK) / float64(m.Requests))
	case "rps":
		return m.RPS
	case "tokens_per_s":
		return m.TokensPerS
	case "goodput_rps":
		return m.GoodputRPS
	case "goodput_ratio":
		if m.Requests == 0 {
			return 0
		}
		return round3(float64(m.Good) / float64(m.Requests))
	case "fairness":
		if r.Fairness.Jain == nil {
			return 0
		}
		return *r.Fairness.Jain
	}
	return math.NaN()
}

// CheckSLOs judges each SLO against the overall metrics (or its tenant's), stores
// the results in the report, and tells whether all were met. A latency SLO with no
// samples (say, TTFT of a run without streaming, or a run where everything failed)
// is missed, and so is an SLO of a tenant the report does not have.
func (r *Report) CheckSLOs(slos []SLO) bool {
	all := true
	r.SLO = nil
	for _, s := range slos {
		m, found := r.Overall, true
		if s.Tenant != "" {
			m, found = r.Tenants[s.Tenant]
		}
		v := r.value(m, s.Metric)
		met := v <= s.Target
		if s.Min {
			met = v >= s.Target
		}
		if !found || samplesFor(m, s.Metric) == 0 {
			met = false
		}
		r.SLO = append(r.SLO, SLOResult{Spec: s.Spec, Target: s.Target, Actual: v, Met: met})
		all = all && met
	}
	return all
}

func samplesFor(m Metrics, metric string) int64 {
	switch {
	case strings.HasPrefix(metric, "ttft_"):
		return m.TTFT.N
	case strings.HasPrefix(metric, "itl_"):
		return m.ITL.N
	case strings.HasPrefix(metric, "e2e_"):
		return m.E2E.N
	}
	return int64(m.Requests)
}

// String names the limits, e.g. "ttft 1000ms, e2e 10000ms", or "none".
func (g GoodputSLO) String() string {
	var parts []string
	for _, l := range []struct {
		name string
		v    float64
	}{{"ttft", g.TTFTms}, {"itl", g.ITLms}, {"e2e", g.E2Ems}} {
		if l.v > 0 {
			parts = append(parts, l.name+" "+fmtNum(l.v)+"ms")
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ScenarioDiffs lists what makes two reports' runs not like for like: every field
// of the scenario that differs (name, bounds, arrival, workload, model, tier
// options, tenants), the goodput limits, and measured windows or stop reasons that
// differ. Empty means the same scenario; a report without a scenario record
// (written by an older lmlite) is named, as nothing can then be checked but the
// name.
func ScenarioDiffs(a, b *Report, nameA, nameB string) []string {
	var out []string
	switch {
	case a.Meta.Spec == nil || b.Meta.Spec == nil:
		for _, r := range []struct {
			name string
			rep  *Report
		}{{nameA, a}, {nameB, b}} {
			if r.rep.Meta.Spec == nil {
				out = append(out, fmt.Sprintf("%s has no record of its scenario (written by an older lmlite): only the names can be compared", r.name))
			}
		}
		if a.Meta.Scenario != b.Meta.Scenario {
			out = append(out, fmt.Sprintf("name: %s %q, %s %q", nameA, a.Meta.Scenario, nameB, b.Meta.Scenario))
		}
	default:
		fa, fb := map[string]string{}, map[string]string{}
		flatten("", a.Meta.Spec, fa)
		flatten("", b.Meta.Spec, fb)
		keys := make([]string, 0, len(fa)+len(fb))
		for k := range fa {
			keys = append(keys, k)
		}
		for k := range fb {
			if _, ok := fa[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		done := map[string]bool{}
		for _, k := range keys {
			va, oka := fa[k]
			vb, okb := fb[k]
			if oka && okb {
				if va != vb {
					out = append(out, fmt.Sprintf("%s: %s %s, %s %s", k, nameA, va, nameB, vb))
				}
				continue
			}
			// A part only one side has (a tier option, a tenant's own workload) is
			// named once, whole, rather than field by field.
			other := fb // the side without k
			if okb {
				other = fa
			}
			item := outermostMissing(k, other)
			if done[item] {
				continue
			}
			done[item] = true
			va, vb = valueAt(fa, item), valueAt(fb, item)
			out = append(out, fmt.Sprintf("%s: %s %s, %s %s", item, nameA, va, nameB, vb))
		}
	}
	if a.Meta.Goodput != b.Meta.Goodput {
		out = append(out, fmt.Sprintf("goodput limits: %s %s, %s %s", nameA, a.Meta.Goodput, nameB, b.Meta.Goodput))
	}
	if a.Meta.StoppedBy != b.Meta.StoppedBy {
		out = append(out, fmt.Sprintf("stopped by: %s %s, %s %s", nameA, a.Meta.StoppedBy, nameB, b.Meta.StoppedBy))
	}
	// Runs of the same bounds end within a drain period of each other; 10% apart
	// means one was cut short or interrupted.
	if wa, wb := a.Meta.WindowS, b.Meta.WindowS; math.Abs(wa-wb) > 0.1*math.Max(wa, wb) {
		out = append(out, fmt.Sprintf("measured window: %s %.1fs, %s %.1fs", nameA, wa, nameB, wb))
	}
	return out
}

// outermostMissing returns the shortest path on the way to k (a list item, a
// map, or k itself) under which flat has nothing, else k.
func outermostMissing(k string, flat map[string]string) string {
	for i := 1; i <= len(k); i++ {
		if i < len(k) && k[i] != '.' && k[i] != '[' {
			continue
		}
		if p := k[:i]; !hasUnder(flat, p) {
			return p
		}
	}
	return k
}

func hasUnder(flat map[string]string, p string) bool {
	for f := range flat {
		if strings.HasPrefix(f, p+".") || strings.HasPrefix(f, p+"[") {
			return true
		}
	}
	return false
}

// valueAt is flat's value at path p: its leaf, or the leaves under it as
// "{field: value, ...}", or "(none)".
func valueAt(flat map[string]string, p string) string {
	if v, ok := flat[p]; ok {
		return v
	}
	var parts []string
	for k, v := range flat {
		if rest, ok := strings.CutPrefix(k, p); ok && (rest[0] == '.' || rest[0] == '[') {
			parts = append(parts, strings.TrimPrefix(rest, ".")+": "+v)
		}
	}
	if len(parts) == 0 {
		return "(none)"
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ", ") + "}"
}

// flatten writes every leaf of v under its dotted path (list items as [i]), each
// as its JSON text, so that 8 read from YAML and 8.0 read back from JSON agree.
func flatten(path string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, e, out)
		}
	case []any:
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	default:
		b, err := json.Marshal(x)
		if err != nil {
			b = []byte(fmt.Sprint(x))
		}
		out[path] = string(b)
	}
}

// Compare writes the differences between two reports, metric by metric, for the
// overall row and every tenant either has. When the runs were not of the same
// scenario (ScenarioDiffs), a warning listing the differences comes first.
func Compare(w io.Writer, a, b *Report, nameA, nameB string) error {
	if diffs := ScenarioDiffs(a, b, nameA, nameB); len(diffs) > 0 {
		fmt.Fprintf(w, "WARNING: the two runs differ, so the figures below are not like for like:\n")
		for _, d := range diffs {
			fmt.Fprintf(w, "  - %s\n", d)
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scope\tmetric\t%s\t%s\tchange\t\n", nameA, nameB)
	scope := func(name string, ma, mb *Metrics) {
		value := func(m *Metrics, get func(*Metrics) float64) (float64, string) {
			if m == nil {
				return 0, "-" // the tenant is not in this report
			}
			v := get(m)
			return v, fmtNum(v)
		}
		for _, f := range compareFields {
			va, sa := value(ma, f.get)
			vb, sb := value(mb, f.get)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", name, f.name, sa, sb, change(ma != nil && mb != nil, va, vb))
		}
	}
	scope("overall", &a.Overall, &b.Overall)
	names := map[string]bool{}
	for n := range a.Tenants {
		names[n] = true
	}
	for n := range b.Tenants {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		var ma, mb *Metrics
		if m, ok := a.Tenants[n]; ok {
			ma = &m
		}
		if m, ok := b.Tenants[n]; ok {
			mb = &m
		}
		scope(n, ma, mb)
	}
	return tw.Flush()
}

var compareFields = []struct {
	name string
	get  func(*Metrics) float64
}{
	{"requests", func(m *Metrics) float64 { return float64(m.Requests) }},
	{"ok", func(m *Metrics) float64 { return float64(m.OK) }},
	{"errors", func(m *Metrics) float64 { return float64(m.Requests - m.OK) }},
	{"ttft_p50_ms", func(m *Metrics) float64 { return m.TTFT.P50 }},
	{"ttft_p99_ms", func(m *Metrics) float64 { return m.TTFT.P99 }},
	{"itl_p50_ms", func(m *Metrics) float64 { return m.ITL.P50 }},
	{"itl_p99_ms", func(m *Metrics) float64 { return m.ITL.P99 }},
	{"e2e_p50_ms", func(m *Metrics) float64 { return m.E2E.P50 }},
	{"e2e_p90_ms", func(m *Metrics) float64 { return m.E2E.P90 }},
	{"e2e_p99_ms", func(m *Metrics) float64 { return m.E2E.P99 }},
	{"rps", func(m *Metrics) float64 { return m.RPS }},
	{"tokens_per_s", func(m *Metrics) float64 { return m.TokensPerS }},
	{"goodput_rps", func(m *Metrics) float64 { return m.GoodputRPS }},
}

func change(both bool, a, b float64) string {
	switch {
	case !both:
		return "-"
	case a == b:
		return "="
	case a == 0:
		if b > 0 {
			return "+" + fmtNum(b)
		}
		return fmtNum(b)
	}
	return fmt.Sprintf("%+.1f%%", (b-a)/a*100)
}

// askedTable lays out Metrics.Asked: a row per tier options sent (sorted), a
// column per outcome, the tiers from fast up first, then the errors keys.
type askedTable struct {
	Cols []string
	Rows []askedRow
}

type askedRow struct {
	Label     string
	Counts    []int
	TTFT, E2E Percentiles // of its successes
}

var tierOrder = map[string]int{"fast": 1, "balanced": 2, "deep": 3, "max": 4, "ok": 5}

func newAskedTable(asked map[string]map[string]int, lat map[string]AskLatency) *askedTable {
	seen := map[string]bool{}
	t := &askedTable{}
	for _, outs := range asked {
		for o := range outs {
			if !seen[o] {
				seen[o] = true
				t.Cols = append(t.Cols, o)
			}
		}
	}
	sort.Slice(t.Cols, func(i, j int) bool {
		a, b := t.Cols[i], t.Cols[j]
		ra, rb := tierOrder[a], tierOrder[b]
		if ra == 0 {
			ra = 100 // tiers before errors keys
		}
		if rb == 0 {
			rb = 100
		}
		if ra != rb {
			return ra < rb
		}
		return a < b
	})
	labels := make([]string, 0, len(asked))
	for l := range asked {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	for _, l := range labels {
		row := askedRow{Label: l, TTFT: lat[l].TTFT, E2E: lat[l].E2E}
		for _, c := range t.Cols {
			row.Counts = append(row.Counts, asked[l][c])
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}
