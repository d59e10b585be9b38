package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrRemote is returned for a target that is not on loopback when remote targets
// were not allowed.
var ErrRemote = errors.New("loadtest: target is not on loopback (127.0.0.0/8, ::1, localhost); pass --allow-remote to load a remote server")

// CheckTarget parses the server's root URL and refuses a host off loopback unless
// allowRemote. It returns the root without a trailing slash.
func CheckTarget(raw string, allowRemote bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("loadtest: target: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("loadtest: target %q: scheme must be http or https", raw)
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("loadtest: target %q: want the server's root, like http://127.0.0.1:8080", raw)
	}
	if !allowRemote && !IsLoopback(u.Hostname()) {
		return "", fmt.Errorf("%w: %s", ErrRemote, u.Hostname())
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// IsLoopback tells whether host (a name or an IP literal, without port) is
// localhost or a loopback address. Names other than localhost are not resolved: a
// name could point anywhere.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Config is one run.
type Config struct {
	Scenario *Scenario // normalized (LoadScenario and ParseScenario do it)
	Target   string    // the server's root URL, e.g. http://127.0.0.1:8080
	// APIKey, when set, is every tenant's key; otherwise each tenant's api_key_env
	// (when that variable is set) or api_key. A tenant with neither sends no
	// Authorization header.
	APIKey      string
	AllowRemote bool
	// Goodput limits when the scenario sets none (see GoodputFrom).
	Goodput GoodputSLO
	// Progress, when set, is called every ProgressEvery (default 1s) from a
	// goroutine of the run, and once at the end.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// OnResult, when set, sees every result (warm-up ones too) as it is
	// aggregated, from one goroutine; e.g. to log per-request records.
	OnResult func(*Result)
	// Transport replaces the default load-generation transport (tests).
	Transport http.RoundTripper
	// Getenv replaces os.Getenv for api_key_env (tests).
	Getenv func(string) string
}

// Progress is a run's state for the live progress line.
type Progress struct {
	Elapsed  time.Duration
	Warmup   bool // still warming up
	Sent     int  // requests sent, warm-up included
	Done     int  // requests finished, warm-up included
	InFlight int
	Errors   int // finished requests that failed, warm-up included
	Final    bool
}

func (p Progress) String() string {
	phase := "load"
	if p.Warmup {
		phase = "warm-up"
	}
	return fmt.Sprintf("%6.1fs %-7s sent %d done %d in-flight %d errors %d", p.Elapsed.Seconds(), phase, p.Sent, p.Done, p.InFlight, p.Errors)
}

// stop reasons of Meta.StoppedBy.
const (
	StopDuration  = "duration"
	StopRequests  = "requests"
	StopInterrupt = "interrupt"
)

// Run drives the scenario against the target and returns its report. It stops
// issuing at the scenario's duration or request count (whichever comes first) or
// when ctx ends; requests still in flight then get the scenario's drain period
// (none after ctx ends) and are cancelled after it. A run therefore never lasts
// longer than warmup + duration + drain.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Scenario != nil && cfg.Scenario.Batch != nil {
		return runBesideBatch(ctx, cfg)
	}
	return run(ctx, cfg)
}

// run is one run of the scenario's interactive traffic.
func run(ctx context.Context, cfg Config) (*Report, error) {
	s := cfg.Scenario
	if s == nil {
		return nil, errors.New("loadtest: no scenario")
	}
	base, err := CheckTarget(cfg.Target, cfg.AllowRemote)
	if err != nil {
		return nil, err
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	n := len(s.Tenants)
	names := make([]string, n)
	weights := make([]float64, n)
	keys := make([]string, n)
	wsum := 0.0
	for i, t := range s.Tenants {
		names[i], weights[i] = t.Name, t.Weight
		if t.Arrival == nil {
			wsum += t.Weight
		}
		switch {
		case cfg.APIKey != "":
			keys[i] = cfg.APIKey
		case t.APIKeyEnv != "" && getenv(t.APIKeyEnv) != "":
			keys[i] = getenv(t.APIKeyEnv)
		case t.APIKey != "":
			keys[i] = t.APIKey
		case t.APIKeyEnv != "":
			return nil, fmt.Errorf("loadtest: tenant %q: environment variable %s is empty and no api_key is given", t.Name, t.APIKeyEnv)
		}
	}
	goodput := s.Goodput
	if goodput == (GoodputSLO{}) {
		goodput = cfg.Goodput
	}

	tr := cfg.Transport
	if tr == nil {
		t := newTransport(s.Concurrency)
		defer t.CloseIdleConnections()
		tr = t
	}
	client := &http.Client{
		Transport: tr,
		// A redirect could lead off loopback: never follow one.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	warmup := s.Warmup.D()
	issueEnd := warmup + s.Duration.D()
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }

	// issueCtx ends when no more requests may start; flightCtx when the ones in
	// flight must stop.
	issueCtx, stopIssuing := context.WithDeadline(ctx, start.Add(issueEnd))
	defer stopIssuing()
	flightCtx, cancelFlight := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlight()
	var stopOnce sync.Once
	stoppedBy := StopDuration
	stop := func(why string) {
		stopOnce.Do(func() { stoppedBy = why })
		stopIssuing()
	}

	var (
		sent, done, failed atomic.Int64
		measured           atomic.Int64 // measured requests issued (the request cap counts these)
		sem                = make(chan struct{}, s.Concurrency)
		wg                 sync.WaitGroup
		results            = make(chan Result, 1024)
	)
	// admit reserves a measured request under the cap; false stops issuing.
	admit := func(at time.Duration) (warm, ok bool) {
		if at < warmup {
			return true, true
		}
		k := measured.Add(1)
		if k > int64(s.Requests) {
			stop(StopRequests)
			return false, false
		}
		if k == int64(s.Requests) {
			defer stop(StopRequests)
		}
		return false, true
	}
	// send makes and sends one request; at is its scheduled time (open loop) or
	// -1 (closed loop, where a request goes when its user is ready).
	send := func(g *generator, key string, warm bool, at time.Duration) {
		r := g.make()
		rctx, cancel := context.WithTimeout(flightCtx, s.Timeout.D())
		res := do(rctx, client, base, key, r, since)
		cancel()
		if res.Class == ErrTransport && flightCtx.Err() != nil {
			res.Class = ErrCancelled
		}
		res.Warmup = warm
		if at >= 0 && res.Start > at {
			res.Lag = res.Start - at
		}
		g.finish(r, res.Text, res.OK())
		done.Add(1)
		if !res.OK() {
			failed.Add(1)
		}
		results <- res
	}

	for i, t := range s.Tenants {
		w := &s.Workload
		if t.Workload != nil {
			w = t.Workload
		}
		g := newGenerator(i, w, uint64(s.Seed))
		a := s.Arrival.share(t.Weight / wsum)
		if t.Arrival != nil {
			a = *t.Arrival
		}
		key := keys[i]
		if a.Type == ArrivalClosed {
			for u := 0; u < a.Users; u++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					think := time.NewTimer(0)
					defer think.Stop()
					for issueCtx.Err() == nil {
						select {
						case sem <- struct{}{}:
						case <-issueCtx.Done():
							return
						}
						warm, ok := admit(since())
						if !ok {
							<-sem
							return
						}
						sent.Add(1)
						send(g, key, warm, -1)
						<-sem
						if a.ThinkTime > 0 {
							think.Reset(a.ThinkTime.D())
							select {
							case <-think.C:
							case <-issueCtx.Done():
								return
							}
						}
					}
				}()
			}
			continue
		}
		sch := newSchedule(a, newRand(uint64(s.Seed), uint64(i)+1000))
		wg.Add(1)
		go func() {
			defer wg.Done()
			timer := time.NewTimer(0)
			defer timer.Stop()
			for {
				at := sch.next()
				if at >= issueEnd {
					return
				}
				if d := at - since(); d > 0 {
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-issueCtx.Done():
						return
					}
				}
				if issueCtx.Err() != nil {
					return
				}
				warm, ok := admit(at)
				if !ok {
					return
				}
				sent.Add(1)
				select {
				case sem <- struct{}{}:
				default:
					done.Add(1)
					failed.Add(1)
					results <- Result{Tenant: i, Start: at, Warmup: warm, Stream: *w.Stream, Class: ErrDropped}
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					send(g, key, warm, at)
				}()
			}
		}()
	}

	coll := NewCollector(names, weights, warmup, goodput)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for r := range results {
			coll.Add(&r)
			if cfg.OnResult != nil {
				cfg.OnResult(&r)
			}
		}
	}()
	progress := func(final bool) {
		if cfg.Progress == nil {
			return
		}
		el := since()
		cfg.Progress(Progress{Elapsed: el, Warmup: el < warmup, Sent: int(sent.Load()), Done: int(done.Load()),
			InFlight: int(sent.Load() - done.Load()), Errors: int(failed.Load()), Final: final})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	every := cfg.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var drain <-chan time.Time
	issuing := issueCtx.Done()
wait:
	for {
		select {
		case <-issuing:
			issuing = nil
			if ctx.Err() != nil {
				stop(StopInterrupt)
				cancelFlight()
			} else {
				drain = time.After(s.Drain.D())
			}
		case <-drain:
			drain = nil
			cancelFlight()
		case <-tick.C:
			progress(false)
		case <-allDone:
			break wait
		}
	}
	close(results)
	<-collected
	progress(true)
	rep := coll.Report(Meta{Scenario: s.Name, Description: s.Description, Target: base, Started: start.UTC().Truncate(time.Millisecond),
		StoppedBy: stoppedBy, TenantOrder: names, Spec: s.Spec()})
	return rep, nil
}
