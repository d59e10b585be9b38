package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/lmlite/lmlite/loadtest"
)

func init() {
	register("loadtest", "drive an OpenAI-compatible server with a scenario; report latency, throughput, fairness (also: loadtest compare A.json B.json; loadtest ab: servers side by side, request by request)", runLoadtest)
}

// errSLOMissed makes the exit status non-zero for release gating.
var errSLOMissed = errors.New("loadtest: SLO missed")

func runLoadtest(args []string) error {
	if len(args) > 0 && args[0] == "compare" {
		return runLoadtestCompare(args[1:])
	}
	if len(args) > 0 && args[0] == "ab" {
		return runLoadtestAB(args[1:])
	}
	fs := newFlags("loadtest")
	var (
		scenario    = fs.String("scenario", "", "scenario YAML file (see loadtest/scenarios/README.md)")
		target      = fs.String("target", "http://127.0.0.1:8080", "the server's root URL")
		apiKey      = fs.String("api-key", "", "one key for every tenant (default: each tenant's api_key or api_key_env)")
		duration    = fs.Duration("duration", 0, "measured duration, replacing the scenario's bounds (max "+loadtest.MaxDuration.String()+")")
		requests    = fs.Int("requests", 0, "measured request count, replacing the scenario's bounds")
		slo         = fs.String("slo", "", "release-gating targets, e.g. ttft_p99=500ms,e2e_p90=2s,error_rate=1%,rps=5,fairness=0.9 (TENANT:metric=... for one tenant); exit status 1 when one is missed")
		out         = fs.String("out", "", "directory for report.json and report.html (required)")
		allowRemote = fs.Bool("allow-remote", false, "allow a target that is not on loopback")
		quiet       = fs.Bool("quiet", false, "no live progress line")
		perRequest  = fs.Bool("per-request", false, "also write every request's measurements to DIR/requests.jsonl")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scenario == "" || *out == "" {
		fmt.Fprintln(fs.Output(), "--scenario and --out are required")
		return errUsage
	}
	if _, err := loadtest.CheckTarget(*target, *allowRemote); err != nil {
		return err
	}
	sc, err := loadtest.LoadScenario(*scenario)
	if err != nil {
		return err
	}
	if *duration < 0 || *requests < 0 {
		return errors.New("loadtest: --duration and --requests must not be negative")
	}
	if *duration > 0 || *requests > 0 {
		sc.Duration, sc.Requests = loadtest.Dur(*duration), *requests
		if err := sc.Normalize(); err != nil {
			return err
		}
	}
	slos, err := loadtest.ParseSLOs(*slo)
	if err != nil {
		return err
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	cfg := loadtest.Config{Scenario: sc, Target: *target, APIKey: *apiKey, AllowRemote: *allowRemote, Goodput: loadtest.GoodputFrom(slos)}
	if !*quiet {
		cfg.Progress = progressPrinter()
	}
	closeLog := func() error { return nil }
	if *perRequest {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return fmt.Errorf("loadtest: %w", err)
		}
		f, err := os.Create(filepath.Join(*out, "requests.jsonl"))
		if err != nil {
			return fmt.Errorf("loadtest: %w", err)
		}
		bw := bufio.NewWriter(f)
		enc := json.NewEncoder(bw)
		var werr error
		cfg.OnResult = func(r *loadtest.Result) {
			if werr == nil {
				werr = enc.Encode(r.Record(sc.Tenants[r.Tenant].Name))
			}
		}
		closeLog = func() error {
			if werr == nil {
				werr = bw.Flush()
			}
			if err := f.Close(); werr == nil {
				werr = err
			}
			if werr != nil {
				return fmt.Errorf("loadtest: writing requests.jsonl: %w", werr)
			}
			return nil
		}
	}
	fmt.Fprintf(os.Stderr, "loadtest %s → %s: warm-up %s, then up to %s or %d requests\n",
		sc.Name, *target, sc.Warmup.D(), sc.Duration.D(), sc.Requests)
	rep, err := loadtest.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := closeLog(); err != nil {
		return err
	}
	met := rep.CheckSLOs(slos)
	if err := rep.WriteFiles(*out); err != nil {
		return err
	}
	if err := rep.WriteSummary(os.Stdout); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s\n", filepath.Join(*out, "report.json"), filepath.Join(*out, "report.html"))
	if !met {
		var missed []string
		for _, s := range rep.SLO {
			if !s.Met {
				missed = append(missed, s.Spec)
			}
		}
		return fmt.Errorf("%w: %s", errSLOMissed, strings.Join(missed, ", "))
	}
	return nil
}

// progressPrinter returns a Progress callback that keeps one live line on a
// terminal and prints a line every five seconds elsewhere (logs, CI).
func progressPrinter() func(loadtest.Progress) {
	tty := false
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		tty = true
	}
	var last time.Duration = -time.Hour
	return func(p loadtest.Progress) {
		switch {
		case tty && p.Final:
			fmt.Fprintf(os.Stderr, "\r%s\n", p)
		case tty:
			fmt.Fprintf(os.Stderr, "\r%s ", p)
		case p.Final || p.Elapsed-last >= 5*time.Second:
			last = p.Elapsed
			fmt.Fprintln(os.Stderr, p)
		}
	}
}

func runLoadtestCompare(args []string) error {
	fs := newFlags("loadtest compare")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errUsage
	}
	a, err := loadtest.ReadReport(fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := loadtest.ReadReport(fs.Arg(1))
	if err != nil {
		return err
	}
	// Differing scenarios are named on stderr too, where a script's log sees them
	// even when the table goes to a file; Compare repeats them above the table.
	if diffs := loadtest.ScenarioDiffs(a, b, "A", "B"); len(diffs) > 0 {
		fmt.Fprintf(stderr, "lmlite loadtest compare: warning: %s and %s are not like for like:\n", fs.Arg(0), fs.Arg(1))
		for _, d := range diffs {
			fmt.Fprintf(stderr, "  - %s\n", d)
		}
	}
	fmt.Fprintf(stdout, "A = %s (%s)\nB = %s (%s)\n", fs.Arg(0), a.Meta.Target, fs.Arg(1), b.Meta.Target)
	return loadtest.Compare(stdout, a, b, "A", "B")
}

// repeated is a flag that may be given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// runLoadtestAB is `lmlite loadtest ab`: an interleaved comparison (loadtest.RunAB).
func runLoadtestAB(args []string) error {
	fs := newFlags("loadtest ab")
	var targets, keys repeated
	fs.Var(&targets, "target", "a server's root URL; give it two or more times (the first is the reference)")
	fs.Var(&keys, "api-key", "the key: once for every target, or once per target in --target's order")
	var (
		scenario    = fs.String("scenario", "", "scenario YAML file: its workload shapes the requests (its arrival and bounds are not used)")
		rounds      = fs.Int("rounds", 100, "measured rounds: each sends one request to every target, one at a time, in a random order")
		warmup      = fs.Int("warmup-rounds", 3, "rounds sent first and left out")
		seed        = fs.Uint64("seed", 1, "orders the targets within each round")
		out         = fs.String("out", "", "directory for ab.json and rounds.jsonl (every round's TTFT and end-to-end ms per target; optional)")
		allowRemote = fs.Bool("allow-remote", false, "allow targets that are not on loopback")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scenario == "" || len(targets) < 2 || (len(keys) > 1 && len(keys) != len(targets)) {
		fmt.Fprintln(fs.Output(), "--scenario and two or more --target are required; --api-key once or once per target")
		return errUsage
	}
	sc, err := loadtest.LoadScenario(*scenario)
	if err != nil {
		return err
	}
	cfg := loadtest.ABConfig{Scenario: sc, Rounds: *rounds, Warmup: *warmup, Seed: *seed, AllowRemote: *allowRemote}
	for i, t := range targets {
		var k string
		switch len(keys) {
		case 1:
			k = keys[0]
		case len(targets):
			k = keys[i]
		}
		cfg.Targets = append(cfg.Targets, loadtest.ABTarget{URL: t, APIKey: k})
	}
	var perRound []abRound
	if *out != "" {
		cfg.OnRound = func(_ int, res []loadtest.Result) {
			r := abRound{TTFT: make([]float64, len(res)), E2E: make([]float64, len(res)), OK: make([]bool, len(res))}
			for i, x := range res {
				r.TTFT[i], r.E2E[i], r.OK[i] = ms(x.TTFT), ms(x.E2E), x.OK()
			}
			perRound = append(perRound, r)
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	fmt.Fprintf(os.Stderr, "loadtest ab %s: %d targets, %d rounds after %d warm-up rounds\n", sc.Name, len(targets), *rounds, *warmup)
	rep, err := loadtest.RunAB(ctx, cfg)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return fmt.Errorf("loadtest: %w", err)
		}
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*out, "ab.json"), append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("loadtest: %w", err)
		}
		var lines []byte
		for _, r := range perRound {
			l, _ := json.Marshal(r)
			lines = append(append(lines, l...), '\n')
		}
		if err := os.WriteFile(filepath.Join(*out, "rounds.jsonl"), lines, 0o644); err != nil {
			return fmt.Errorf("loadtest: %w", err)
		}
	}
	return rep.WriteSummary(stdout)
}

// abRound is one line of rounds.jsonl: a round's measurements in --target's order.
type abRound struct {
	TTFT []float64 `json:"ttft_ms"`
	E2E  []float64 `json:"e2e_ms"`
	OK   []bool    `json:"ok"`
}
