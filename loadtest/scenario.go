package loadtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Hard upper bounds of any run. A scenario or command line asking for more is
// refused: a load test is always bounded in time and in count.
const (
	MaxDuration    = 30 * time.Minute // longest measured window
	MaxWarmup      = 5 * time.Minute  // longest warm-up
	MaxRequests    = 1_000_000        // most measured requests
	MaxConcurrency = 4096             // most requests in flight at once

	// DefaultDuration bounds a run given only a request count.
	DefaultDuration = 10 * time.Minute
	// DefaultRequests bounds a run given only a duration.
	DefaultRequests = 100_000
	// DefaultConcurrency caps requests in flight when the scenario names none.
	DefaultConcurrency = 256
	// DefaultTimeout is one request's limit when the scenario names none.
	DefaultTimeout = 60 * time.Second
	// DefaultDrain is how long in-flight requests may finish after the bound.
	DefaultDrain = 30 * time.Second
)

// ErrScenario is wrapped by every error about a scenario's content.
var ErrScenario = errors.New("loadtest: invalid scenario")

// Scenario is one load-test workload, read from YAML (see loadtest/scenarios/README.md
// for every field). Zero values mean the defaults the fields' comments name.
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`

	// Duration of the measured window (after warm-up) and/or the number of
	// measured requests. At least one is required; the other takes its default.
	Duration Dur `yaml:"duration"`
	Requests int `yaml:"requests"`
	// Warmup runs the load for this long before measuring; its requests are sent
	// but left out of the report.
	Warmup Dur `yaml:"warmup"`
	// Concurrency caps requests in flight (default DefaultConcurrency). An open-loop
	// arrival that finds the cap full is dropped and counted under errors["dropped"].
	Concurrency int `yaml:"concurrency"`
	// Timeout bounds one request (default DefaultTimeout).
	Timeout Dur `yaml:"timeout"`
	// Drain is how long in-flight requests may finish after the bound (default
	// DefaultDrain, at most Timeout); any still running are then cancelled.
	Drain Dur `yaml:"drain"`
	// Seed makes prompts, lengths and arrivals reproducible (default 1).
	Seed int64 `yaml:"seed"`

	// Arrival is the default arrival process. Its rate (open loop) or users
	// (closed loop) is the total, split between the tenants that have no arrival of
	// their own in proportion to their weights.
	Arrival Arrival `yaml:"arrival"`
	// Workload is the default request shape for every tenant.
	Workload Workload `yaml:"workload"`
	// Tenants send the traffic; at least one.
	Tenants []Tenant `yaml:"tenants"`
	// Goodput are per-request latency limits: a request is good when it succeeded
	// within all of them. Empty limits come from the command's --slo latency targets.
	Goodput GoodputSLO `yaml:"goodput"`
	// Batch, when set, runs the scenario twice: once as is (the baseline), then again
	// while a batch job (OpenAI's Batch API) runs beside it; the report is the second
	// run's, with both runs' interactive TTFT in Report.Batch.
	Batch *BatchSpec `yaml:"batch"`
}

// BatchSpec is the batch job a scenario runs beside its interactive traffic.
type BatchSpec struct {
	Lines     int    `yaml:"lines"`       // chat completion lines in the input file (≤ 50,000)
	Model     string `yaml:"model"`       // their model (or tier / auto)
	APIKeyEnv string `yaml:"api_key_env"` // the key the job is made with (the command's --api-key overrides)
	APIKey    string `yaml:"api_key"`
	// PromptWords and MaxTokens shape every line: a user message of PromptWords words
	// (the lines share no prefix) and max_tokens.
	PromptWords int `yaml:"prompt_words"`
	MaxTokens   int `yaml:"max_tokens"`
}

// Tenant is one client of the target with its own key.
type Tenant struct {
	Name string `yaml:"name"`
	// APIKeyEnv names an environment variable holding the key; when it is unset or
	// empty, APIKey is the key. The command's --api-key overrides both for every
	// tenant.
	APIKey    string `yaml:"api_key"`
	APIKeyEnv string `yaml:"api_key_env"`
	// Weight is the tenant's entitled share (default 1): it splits the scenario's
	// arrival between tenants and is the yardstick of the fairness index.
	Weight float64 `yaml:"weight"`
	// Arrival replaces the scenario's arrival for this tenant alone (its rate or
	// users are then this tenant's own).
	Arrival *Arrival `yaml:"arrival"`
	// Workload replaces the scenario's workload for this tenant alone.
	Workload *Workload `yaml:"workload"`
}

// Arrival kinds.
const (
	ArrivalConstant = "constant" // evenly spaced at Rate per second
	ArrivalPoisson  = "poisson"  // exponential gaps with mean 1/Rate
	ArrivalBursts   = "bursts"   // BurstSize requests at once every BurstEvery, plus Poisson at Rate between
	ArrivalClosed   = "closed"   // Users each send, wait for the answer, think, send again
)

// Arrival is when requests are sent.
type Arrival struct {
	Type       string  `yaml:"type"`
	Rate       float64 `yaml:"rate"`        // requests per second (open loop)
	BurstSize  int     `yaml:"burst_size"`  // bursts: requests per burst
	BurstEvery Dur     `yaml:"burst_every"` // bursts: period
	Users      int     `yaml:"users"`       // closed: concurrent users
	ThinkTime  Dur     `yaml:"think_time"`  // closed: pause between a user's requests
}

// APIs the workload can call.
const (
	APIChat        = "chat"        // POST /v1/chat/completions
	APICompletions = "completions" // POST /v1/completions
)

// Workload is the shape of each request.
type Workload struct {
	API   string `yaml:"api"`   // chat (default) or completions
	Model string `yaml:"model"` // the body's model field (default "default")
	// Stream asks for SSE (default true); usage is requested in the final chunk.
	Stream *bool `yaml:"stream"`
	// PromptTokens and OutputTokens are length distributions. Prompt lengths count
	// words of generated text (about one token each); output lengths are max_tokens.
	PromptTokens Dist `yaml:"prompt_tokens"`
	OutputTokens Dist `yaml:"output_tokens"`
	// SharedPrefix puts one of a few fixed system prompts before a fraction of the
	// prompts, as a prefix cache would see them.
	SharedPrefix *SharedPrefix `yaml:"shared_prefix"`
	// MultiTurn makes chats that grow: each request continues one of a tenant's
	// conversations with the earlier turns and answers before the new message.
	MultiTurn *MultiTurn `yaml:"multi_turn"`
	// Tiers picks the lmlite tier options per request, by weight; empty sends none.
	Tiers []TierChoice `yaml:"tiers"`
	// TierVia sends tier options as the body's "lmlite" object (body, default) or
	// as X-LMLite-* headers (headers).
	TierVia string `yaml:"tier_via"`
	// Temperature is sent as is (default 0: greedy, reproducible).
	Temperature float64 `yaml:"temperature"`
	// Extra fields merged into every request body (e.g. ignore_eos for peers that
	// know it).
	Extra map[string]any `yaml:"extra"`
}

// SharedPrefix describes the shared system prompts.
type SharedPrefix struct {
	Fraction float64 `yaml:"fraction"` // share of requests that carry one (0..1)
	Tokens   int     `yaml:"tokens"`   // length of each prefix in words
	Count    int     `yaml:"count"`    // distinct prefixes (default 1)
}

// MultiTurn describes growing chats.
type MultiTurn struct {
	Turns         int `yaml:"turns"`         // turns per conversation before it restarts (>= 2)
	Conversations int `yaml:"conversations"` // parallel conversations per tenant (default 8)
}

// Tier modes of lmlite's router.
var tierModes = map[string]bool{"": true, "balanced": true, "deep": true, "max": true, "fixed": true}

// TierChoice is one weighted set of tier options.
type TierChoice struct {
	Weight       float64 `yaml:"weight"`         // default 1
	Mode         string  `yaml:"tier_mode"`      // balanced, deep, max or fixed
	Tier         string  `yaml:"tier"`           // with fixed: the tier; otherwise the highest aimed at
	MaxLatencyMS int     `yaml:"max_latency_ms"` // 0: none
	MaxCostUSD   float64 `yaml:"max_cost_usd"`   // 0: none
}

// Label names the options for the report, e.g. "balanced max_latency_ms=300" or
// "fixed tier=fast".
func (c TierChoice) Label() string {
	var parts []string
	if c.Mode != "" {
		parts = append(parts, c.Mode)
	}
	if c.Tier != "" {
		parts = append(parts, "tier="+c.Tier)
	}
	if c.MaxLatencyMS > 0 {
		parts = append(parts, "max_latency_ms="+strconv.Itoa(c.MaxLatencyMS))
	}
	if c.MaxCostUSD > 0 {
		parts = append(parts, "max_cost_usd="+strconv.FormatFloat(c.MaxCostUSD, 'f', -1, 64))
	}
	if len(parts) == 0 {
		return "default"
	}
	return strings.Join(parts, " ")
}

// GoodputSLO holds per-request latency limits in milliseconds (0: no limit).
type GoodputSLO struct {
	TTFTms float64 `yaml:"ttft_ms" json:"ttft_ms,omitempty"`
	ITLms  float64 `yaml:"itl_ms" json:"itl_ms,omitempty"` // limit on the request's mean inter-token latency
	E2Ems  float64 `yaml:"e2e_ms" json:"e2e_ms,omitempty"`
}

// Dist kinds.
const (
	DistFixed     = "fixed"
	DistUniform   = "uniform"
	DistNormal    = "normal"
	DistLognormal = "lognormal"
)

// Dist is a distribution of positive integer lengths. A bare number in YAML means
// fixed. Draws are clamped to [Min, Max] when those are set, and to at least 1.
type Dist struct {
	Kind   string  `yaml:"dist"`
	Value  int     `yaml:"value"`  // fixed
	Min    int     `yaml:"min"`    // uniform, and a floor for the others
	Max    int     `yaml:"max"`    // uniform, and a ceiling for the others
	Mean   float64 `yaml:"mean"`   // normal, lognormal (mean of the lengths)
	StdDev float64 `yaml:"stddev"` // normal, lognormal (of the lengths)
}

// UnmarshalYAML accepts a bare integer as a fixed length.
func (d *Dist) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var v int
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("%w: length %q: %w", ErrScenario, n.Value, err)
		}
		*d = Dist{Kind: DistFixed, Value: v}
		return nil
	}
	type plain Dist
	return n.Decode((*plain)(d))
}

// Dur is a time.Duration written in YAML as "30s", "1m30s" or "500ms".
type Dur time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Dur) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%w: duration %q: %w", ErrScenario, n.Value, err)
	}
	*d = Dur(v)
	return nil
}

// D returns the time.Duration.
func (d Dur) D() time.Duration { return time.Duration(d) }

// MarshalYAML writes the duration as UnmarshalYAML reads it.
func (d Dur) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Spec returns the scenario as its YAML fields (after defaults) without the
// tenants' keys: what the report keeps of it so that two reports can be checked
// for running the same workload (ScenarioDiffs).
func (s *Scenario) Spec() map[string]any {
	c := *s
	c.Tenants = make([]Tenant, len(s.Tenants))
	for i, t := range s.Tenants {
		t.APIKey, t.APIKeyEnv = "", "" // a key is a secret; where it came from is not the workload
		c.Tenants[i] = t
	}
	b, err := yaml.Marshal(&c)
	if err != nil {
		return nil // cannot happen: every field marshals
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil
	}
	delete(m, "description")
	if ts, ok := m["tenants"].([]any); ok {
		for _, t := range ts {
			if t, ok := t.(map[string]any); ok {
				delete(t, "api_key")
				delete(t, "api_key_env")
			}
		}
	}
	return m
}

// LoadScenario reads and validates a scenario file.
func LoadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	s, err := ParseScenario(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseScenario decodes YAML (unknown fields are errors), fills defaults and
// validates. It never panics on bad input.
func ParseScenario(b []byte) (*Scenario, error) {
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, ErrScenario) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrScenario, err)
	}
	if err := s.Normalize(); err != nil {
		return nil, err
	}
	return &s, nil
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrScenario, fmt.Sprintf(format, a...))
}

// Normalize fills defaults and checks every field; call it again after changing
// the bounds (the command does, for --duration and --requests).
func (s *Scenario) Normalize() error {
	if b := s.Batch; b != nil {
		switch {
		case b.Lines < 1 || b.Lines > 50000:
			return bad("batch.lines must be 1 to 50000")
		case b.Model == "":
			return bad("batch.model is required")
		case b.PromptWords < 0 || b.MaxTokens < 0:
			return bad("negative batch.prompt_words or batch.max_tokens")
		}
		if b.PromptWords == 0 {
			b.PromptWords = 32
		}
		if b.MaxTokens == 0 {
			b.MaxTokens = 32
		}
	}
	if s.Duration < 0 || s.Requests < 0 || s.Warmup < 0 || s.Timeout < 0 || s.Drain < 0 {
		return bad("negative duration, requests, warmup, timeout or drain")
	}
	if s.Duration == 0 && s.Requests == 0 {
		return bad("a duration or a request count is required (runs are always bounded)")
	}
	if s.Duration == 0 {
		s.Duration = Dur(DefaultDuration)
	}
	if s.Requests == 0 {
		s.Requests = DefaultRequests
	}
	if s.Duration.D() > MaxDuration {
		return bad("duration %s exceeds the hard limit %s", s.Duration.D(), MaxDuration)
	}
	if s.Requests > MaxRequests {
		return bad("requests %d exceeds the hard limit %d", s.Requests, MaxRequests)
	}
	if s.Warmup.D() > MaxWarmup {
		return bad("warmup %s exceeds the hard limit %s", s.Warmup.D(), MaxWarmup)
	}
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency
	}
	if s.Concurrency < 0 || s.Concurrency > MaxConcurrency {
		return bad("concurrency %d outside 1..%d", s.Concurrency, MaxConcurrency)
	}
	if s.Timeout == 0 {
		s.Timeout = Dur(DefaultTimeout)
	}
	if s.Drain == 0 {
		s.Drain = Dur(DefaultDrain)
	}
	if s.Drain > s.Timeout {
		s.Drain = s.Timeout
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Goodput.TTFTms < 0 || s.Goodput.ITLms < 0 || s.Goodput.E2Ems < 0 {
		return bad("negative goodput limit")
	}
	if len(s.Tenants) == 0 {
		return bad("no tenants")
	}
	if err := s.Workload.normalize("workload"); err != nil {
		return err
	}
	needShared := false
	seen := map[string]bool{}
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if t.Name == "" {
			return bad("tenant %d has no name", i)
		}
		if seen[t.Name] {
			return bad("tenant %q named twice", t.Name)
		}
		seen[t.Name] = true
		if t.Weight == 0 {
			t.Weight = 1
		}
		if !(t.Weight > 0) || t.Weight > 1e6 {
			return bad("tenant %q: weight %v outside (0, 1e6]", t.Name, t.Weight)
		}
		if t.Arrival != nil {
			if err := t.Arrival.validate("tenant " + t.Name); err != nil {
				return err
			}
		} else {
			needShared = true
		}
		if t.Workload != nil {
			if err := t.Workload.normalize("tenant " + t.Name + " workload"); err != nil {
				return err
			}
		}
	}
	if needShared {
		if err := s.Arrival.validate("arrival"); err != nil {
			return err
		}
	}
	return nil
}

func (a *Arrival) validate(where string) error {
	switch a.Type {
	case ArrivalConstant, ArrivalPoisson:
		if !(a.Rate > 0) || a.Rate > 1e5 {
			return bad("%s: rate %v outside (0, 1e5]", where, a.Rate)
		}
	case ArrivalBursts:
		if !(a.Rate >= 0) || a.Rate > 1e5 {
			return bad("%s: rate %v outside [0, 1e5]", where, a.Rate)
		}
		if a.BurstSize < 1 || a.BurstSize > MaxConcurrency {
			return bad("%s: burst_size %d outside 1..%d", where, a.BurstSize, MaxConcurrency)
		}
		if a.BurstEvery.D() < time.Millisecond {
			return bad("%s: burst_every must be at least 1ms", where)
		}
	case ArrivalClosed:
		if a.Users < 1 || a.Users > MaxConcurrency {
			return bad("%s: users %d outside 1..%d", where, a.Users, MaxConcurrency)
		}
		if a.ThinkTime < 0 {
			return bad("%s: negative think_time", where)
		}
	case "":
		return bad("%s: arrival type missing (constant, poisson, bursts or closed)", where)
	default:
		return bad("%s: unknown arrival type %q", where, a.Type)
	}
	return nil
}

func (w *Workload) normalize(where string) error {
	switch w.API {
	case "":
		w.API = APIChat
	case APIChat, APICompletions:
	default:
		return bad("%s: api %q is not chat or completions", where, w.API)
	}
	if w.Model == "" {
		w.Model = "default"
	}
	if w.Stream == nil {
		t := true
		w.Stream = &t
	}
	if w.PromptTokens.Kind == "" && w.PromptTokens.Value == 0 {
		w.PromptTokens = Dist{Kind: DistFixed, Value: 32}
	}
	if w.OutputTokens.Kind == "" && w.OutputTokens.Value == 0 {
		w.OutputTokens = Dist{Kind: DistFixed, Value: 32}
	}
	if err := w.PromptTokens.validate(where + ": prompt_tokens"); err != nil {
		return err
	}
	if err := w.OutputTokens.validate(where + ": output_tokens"); err != nil {
		return err
	}
	if p := w.SharedPrefix; p != nil {
		if !(p.Fraction >= 0 && p.Fraction <= 1) {
			return bad("%s: shared_prefix fraction %v outside [0, 1]", where, p.Fraction)
		}
		if p.Tokens < 1 || p.Tokens > maxLength {
			return bad("%s: shared_prefix tokens %d outside 1..%d", where, p.Tokens, maxLength)
		}
		if p.Count == 0 {
			p.Count = 1
		}
		if p.Count < 1 || p.Count > 1000 {
			return bad("%s: shared_prefix count %d outside 1..1000", where, p.Count)
		}
	}
	if m := w.MultiTurn; m != nil {
		if w.API != APIChat {
			return bad("%s: multi_turn needs api chat", where)
		}
		if m.Turns < 2 || m.Turns > 100 {
			return bad("%s: multi_turn turns %d outside 2..100", where, m.Turns)
		}
		if m.Conversations == 0 {
			m.Conversations = 8
		}
		if m.Conversations < 1 || m.Conversations > MaxConcurrency {
			return bad("%s: multi_turn conversations %d outside 1..%d", where, m.Conversations, MaxConcurrency)
		}
	}
	for i := range w.Tiers {
		c := &w.Tiers[i]
		if c.Weight == 0 {
			c.Weight = 1
		}
		if !(c.Weight > 0) || c.Weight > 1e6 {
			return bad("%s: tiers[%d] weight %v outside (0, 1e6]", where, i, c.Weight)
		}
		if !tierModes[c.Mode] {
			return bad("%s: tiers[%d] tier_mode %q is not balanced, deep, max or fixed", where, i, c.Mode)
		}
		if c.Mode == "fixed" && c.Tier == "" {
			return bad("%s: tiers[%d] tier_mode fixed needs a tier", where, i)
		}
		if c.MaxLatencyMS < 0 || !(c.MaxCostUSD >= 0) {
			return bad("%s: tiers[%d] negative budget", where, i)
		}
	}
	switch w.TierVia {
	case "":
		w.TierVia = "body"
	case "body", "headers":
	default:
		return bad("%s: tier_via %q is not body or headers", where, w.TierVia)
	}
	if !(w.Temperature >= 0 && w.Temperature <= 2) {
		return bad("%s: temperature %v outside [0, 2]", where, w.Temperature)
	}
	for k := range w.Extra {
		switch strings.ToLower(k) {
		case "model", "messages", "prompt", "stream", "stream_options", "max_tokens", "lmlite":
			return bad("%s: extra may not set %q", where, k)
		}
	}
	return nil
}

// maxLength bounds every length distribution (prompt words, output tokens).
const maxLength = 1 << 17

func (d *Dist) validate(where string) error {
	if d.Kind == "" {
		d.Kind = DistFixed
	}
	if d.Min < 0 || d.Max < 0 || d.Max > maxLength || d.Min > maxLength || (d.Max > 0 && d.Min > d.Max) {
		return bad("%s: min/max %d/%d outside 0..%d or crossed", where, d.Min, d.Max, maxLength)
	}
	switch d.Kind {
	case DistFixed:
		if d.Value < 1 || d.Value > maxLength {
			return bad("%s: value %d outside 1..%d", where, d.Value, maxLength)
		}
	case DistUniform:
		if d.Min < 1 || d.Max < d.Min {
			return bad("%s: uniform needs 1 <= min <= max", where)
		}
	case DistNormal, DistLognormal:
		if !(d.Mean >= 1 && d.Mean <= maxLength) || !(d.StdDev >= 0 && d.StdDev <= maxLength) {
			return bad("%s: mean %v must be in 1..%d and stddev %v in 0..%d", where, d.Mean, maxLength, d.StdDev, maxLength)
		}
	default:
		return bad("%s: unknown dist %q", where, d.Kind)
	}
	return nil
}
