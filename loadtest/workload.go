package loadtest

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Draw returns one length from the distribution, at least 1.
func (d Dist) Draw(rng *rand.Rand) int {
	var v float64
	switch d.Kind {
	case DistUniform:
		v = float64(d.Min + rng.IntN(d.Max-d.Min+1))
	case DistNormal:
		v = math.Round(d.Mean + d.StdDev*rng.NormFloat64())
	case DistLognormal:
		// Parameters of the underlying normal from the lengths' mean and deviation.
		s2 := math.Log1p(d.StdDev * d.StdDev / (d.Mean * d.Mean))
		mu := math.Log(d.Mean) - s2/2
		v = math.Round(math.Exp(mu + math.Sqrt(s2)*rng.NormFloat64()))
	default:
		v = float64(d.Value)
	}
	if d.Min > 0 && v < float64(d.Min) {
		v = float64(d.Min)
	}
	if d.Max > 0 && v > float64(d.Max) {
		v = float64(d.Max)
	}
	if !(v >= 1) {
		v = 1
	}
	if v > maxLength {
		v = maxLength
	}
	return int(v)
}

// schedule yields the send times of an open-loop arrival process as offsets from
// its start. It is a pure function of its random source: no clock.
type schedule struct {
	a    Arrival
	rng  *rand.Rand
	n    int           // arrivals yielded so far
	t    time.Duration // the last Poisson arrival (bursts: between bursts)
	nb   int           // bursts: the next burst's index
	left int           // bursts: requests left in the current burst
}

func newSchedule(a Arrival, rng *rand.Rand) *schedule { return &schedule{a: a, rng: rng} }

// next returns the next arrival's offset; offsets never decrease.
func (s *schedule) next() time.Duration {
	defer func() { s.n++ }()
	switch s.a.Type {
	case ArrivalConstant:
		return time.Duration(float64(s.n) * float64(time.Second) / s.a.Rate)
	case ArrivalPoisson:
		s.t += s.expGap()
		return s.t
	case ArrivalBursts:
		burstAt := time.Duration(s.nb) * s.a.BurstEvery.D()
		if s.left > 0 {
			s.left--
			return time.Duration(s.nb-1) * s.a.BurstEvery.D()
		}
		// Between bursts a Poisson stream at Rate (none when Rate is 0).
		if s.a.Rate > 0 {
			if g := s.t + s.expGap(); g < burstAt {
				s.t = g
				return g
			}
		}
		s.t = burstAt
		s.nb++
		s.left = s.a.BurstSize - 1
		return burstAt
	}
	return math.MaxInt64 // closed loop has no schedule
}

func (s *schedule) expGap() time.Duration {
	return time.Duration(s.rng.ExpFloat64() / s.a.Rate * float64(time.Second))
}

// share returns a tenant's part of the scenario's shared arrival: rate, burst
// size and users are split by weight (at least one user or burst request each).
func (a Arrival) share(frac float64) Arrival {
	a.Rate *= frac
	if a.BurstSize > 0 {
		a.BurstSize = max(1, int(math.Round(float64(a.BurstSize)*frac)))
	}
	if a.Users > 0 {
		a.Users = max(1, int(math.Round(float64(a.Users)*frac)))
	}
	return a
}

// words is the vocabulary of generated prompts: common English words, so that
// every tokenizer sees about one token per word.
var words = strings.Fields(`the of and to in is was for on that with as by at from
it his an were are which this be or have had not but one their they he first new
has all after two its who also been more time other when into year can she would
there about people only world over city made some most state many where may such
used through during these between under years while later both then part them
well like each school early same river known being since name before three war
day work long found high small house great water family life little story cat
dog tree sun moon star bird fish road light green blue red old young happy cold
warm quiet loud fast slow open close begin end learn teach write read speak hear`)

// promptText returns n words drawn from rng.
func promptText(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 6)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}

