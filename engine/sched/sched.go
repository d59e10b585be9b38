package sched

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// ID names a sequence (a request) within one State. The caller chooses it; it must be
// unique among the requests the State holds.
type ID uint64

// Class is a request's scheduling class: Interactive requests join before Batch ones.
// The values match engine.Priority.
type Class int

const (
	Interactive Class = iota
	Batch
)

func (c Class) String() string {
	switch c {
	case Interactive:
		return "interactive"
	case Batch:
		return "batch"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Config holds the limits of one model's scheduler. The zero value of each field but
// MaxModelLen takes the documented default.
type Config struct {
	MaxModelLen    int           // prompt + output tokens of one sequence; required
	MaxConcurrency int           // sequences running at once; 0: 8
	BatchTimeout   time.Duration // with nothing running, wait this long after the first arrival for a fuller batch; 0: run at once (single-request mode)
	StepTokens     int           // tokens computed per step (decodes + prefill chunks); 0: max(512, MaxConcurrency)
	BlockSize      int           // tokens per KV block; 0: 16
	Blocks         int           // KV blocks of the model's pool; 0: enough for MaxConcurrency sequences of MaxModelLen
	// BatchChunk is the most prompt tokens batch sequences prefill in one step, all
	// together: a step with batch prefill in it is one an interactive request that
	// arrives meanwhile waits out. 0: StepTokens (no limit but the step's).
	BatchChunk int
	// BatchChunkFor, when set, applies BatchChunk only while interactive traffic is
	// there: an interactive request waits or runs, or one arrived within this long.
	// Without interactive traffic batch prefill runs at the step budget. 0: always.
	BatchChunkFor time.Duration
}

// withDefaults returns c with its defaults filled in, or an error naming a bad field.
func (c Config) withDefaults() (Config, error) {
	if c.MaxModelLen <= 0 {
		return c, fmt.Errorf("sched: MaxModelLen %d must be positive", c.MaxModelLen)
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = 8
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.StepTokens == 0 {
		c.StepTokens = max(512, c.MaxConcurrency)
	}
	if c.BatchChunk == 0 {
		c.BatchChunk = c.StepTokens
	}
	if c.MaxConcurrency < 0 || c.BlockSize < 0 || c.BatchTimeout < 0 || c.Blocks < 0 || c.BatchChunk < 0 || c.BatchChunkFor < 0 {
		return c, fmt.Errorf("sched: negative limit in %+v", c)
	}
	if c.Blocks == 0 {
		c.Blocks = c.MaxConcurrency * blocksFor(c.MaxModelLen+1, c.BlockSize)
	}
	if c.StepTokens < c.MaxConcurrency {
		return c, fmt.Errorf("sched: StepTokens %d is less than MaxConcurrency %d: decodes would not fit a step", c.StepTokens, c.MaxConcurrency)
	}
	if need := blocksFor(c.MaxModelLen+1, c.BlockSize); c.Blocks < need {
		return c, fmt.Errorf("sched: %d KV blocks of %d tokens cannot hold one sequence of MaxModelLen %d (needs %d)", c.Blocks, c.BlockSize, c.MaxModelLen, need)
	}
	return c, nil
}

// blocksFor is the number of blocks of size bs that hold n tokens.
func blocksFor(n, bs int) int { return (n + bs - 1) / bs }

// Errors of Enqueue, matched with errors.Is. ErrTooLong comes as a *LimitError, which
// carries the numbers; the Block wraps it with engine.ErrTooLong. There is no queue
// limit here: the engine's ModelConfig.MaxQueue, checked before a request reaches a
// replica, is the only one.
var (
	ErrTooLong   = errors.New("sched: request longer than the model's limit")
	ErrDuplicate = errors.New("sched: duplicate sequence id")
	ErrInvalid   = errors.New("sched: invalid request")
)

// LimitError is the error of a request refused by a limit: its Kind (ErrTooLong) is
// what errors.Is matches.
type LimitError struct {
	Kind   error
	Detail string // the numbers, e.g. "prompt 900 + max tokens 200 > max model len 1024"
}

func (e *LimitError) Error() string { return e.Kind.Error() + ": " + e.Detail }
func (e *LimitError) Unwrap() error { return e.Kind }

// Request is what Enqueue needs to know of one generation request.
type Request struct {
	ID        ID
	Tenant    string
	Weight    float64 // the tenant's share weight; 0: 1. The latest request's weight wins.
	Class     Class
	Prompt    int // prompt tokens (> 0)
	MaxTokens int // output tokens at most; 0: up to MaxModelLen
	Chunk     int // tokens of this request computed in one step at most; 0: no limit but the step's
}

// Seq is a sequence as the State sees it: a waiting request or a running sequence.
type Seq struct {
	Request
	Arrival   time.Time
	Len       int  // tokens known: prompt + generated
	Computed  int  // tokens whose KV is in the cache (reset to 0 by preemption)
	Generated int  // output tokens produced
	Running   bool // in the batch
	Done      bool // produced its last token in the step just applied
	Preempted int  // times it was preempted
	Held      bool // takes no work until released (Hold)
	Draft     int  // drafted tokens the Block would verify in its next decode (SetDraft)
	joinSeq   uint64
	last      Work // its work in the last applied step
	lastStep  uint64
}

// Decoding reports whether the sequence's next step is one decode (not a prefill).
func (s *Seq) Decoding() bool { return s.Len-s.Computed == 1 }

// Work is what one sequence computes in a step: the KV of tokens [Start, Start+N).
// Sample is set when the step ends at the last known token, so that the model samples
// one new token for the sequence (a decode, or the last chunk of a prefill). Last is
// set when that token is the sequence's MaxTokens-th: the State drops the sequence
// when the step is applied and the Block frees its blocks after the step.
type Work struct {
	ID     ID
	Start  int
	N      int
	Sample bool
	Last   bool
	// Draft is how many of the N tokens are drafts to verify (a decode with
	// speculation: N = 1+Draft); the sequence then produces 1 to 1+Draft tokens, the
	// first by Apply and the others by Accept.
	Draft int
}

// Step is the decision of Plan. The Block applies it in this order: free the KV blocks
// of Preempt (they are back in the queue), build block tables for Join (on the cached
// prefix it took when Plan asked, Cached: a joining sequence's Work starts after it),
// then run the model over Work in one batch, as it is.
// When Work is empty, nothing runs: call Plan again at WakeAt if it is not zero, or at
// the next Enqueue/Remove.
type Step struct {
	Preempt []ID
	Join    []ID
	Work    []Work
	WakeAt  time.Time
}

// Empty reports whether the step does nothing.
func (s Step) Empty() bool { return len(s.Preempt) == 0 && len(s.Join) == 0 && len(s.Work) == 0 }

// tenant is one tenant's fair-queueing state.
type tenant struct {
	name    string
	weight  float64
	vtime   float64 // output tokens received / weight, lifted to the clock when it becomes active
	queue   [2][]*Seq
	running int
}

func (t *tenant) waiting() int { return len(t.queue[Interactive]) + len(t.queue[Batch]) }
func (t *tenant) active() bool { return t.running > 0 || t.waiting() > 0 }

// State is the scheduler of one model: its queues, running set and KV block budget.
// It is a plain value owned by one goroutine (the Block's); Plan is a pure function of
// the State, the time and the prefix cache's answers (Cached), and the mutating
// methods (Enqueue, Remove, Apply) take effect between steps.
type State struct {
	cfg      Config
	seqs     map[ID]*Seq
	tenants  map[string]*tenant
	running  []*Seq // in join order
	waiting  int
	clock    float64 // the fair-queueing virtual clock: min vtime of the active tenants, never decreasing
	joins    uint64
	steps    uint64
	received map[string]int // output tokens per tenant (a counter for callers and tests)
	done     []ID           // sequences that ended in the last applied step, forgotten at the next
	lastChat time.Time      // the latest interactive arrival (BatchChunkFor)
}

// New returns an empty State with the given limits.
func New(cfg Config) (*State, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &State{cfg: c, seqs: map[ID]*Seq{}, tenants: map[string]*tenant{}, received: map[string]int{}}, nil
}

// Config returns the limits in effect (defaults filled in).
func (s *State) Config() Config { return s.cfg }

// Seq returns the sequence with this id, if the State holds it (a sequence that ended
// by length in the step just applied is still found, with Done set). The result is
// read-only for the caller.
func (s *State) Seq(id ID) (*Seq, bool) { q, ok := s.seqs[id]; return q, ok }

// Waiting and Running count the sequences queued and in the batch.
func (s *State) Waiting() int { return s.waiting }
func (s *State) Running() int { return len(s.running) }

// Received returns the output tokens a tenant has received from this State.
func (s *State) Received(tenant string) int { return s.received[tenant] }

// UsedBlocks is the KV blocks the running sequences hold (by the scheduler's
// conservative count: every sequence's own table, shared prefix blocks counted once
// per sequence).
func (s *State) UsedBlocks() int {
	n := 0
	for _, q := range s.running {
		n += blocksFor(q.Computed, s.cfg.BlockSize)
	}
	return n
}

// Enqueue queues a request at time now. A request whose prompt and max tokens exceed
// MaxModelLen is refused with ErrTooLong, at once and without changing the State.
// Enqueue never refuses for the queue's length: the engine's MaxQueue is the only
// queue limit.
func (s *State) Enqueue(now time.Time, r Request) error {
	if _, dup := s.seqs[r.ID]; dup {
		return fmt.Errorf("%w: %d", ErrDuplicate, r.ID)
	}
	if r.Prompt <= 0 || r.MaxTokens < 0 || r.Chunk < 0 {
		return fmt.Errorf("%w: prompt %d tokens, max tokens %d, chunk %d", ErrInvalid, r.Prompt, r.MaxTokens, r.Chunk)
	}
	if r.Prompt+r.MaxTokens > s.cfg.MaxModelLen || r.Prompt >= s.cfg.MaxModelLen {
		return &LimitError{Kind: ErrTooLong, Detail: fmt.Sprintf("prompt %d + max tokens %d > max model len %d", r.Prompt, r.MaxTokens, s.cfg.MaxModelLen)}
	}
	if r.Class != Interactive && r.Class != Batch {
		return fmt.Errorf("%w: unknown class %d", ErrInvalid, r.Class)
	}
	if r.MaxTokens == 0 {
		r.MaxTokens = s.cfg.MaxModelLen - r.Prompt
	}
	if r.Weight <= 0 {
		r.Weight = 1
	}
	t := s.tenants[r.Tenant]
	if t == nil {
		t = &tenant{name: r.Tenant}
		s.tenants[r.Tenant] = t
	}
	if !t.active() && t.vtime < s.clock {
		// A tenant that was idle starts at the clock: idle time banks no credit.
		t.vtime = s.clock
	}
	t.weight = r.Weight
	if r.Class == Interactive && now.After(s.lastChat) {
		s.lastChat = now
	}
	q := &Seq{Request: r, Arrival: now, Len: r.Prompt}
	s.seqs[r.ID] = q
	s.push(t, q)
	return nil
}

// push inserts q into its tenant's queue in (arrival, id) order, so a preempted
// sequence goes back near the head.
func (s *State) push(t *tenant, q *Seq) {
	list := t.queue[q.Class]
	i := sort.Search(len(list), func(i int) bool { return earlier(q, list[i]) })
	list = append(list, nil)
	copy(list[i+1:], list[i:])
	list[i] = q
	t.queue[q.Class] = list
	s.waiting++
}

func earlier(a, b *Seq) bool {
	if !a.Arrival.Equal(b.Arrival) {
		return a.Arrival.Before(b.Arrival)
	}
	return a.ID < b.ID
}

// Hold holds or releases a sequence, queued or running. A held sequence takes no
// work: it does not join, decode or prefill (a running one keeps its slot and KV
// blocks, as a paused batch sequence does) and, queued, it does not block the other
// tenants (the fair order passes over it; its own tenant's later requests wait behind
// it). The Block holds a sequence while the grammar mask of its next token is being
// computed off the step, so that the batch does not wait for it. Which steps a
// sequence's tokens are computed in never changes their values, so holding changes
// when they come, not what they are.
func (s *State) Hold(id ID, held bool) {
	if q, ok := s.seqs[id]; ok {
		q.Held = held
	}
}

// Remove drops a sequence, queued or running (a cancelled request, or one that ended
// on a stop condition the Block detected). It returns the sequence; if it was running,
// the Block frees its KV blocks before the next step.
func (s *State) Remove(id ID) (*Seq, bool) {
	q, ok := s.seqs[id]
	if !ok {
		return nil, false
	}
	delete(s.seqs, id)
	t := s.tenants[q.Tenant]
	if q.Done {
		return q, true
	}
	if q.Running {
		for i, r := range s.running {
			if r == q {
				s.running = append(s.running[:i], s.running[i+1:]...)
				break
			}
		}
		t.running--
	} else {
		list := t.queue[q.Class]
		for i, r := range list {
			if r == q {
				t.queue[q.Class] = append(list[:i], list[i+1:]...)
				break
			}
		}
		s.waiting--
	}
	s.settle()
	return q, true
}

// settle advances the virtual clock to the least vtime of the active tenants and
// forgets idle tenants that owe nothing.
func (s *State) settle() {
	least, any := 0.0, false
	for _, t := range s.tenants {
		if t.active() && (!any || t.vtime < least) {
			least, any = t.vtime, true
		}
	}
	if any && least > s.clock {
		s.clock = least
	}
	for name, t := range s.tenants {
		if !t.active() && t.vtime <= s.clock {
			delete(s.tenants, name)
		}
	}
}

// Cached reports how many leading tokens of a waiting sequence's known tokens the
// Block takes from its prefix cache for it (whole blocks). Plan asks only about the
// sequences it joins, in the order they join, and starts their work after those
// tokens; the last known token is always computed, so at most Len-1 count. The Block
// takes the blocks when asked (the engine's runner: a warm block's replay may evict a
// hot block that a later join would have found, and that join is then asked after
// it and counts what is left), so the plan's work is what runs; asked again about a
// sequence within one Plan, it answers the same, and it gives back what the step does
// not join. A nil Cached means nothing is cached.
type Cached func(id ID) int

// Plan decides the next step at time now, given what the prefix cache holds for the
// sequences that join. It does not change the State; Apply does. The plan is final:
// the Block runs its Work as it is.
//
// Running sequences decode first (one token each), preempting the lowest-class,
// most recently joined sequences while the KV blocks do not suffice. Then running
// prefills get chunks of the remaining step token budget in join order. Then, while
// there is room in the batch, tokens in the budget and blocks for a whole prompt plus
// one step, waiting requests join: interactive before batch, and within a class the
// tenant with the least weighted output tokens received (virtual time) first, FIFO
// within a tenant. With nothing running, a batch that is not full waits BatchTimeout
// after its first request before it runs.
func (s *State) Plan(now time.Time, cached Cached) Step {
	// A step that prefills for interactive requests runs them alone: batch decodes
	// pause (keeping their slot and KV) and batch prefill waits. Without interactive
	// prefill work in it, the step is planned again with batch work in.
	st, interactive := s.plan(now, cached, true)
	if !interactive {
		st, _ = s.plan(now, cached, false)
	}
	s.drafts(&st)
	return st
}

// drafts extends the step's decodes of sequences with a Draft by their drafted
// tokens, in the order of the step's work, while the step's token budget and the KV
// blocks last: a verification's tokens count against both like any others, after
// every decode, prefill chunk and join of the plan (drafts never delay them). A
// sequence drafts at most MaxTokens-Generated-1 tokens, so its step never produces
// more than its MaxTokens and a drafted step is never Last.
func (s *State) drafts(st *Step) {
	budget := s.cfg.StepTokens
	for _, w := range st.Work {
		budget -= w.N
	}
	if budget <= 0 {
		return
	}
	bs := s.cfg.BlockSize
	// The blocks the plan holds: what Plan's join test reserves for the running
	// sequences that were not preempted, plus the joins'.
	used := 0
	preempted := func(id ID) bool { return slices.Contains(st.Preempt, id) }
	for _, q := range s.running {
		if !preempted(q.ID) {
			used += s.reserve(q)
		}
	}
	for _, id := range st.Join {
		used += blocksFor(s.seqs[id].Len+1, bs)
	}
	for i := range st.Work {
		w := &st.Work[i]
		q := s.seqs[w.ID]
		if q.Draft <= 0 || !q.Running || !q.Decoding() || w.N != 1 || !w.Sample || w.Last {
			continue
		}
		k := min(q.Draft, budget, q.MaxTokens-q.Generated-1)
		for k > 0 && used-blocksFor(q.Len, bs)+blocksFor(q.Len+k, bs) > s.cfg.Blocks {
			k--
		}
		if k <= 0 {
			continue
		}
		used += blocksFor(q.Len+k, bs) - blocksFor(q.Len, bs)
		w.N += k
		w.Draft = k
		budget -= k
		if budget == 0 {
			return
		}
	}
}

// SetDraft records that sequence id has k drafted tokens for its next decode (0:
// none); Plan lets it verify as many as the step's budget and blocks allow.
func (s *State) SetDraft(id ID, k int) {
	if q := s.seqs[id]; q != nil {
		q.Draft = k
	}
}

// Accept records that a drafted decode of id (Work.Draft > 0, applied) produced n
// more tokens than the one Apply counted: its accepted drafts. n is at most the
// work's Draft; the tokens' KV is the verification's.
func (s *State) Accept(id ID, n int) {
	q := s.seqs[id]
	if q == nil || !q.Running || n <= 0 {
		return
	}
	q.Computed += n
	for range n {
		s.produce(q)
	}
}

// plan is Plan's decision; with hold, batch sequences neither decode nor prefill.
// It reports whether the step prefills for an interactive sequence (a running
// prefill's chunk or a join).
func (s *State) plan(now time.Time, cached Cached, hold bool) (Step, bool) {
	var st Step
	bs := s.cfg.BlockSize
	budget := s.cfg.StepTokens
	batchPrefill := s.batchChunk(now) // prompt tokens batch sequences may still prefill in this step
	if hold {
		batchPrefill = 0
	}
	interactive := false

	// Decodes and the KV blocks they need; preempt until they fit.
	running := append([]*Seq(nil), s.running...)
	need := func() int {
		n := 0
		for _, q := range running {
			if q.Decoding() {
				n += blocksFor(q.Len, bs)
			} else {
				n += blocksFor(q.Computed, bs)
			}
		}
		return n
	}
	for len(running) > 0 && need() > s.cfg.Blocks {
		v := victim(running)
		st.Preempt = append(st.Preempt, running[v].ID)
		running = append(running[:v], running[v+1:]...)
	}
	kvPressure := len(st.Preempt) > 0
	if !kvPressure {
		running = s.yieldToInteractive(running, &st)
	}
	used := need()
	for _, q := range running {
		if q.Decoding() && !(hold && q.Class == Batch) && !q.Held {
			st.Work = append(st.Work, Work{ID: q.ID, Start: q.Computed, N: 1, Sample: true, Last: q.Generated+1 >= q.MaxTokens})
			budget--
		}
	}
	// Prefill chunks of running sequences, in join order, within budget and blocks.
	reserve := 0 // blocks the running sequences need to finish their prefill and take one step
	for _, q := range running {
		reserve += s.reserve(q)
		if q.Decoding() || q.Held {
			continue
		}
		if budget <= 0 {
			continue
		}
		n := q.chunkOf(q.Len-q.Computed, budget)
		if q.Class == Batch {
			n = min(n, batchPrefill)
		}
		for n > 0 && used-blocksFor(q.Computed, bs)+blocksFor(q.Computed+n, bs) > s.cfg.Blocks {
			// Cut the chunk back to the blocks there are (whole blocks).
			n = (blocksFor(q.Computed+n, bs)-1)*bs - q.Computed
		}
		if n <= 0 {
			continue
		}
		used += blocksFor(q.Computed+n, bs) - blocksFor(q.Computed, bs)
		st.Work = append(st.Work, s.chunk(q, q.Computed, n))
		budget -= n
		if q.Class == Batch {
			batchPrefill -= n
		} else {
			interactive = true
		}
	}

	// Joins.
	if s.waiting == 0 || len(running) >= s.cfg.MaxConcurrency || budget <= 0 || kvPressure {
		return st, interactive
	}
	if len(s.running) == 0 && s.cfg.BatchTimeout > 0 && s.waiting < s.cfg.MaxConcurrency {
		first := s.firstArrival()
		if wake := first.Add(s.cfg.BatchTimeout); now.Before(wake) {
			st.WakeAt = wake
			return st, interactive
		}
	}
	extra := map[*tenant]float64{} // provisional charge of this step's joins, to spread them
	taken := map[*tenant]int{}
	for len(running)+len(st.Join) < s.cfg.MaxConcurrency && budget > 0 {
		t, q := s.next(extra, taken)
		if q == nil || q.Class == Batch && batchPrefill <= 0 {
			break
		}
		if reserve+blocksFor(q.Len+1, bs) > s.cfg.Blocks {
			break // the head of the fair order waits for blocks; nobody overtakes it
		}
		reserve += blocksFor(q.Len+1, bs)
		start := 0
		if cached != nil {
			start = min(max(cached(q.ID), 0), q.Len-1)
		}
		n := q.chunkOf(q.Len-start, budget)
		if q.Class == Batch {
			n = min(n, batchPrefill)
			batchPrefill -= n
		} else {
			interactive = true
		}
		st.Join = append(st.Join, q.ID)
		st.Work = append(st.Work, s.chunk(q, start, n))
		budget -= n
		extra[t] += 1 / t.weight
		taken[t]++
	}
	return st, interactive
}

// batchChunk is the most prompt tokens batch sequences may prefill in a step at now:
// BatchChunk, or with BatchChunkFor and no interactive traffic, the step budget.
func (s *State) batchChunk(now time.Time) int {
	if s.cfg.BatchChunkFor == 0 || !s.lastChat.IsZero() && now.Before(s.lastChat.Add(s.cfg.BatchChunkFor)) {
		return s.cfg.BatchChunk
	}
	for _, q := range s.running {
		if q.Class == Interactive {
			return s.cfg.BatchChunk
		}
	}
	for _, t := range s.tenants {
		if len(t.queue[Interactive]) > 0 {
			return s.cfg.BatchChunk
		}
	}
	return s.cfg.StepTokens
}

// chunkOf is how many of left tokens q computes in a step with budget tokens left.
func (q *Seq) chunkOf(left, budget int) int {
	n := min(left, budget)
	if q.Chunk > 0 {
		n = min(n, q.Chunk)
	}
	return n
}

// reserve is the blocks a running sequence needs to finish its prefill and take one
// step (a decoding one: its next step).
func (s *State) reserve(q *Seq) int {
	if q.Decoding() {
		return blocksFor(q.Len, s.cfg.BlockSize)
	}
	return blocksFor(q.Len+1, s.cfg.BlockSize)
}

// yieldToInteractive preempts running batch sequences (most recently joined first)
// while interactive requests wait for a slot or for KV blocks that those hold, so
// that interactive requests never wait behind batch ones. It returns the running
// sequences left.
func (s *State) yieldToInteractive(running []*Seq, st *Step) []*Seq {
	batch := 0
	for _, q := range running {
		if q.Class == Batch {
			batch++
		}
	}
	if batch == 0 {
		return running
	}
	reserve := 0
	for _, q := range running {
		reserve += s.reserve(q)
	}
	extra := map[*tenant]float64{}
	taken := map[*tenant]int{}
	slots := len(running)
	for {
		t, c := s.next(extra, taken)
		if c == nil || c.Class != Interactive {
			return running
		}
		need := blocksFor(c.Len+1, s.cfg.BlockSize)
		// The batch sequences to preempt for c, most recently joined first; none
		// unless they make room.
		left, r, n := running, reserve, slots
		var out []ID
		for n >= s.cfg.MaxConcurrency || r+need > s.cfg.Blocks {
			v := -1
			for i, q := range left {
				if q.Class == Batch && (v < 0 || q.joinSeq > left[v].joinSeq) {
					v = i
				}
			}
			if v < 0 {
				return running
			}
			r -= s.reserve(left[v])
			out = append(out, left[v].ID)
			left = append(left[:v:v], left[v+1:]...)
			n--
		}
		running, reserve, slots = left, r, n
		st.Preempt = append(st.Preempt, out...)
		slots++
		reserve += need
		extra[t] += 1 / t.weight
		taken[t]++
	}
}

// chunk is the work of computing n tokens of q from start.
func (s *State) chunk(q *Seq, start, n int) Work {
	w := Work{ID: q.ID, Start: start, N: n}
	if start+n == q.Len {
		w.Sample = true
		w.Last = q.Generated+1 >= q.MaxTokens
	}
	return w
}

// victim is the index in running of the sequence to preempt: batch before
// interactive, then the most recently joined.
func victim(running []*Seq) int {
	v := 0
	for i, q := range running {
		if q.Class > running[v].Class || q.Class == running[v].Class && q.joinSeq > running[v].joinSeq {
			v = i
		}
	}
	return v
}

func (s *State) firstArrival() time.Time {
	var first time.Time
	for _, t := range s.tenants {
		for _, list := range t.queue {
			if len(list) > 0 && (first.IsZero() || list[0].Arrival.Before(first)) {
				first = list[0].Arrival
			}
		}
	}
	return first
}

// next returns the next waiting request in the fair order, skipping the taken[t]
// heads of each tenant's queues that this Plan has already chosen.
func (s *State) next(extra map[*tenant]float64, taken map[*tenant]int) (*tenant, *Seq) {
	for class := Interactive; class <= Batch; class++ {
		var bt *tenant
		var bq *Seq
		var bv float64
		for _, t := range s.tenants {
			skip := taken[t]
			if class == Batch {
				skip -= len(t.queue[Interactive])
			}
			skip = max(skip, 0)
			if len(t.queue[class]) <= skip {
				continue
			}
			q := t.queue[class][skip]
			if q.Held {
				continue // its tenant's queue waits behind it; the others do not
			}
			v := t.vtime + extra[t]
			if bq == nil || v < bv || v == bv && (earlier(q, bq)) {
				bt, bq, bv = t, q, v
			}
		}
		if bq != nil {
			return bt, bq
		}
	}
	return nil, nil
}

// Apply makes the State take step (the result of Plan on this State, at now): the
// preempted go back to their queues with their KV dropped, the joined run, the work
// advances the sequences, and the tenants are charged for the tokens they receive.
// Sequences whose work is Last are dropped.
func (s *State) Apply(now time.Time, st Step) {
	s.steps++
	for _, id := range s.done {
		if q := s.seqs[id]; q != nil && q.Done {
			delete(s.seqs, id)
		}
	}
	s.done = s.done[:0]
	for _, id := range st.Preempt {
		q := s.seqs[id]
		if q == nil || !q.Running {
			continue
		}
		s.detach(q)
		q.Computed = 0
		q.Preempted++
		s.push(s.tenants[q.Tenant], q)
	}
	for _, id := range st.Join {
		q := s.seqs[id]
		if q == nil || q.Running {
			continue
		}
		t := s.tenants[q.Tenant]
		list := t.queue[q.Class]
		for i, r := range list {
			if r == q {
				t.queue[q.Class] = append(list[:i], list[i+1:]...)
				break
			}
		}
		s.waiting--
		s.joins++
		q.joinSeq = s.joins
		q.Running = true
		t.running++
		s.running = append(s.running, q)
	}
	for _, w := range st.Work {
		q := s.seqs[w.ID]
		if q == nil || !q.Running {
			continue
		}
		q.Computed = w.Start + w.N - w.Draft // drafts count once accepted (Accept)
		q.Draft = 0
		q.last, q.lastStep = w, s.steps
		if w.Sample {
			s.produce(q)
		}
		if w.Last {
			s.finish(q)
		}
	}
	s.settle()
}

// finish takes q out of the batch after its last token; Seq still finds it until the
// next Apply.
func (s *State) finish(q *Seq) {
	s.detach(q)
	q.Done = true
	s.done = append(s.done, q.ID)
}

// produce records one output token of q.
func (s *State) produce(q *Seq) {
	q.Len++
	q.Generated++
	t := s.tenants[q.Tenant]
	t.vtime += 1 / t.weight
	s.received[q.Tenant]++
}

// detach takes a running sequence out of the batch.
func (s *State) detach(q *Seq) {
	for i, r := range s.running {
		if r == q {
			s.running = append(s.running[:i], s.running[i+1:]...)
			break
		}
	}
	q.Running = false
	s.tenants[q.Tenant].running--
}
