package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/lmlite/lmlite/internal/stats"
)

// An interleaved comparison (RunAB, `lmlite loadtest ab`) measures two or more servers
// request by request: every round builds one request from the scenario's workload
// and sends it to each target in turn, one at a time, in a random order per round.
// The servers see the same prompts, and each round's targets run within a second of
// each other, so the machine's drift (other jobs, a noisy neighbour: 2× swings happen
// on shared machines) falls on all of them alike. The comparison is the median of the
// per-round differences from the first target, with a bootstrap 95% interval; a run
// of separate loadtests alternating A and B cannot resolve a millisecond on a
// 300 ms time to first token, this can.

// ABTarget is one server of an interleaved comparison.
type ABTarget struct {
	URL    string // root URL (loopback unless AllowRemote)
	APIKey string // sent as the Bearer key; "" sends none
}

// ABConfig configures RunAB.
type ABConfig struct {
	// Scenario's workload (its first tenant's, or the default) builds the requests,
	// its seed the prompts, its timeout bounds each request. Its arrival, concurrency
	// and duration are not used: a comparison is one closed-loop user.
	Scenario *Scenario
	Targets  []ABTarget // at least two; the first is the reference
	Rounds   int        // measured rounds (≤ MaxRequests)
	Warmup   int        // rounds sent first and left out
	// Seed orders the targets within each round (default 1).
	Seed        uint64
	AllowRemote bool
	Transport   http.RoundTripper // tests
	// OnRound, when set, sees each measured round's results (one per target, in
	// Targets' order) as they come.
	OnRound func(round int, res []Result)
}

// ABReport is an interleaved comparison's outcome.
type ABReport struct {
	Rounds  int           `json:"rounds"`
	Targets []ABTargetRow `json:"targets"`
}

// ABTargetRow is one target's figures. The Diff fields compare it with the reference
// (Targets[0]) over the rounds where both succeeded; the reference has none.
type ABTargetRow struct {
	URL      string      `json:"url"`
	Errors   int         `json:"errors"`
	TTFTp50  float64     `json:"ttft_p50_ms"` // streams only
	E2Ep50   float64     `json:"e2e_p50_ms"`
	TTFTDiff *PairedDiff `json:"ttft_diff,omitempty"`
	E2EDiff  *PairedDiff `json:"e2e_diff,omitempty"`
}

// PairedDiff summarizes per-round differences (this target − the reference), in ms.
type PairedDiff struct {
	Pairs  int     `json:"pairs"`
	Median float64 `json:"median_ms"`
	CILow  float64 `json:"ci95_low_ms"` // bootstrap percentile interval of the median
	CIHigh float64 `json:"ci95_high_ms"`
}

// ErrAB is wrapped by RunAB's refusals of a comparison it cannot make: fewer than
// two targets, rounds out of range, a multi_turn workload. A target off loopback is
// ErrRemote.
var ErrAB = errors.New("loadtest ab")

// RunAB runs an interleaved comparison (see ABConfig).
func RunAB(ctx context.Context, cfg ABConfig) (*ABReport, error) {
	s := cfg.Scenario
	if s == nil {
		return nil, errors.New("loadtest: no scenario")
	}
	if len(cfg.Targets) < 2 {
		return nil, fmt.Errorf("%w: give at least two targets", ErrAB)
	}
	if cfg.Rounds < 1 || cfg.Rounds > MaxRequests || cfg.Warmup < 0 {
		return nil, fmt.Errorf("%w: rounds must be 1..%d and warm-up rounds ≥ 0", ErrAB, MaxRequests)
	}
	bases := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		b, err := CheckTarget(t.URL, cfg.AllowRemote)
		if err != nil {
			return nil, err
		}
		bases[i] = b
	}
	w := &s.Workload
	if len(s.Tenants) > 0 && s.Tenants[0].Workload != nil {
		w = s.Tenants[0].Workload
	}
	if w.MultiTurn != nil {
		// Each server's answers would grow its own conversation: the rounds would no
		// longer send the same requests.
		return nil, fmt.Errorf("%w: a multi_turn workload cannot be compared request by request", ErrAB)
	}
	tr := cfg.Transport
	if tr == nil {
		t := newTransport(1)
		defer t.CloseIdleConnections()
		tr = t
	}
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	g := newGenerator(0, w, uint64(s.Seed))
	seed := max(cfg.Seed, 1)
	order := newRand(seed, 0xab)
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }

	stream := w.Stream == nil || *w.Stream
	n := len(cfg.Targets)
	ttft := make([][]float64, n) // per target, per measured round (ok says which succeeded)
	e2e := make([][]float64, n)
	ok := make([][]bool, n)
	for round := -cfg.Warmup; round < cfg.Rounds; round++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r := g.make()
		res := make([]Result, n)
		for _, i := range order.Perm(n) {
			rctx, cancel := context.WithTimeout(ctx, s.Timeout.D())
			res[i] = do(rctx, client, bases[i], cfg.Targets[i].APIKey, r, since)
			cancel()
		}
		if round < 0 {
			continue
		}
		for i := range res {
			ok[i] = append(ok[i], res[i].OK())
			ttft[i] = append(ttft[i], ms(res[i].TTFT))
			e2e[i] = append(e2e[i], ms(res[i].E2E))
		}
		if cfg.OnRound != nil {
			cfg.OnRound(round, res)
		}
	}
	rep := &ABReport{Rounds: cfg.Rounds}
	for i, t := range cfg.Targets {
		good := pick(e2e[i], ok[i])
		row := ABTargetRow{URL: t.URL, Errors: cfg.Rounds - len(good), E2Ep50: stats.Median(good)}
		if stream {
			row.TTFTp50 = stats.Median(pick(ttft[i], ok[i]))
		}
		if i > 0 {
			if stream {
				row.TTFTDiff = pairedDiff(diffs(ttft[i], ttft[0], ok[i], ok[0]), newRand(seed, uint64(i)))
			}
			row.E2EDiff = pairedDiff(diffs(e2e[i], e2e[0], ok[i], ok[0]), newRand(seed, uint64(i)+1<<32))
		}
		rep.Targets = append(rep.Targets, row)
	}
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pick returns x's values where ok holds.
func pick(x []float64, ok []bool) []float64 {
	var out []float64
	for j, v := range x {
		if ok[j] {
			out = append(out, v)
		}
	}
	return out
}

// diffs returns a[j] − b[j] over the rounds where both succeeded.
func diffs(a, b []float64, okA, okB []bool) []float64 {
	var out []float64
	for j := range a {
		if okA[j] && okB[j] {
			out = append(out, a[j]-b[j])
		}
	}
	return out
}

// bootstrapResamples is how many resamples pairedDiff's interval takes.
const bootstrapResamples = 2000

// pairedDiff is the median of d and its bootstrap 95% percentile interval, drawn
// from rng (so a seed reproduces it); nil when d is empty.
func pairedDiff(d []float64, rng *rand.Rand) *PairedDiff {
	if len(d) == 0 {
		return nil
	}
	meds := make([]float64, bootstrapResamples)
	s := make([]float64, len(d))
	for k := range meds {
		for j := range s {
			s[j] = d[rng.IntN(len(d))]
		}
		meds[k] = stats.Median(s)
	}
	slices.Sort(meds)
	return &PairedDiff{Pairs: len(d), Median: stats.Median(d),
		CILow: meds[bootstrapResamples*25/1000], CIHigh: meds[bootstrapResamples*975/1000-1]}
}

// WriteSummary prints the comparison as a table.
func (r *ABReport) WriteSummary(w io.Writer) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	p("%d rounds, each request sent to every target in a random order; differences from %s\n", r.Rounds, r.Targets[0].URL)
	p("%-32s %7s %12s %24s %12s %24s\n", "target", "errors", "TTFT p50 ms", "TTFT diff ms [95% CI]", "E2E p50 ms", "E2E diff ms [95% CI]")
	for i, t := range r.Targets {
		td, ed := "(reference)", "(reference)"
		if i > 0 {
			td, ed = "-", "-"
		}
		if t.TTFTDiff != nil {
			td = fmt.Sprintf("%+.2f [%+.2f, %+.2f]", t.TTFTDiff.Median, t.TTFTDiff.CILow, t.TTFTDiff.CIHigh)
		}
		if t.E2EDiff != nil {
			ed = fmt.Sprintf("%+.2f [%+.2f, %+.2f]", t.E2EDiff.Median, t.E2EDiff.CILow, t.E2EDiff.CIHigh)
		}
		tp, ep := fmt.Sprintf("%.2f", t.TTFTp50), fmt.Sprintf("%.2f", t.E2Ep50)
		if t.Errors == r.Rounds {
			tp, ep = "-", "-"
		}
		p("%-32s %7d %12s %24s %12s %24s\n", t.URL, t.Errors, tp, td, ep, ed)
	}
	return err
}