// request is one prepared HTTP request.
type request struct {
	tenant  int
	path    string
	body    []byte
	headers map[string]string
	stream  bool
	// conv and user are set for a multi-turn chat: the turn is appended to conv
	// once it completes.
	conv *conversation
	user string
	ask  string // the tier options sent (TierChoice.Label); "" when none
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// conversation is one growing chat of a tenant. busy is set while a turn is in
// flight, so turns of one conversation never overlap.
type conversation struct {
	system string
	msgs   []message
	turns  int
	busy   bool
}

// generator builds a tenant's requests. One generator serves one tenant; its
// methods are safe for concurrent use.
type generator struct {
	tenant   int
	w        *Workload
	prefixes []string // shared system prompts

	mu    sync.Mutex // guards rng, convs and next
	rng   *rand.Rand
	convs []*conversation
	next  int // round-robin position in convs
}

func newGenerator(tenant int, w *Workload, seed uint64) *generator {
	g := &generator{tenant: tenant, w: w, rng: newRand(seed, uint64(tenant)+1)}
	if p := w.SharedPrefix; p != nil {
		// The same prefixes for every tenant with this workload: they come from
		// the scenario's seed alone.
		prng := newRand(seed, 0x5eed)
		for i := 0; i < p.Count; i++ {
			g.prefixes = append(g.prefixes, "You are assistant "+strconv.Itoa(i)+". "+promptText(prng, p.Tokens))
		}
	}
	if m := w.MultiTurn; m != nil {
		for i := 0; i < m.Conversations; i++ {
			g.convs = append(g.convs, &conversation{})
		}
	}
	return g
}

// make prepares the next request.
func (g *generator) make() *request {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.w
	r := &request{tenant: g.tenant, stream: *w.Stream, headers: map[string]string{}}
	user := promptText(g.rng, w.PromptTokens.Draw(g.rng))
	maxTokens := w.OutputTokens.Draw(g.rng)
	system := ""
	if p := w.SharedPrefix; p != nil && g.rng.Float64() < p.Fraction {
		system = g.prefixes[g.rng.IntN(len(g.prefixes))]
	}
	body := map[string]any{"model": w.Model, "max_tokens": maxTokens, "temperature": w.Temperature, "stream": r.stream}
	if r.stream {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	for k, v := range w.Extra {
		body[k] = v
	}
	if w.API == APICompletions {
		r.path = "/v1/completions"
		if system != "" {
			user = system + "\n\n" + user
		}
		body["prompt"] = user
	} else {
		r.path = "/v1/chat/completions"
		var msgs []message
		if c := g.takeConversationLocked(system); c != nil {
			r.conv, r.user = c, user
			system = c.system
			msgs = append(msgs, c.msgs...)
		}
		if system != "" {
			msgs = append([]message{{Role: "system", Content: system}}, msgs...)
		}
		msgs = append(msgs, message{Role: "user", Content: user})
		body["messages"] = msgs
	}
	if len(w.Tiers) > 0 {
		r.ask = g.tierLocked(body, r.headers)
	}
	r.body, _ = json.Marshal(body) // only strings, numbers and YAML-decoded values
	return r
}

// takeConversationLocked returns a free conversation marked busy, restarting it
// (with system as its system prompt) when it is new or has had its turns; nil
// when multi-turn is off or every conversation is in flight.
func (g *generator) takeConversationLocked(system string) *conversation {
	for range g.convs {
		c := g.convs[g.next]
		g.next = (g.next + 1) % len(g.convs)
		if c.busy {
			continue
		}
		if c.turns == 0 || c.turns >= g.w.MultiTurn.Turns {
			*c = conversation{system: system}
		}
		c.busy = true
		return c
	}
	return nil
}

// finish records a completed turn (reply is the assistant's text; ok false
// restarts the conversation) and frees it.
func (g *generator) finish(r *request, reply string, ok bool) {
	if r.conv == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c := r.conv
	c.busy = false
	if !ok {
		c.turns = 0
		return
	}
	c.msgs = append(c.msgs, message{Role: "user", Content: r.user}, message{Role: "assistant", Content: reply})
	c.turns++
}

// tierLocked picks the request's tier options and sets them in the body or the
// headers; it returns their label.
func (g *generator) tierLocked(body map[string]any, headers map[string]string) string {
	total := 0.0
	for _, c := range g.w.Tiers {
		total += c.Weight
	}
	x := g.rng.Float64() * total
	c := g.w.Tiers[len(g.w.Tiers)-1]
	for _, t := range g.w.Tiers {
		if x < t.Weight {
			c = t
			break
		}
		x -= t.Weight
	}
	if g.w.TierVia == "headers" {
		if c.Mode != "" {
			headers["X-LMLite-Tier-Mode"] = c.Mode
		}
		if c.Tier != "" {
			headers["X-LMLite-Tier"] = c.Tier
		}
		if c.MaxLatencyMS > 0 {
			headers["X-LMLite-Max-Latency-Ms"] = strconv.Itoa(c.MaxLatencyMS)
		}
		if c.MaxCostUSD > 0 {
			headers["X-LMLite-Max-Cost-USD"] = strconv.FormatFloat(c.MaxCostUSD, 'f', -1, 64)
		}
		return c.Label()
	}
	opt := map[string]any{}
	if c.Mode != "" {
		opt["tier_mode"] = c.Mode
	}
	if c.Tier != "" {
		opt["tier"] = c.Tier
	}
	if c.MaxLatencyMS > 0 {
		opt["max_latency_ms"] = c.MaxLatencyMS
	}
	if c.MaxCostUSD > 0 {
		opt["max_cost_usd"] = c.MaxCostUSD
	}
	body["lmlite"] = opt
	return c.Label()
}

// newRand returns a seeded generator; every random choice of a run comes from one
// of these, so a scenario's seed reproduces its prompts and arrivals.
func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }
