package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/engine/sample"
	"github.com/lmlite/lmlite/engine/sched"
	"github.com/lmlite/lmlite/engine/spec"
	"github.com/lmlite/lmlite/engine/tokenizer"
	"github.com/lmlite/lmlite/kvcache"
)

// runner is one replica of a loaded model: one goroutine that owns a scheduler state
// (engine/sched), a paged KV pool (kvcache) and a model.Batch, and runs the
// iteration-level batch step after step. Requests reach it through its inbox; tokens
// go into each request's Stream, which never blocks, so a slow client never stalls
// the batch.
type runner struct {
	index   int
	id      string // the model's id, for errors
	noCache bool   // the prefix cache is off
	spec    spec.Config
	attnMin int // prompts of this many tokens or more run in model.AttnF32 (0: none; model.AttnF32MinPromptFor)
	tok     *tokenizer.Tokenizer
	batch   *model.Batch
	pool    *kvcache.Pool
	st      *sched.State

	mu    sync.Mutex // guards inbox and calls
	inbox []*job
	calls []func()      // run by the loop between steps (see do)
	wake  chan struct{} // cap 1: something is in the inbox, or a mask is ready
	stop  chan struct{}
	done  chan struct{}

	live   map[sched.ID]*job // owned by the loop
	taken  []sched.ID        // the jobs whose prefix cached took during this Plan
	gjobs  map[sched.ID]*job // the live jobs with a grammar, owned by the loop (masks.go)
	items  []model.Item      // the loop's step buffers, reused
	ran    []sched.Work
	nextID sched.ID
	stats  *runnerStats // the model's
	ngrams *spec.Pool   // the tenants' recent outputs (spec.Config.Pool); nil: off

	drafter *drafter // the draft model (spec.Config.DraftModel, draft.go); nil: none

	// The replica's decode steps' times by their tokens (spec.Steps, for
	// spec.Config.Measure) and the cost of drafting in the step being planned
	// (speculate.go).
	steps     spec.Steps
	draftCost spec.Cost

	maskSlots chan struct{} // cap maskWorkers: the masks computed at once (masks.go)

	running, waiting atomic.Int64 // gauges
}

// runnerStats are a model's batch counters and its replicas' gauges, read by any
// goroutine. The counters belong to the model (they survive unloads).
type runnerStats struct {
	steps, stepTokens, stepSeqs atomic.Uint64
	drafted, accepted           [nSources]atomic.Uint64 // speculative decoding's tokens by draft source (speculate.go)

	mu      sync.Mutex
	decoded map[string]int64 // output tokens by tenant
}

func (s *runnerStats) decode(tenant string) {
	s.mu.Lock()
	if s.decoded == nil {
		s.decoded = map[string]int64{}
	}
	s.decoded[tenant]++
	s.mu.Unlock()
}

// job is one request inside a runner.
type job struct {
	ctx    context.Context
	req    Request
	start  time.Time // submission
	tokens []int32   // prompt + generated
	max    int       // output tokens at most
	kv     *kvcache.Seq
	out    *Stream                  // the request's: tokens go straight to its consumer
	finish func(u Usage, err error) // ends the request (the Block's accounting, then out.Finish)
	u      Usage

	smp     *sample.Sampler
	dec     *tokenizer.StreamDecoder
	stop    *sample.StopMatcher
	text    []byte
	emitted int
	first   time.Time
	last    time.Time
	joined  bool

	// Features (constrain.go); vocab is set when any is asked for.
	vocab *vocabInfo
	gm    *grammar.Matcher // the output's grammar, if any
	mask  jobMask          // gm's mask for the next token (masks.go)
	top   []sample.Logprob // the step's top logprobs (len: Request.TopLogprobs)
	lp    Token            // the logprob fields of the token being accepted

	// Speculative decoding (speculate.go): the draft proposed for the next step and
	// its source, the verification item's tokens, a draft length controller per
	// source, and the request's prediction (Request.Prediction) aligned to the output.
	draft  []int32
	src    source
	verify []int32
	adapt  [nSources]spec.Adapt
	pred   spec.Predicted

	// Prompt logprobs (Request.PromptLogprobs): the prompt's decoder, the next prompt
	// position to deliver, the prompt tokens ready (sent just before the first output
	// token) and the most tokens of one prefill chunk (each is a logits row).
	pdec  *tokenizer.StreamDecoder
	pnext int
	ptoks []Token
	chunk int

	// An embedding job (embed.go): its prompt's hidden states pooled, no output.
	pool  model.Pooling
	embed []float64 // the pooling's accumulator (Dim values)
	vec   []float32 // the result, set before the job ends

	loras []model.LoRA // the request's adapters (adapters.go), set when it is submitted
}

// signal wakes the receiver of c, a channel of capacity 1, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runnerConfig is what a replica needs beyond the model.
type runnerConfig struct {
	sched   sched.Config
	kv      kvcache.Config
	noCache bool
	spec    spec.Config
	attnMin int // model.AttnF32MinPromptFor the ModelConfig's AttnF32MinPrompt: 0 none

	draft *draftConfig // the draft model (draft.go); nil: none
}

func newRunner(index int, id string, m *model.Model, tok *tokenizer.Tokenizer, rc runnerConfig, stats *runnerStats) (*runner, error) {
	pool, err := kvcache.New(rc.kv)
	if err != nil {
		return nil, err
	}
	sc := rc.sched
	sc.BlockSize, sc.Blocks = pool.BlockTokens(), pool.Blocks()
	st, err := sched.New(sc)
	if err != nil {
		pool.Close()
		return nil, err
	}
	r := &runner{index: index, id: id, noCache: rc.noCache, spec: rc.spec, attnMin: rc.attnMin, tok: tok, batch: m.NewBatch(), pool: pool, st: st,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), live: map[sched.ID]*job{}, stats: stats,
		gjobs: map[sched.ID]*job{}, maskSlots: make(chan struct{}, maskWorkers)}
	if rc.spec.Pool {
		r.ngrams = spec.NewPool(0, 0)
	}
	if rc.draft != nil {
		if r.drafter, err = newDrafter(rc.draft, st.Config().StepTokens); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return r, nil
}

// warmUp runs one forward pass of token t, so that a replica is ready only once the
// model's pages and the kernels have been through once.
func (r *runner) warmUp(t int32) error {
	kv := r.pool.NewSeq("\x00warm-up")
	defer kv.Release()
	if err := kv.Grow(1); err != nil {
		return err
	}
	_, err := r.batch.Forward([]model.Item{{KV: kv, Tokens: []int32{t}, Logits: 1}})
	return err
}

// submit hands a job to the runner's loop.
func (r *runner) submit(j *job) {
	r.mu.Lock()
	r.inbox = append(r.inbox, j)
	r.mu.Unlock()
	signal(r.wake)
}

// do runs f on the loop's goroutine between two steps and waits for it.
func (r *runner) do(f func()) {
	done := make(chan struct{})
	r.mu.Lock()
	r.calls = append(r.calls, func() { f(); close(done) })
	r.mu.Unlock()
	signal(r.wake)
	select {
	case <-done:
	case <-r.done:
	}
}

// close stops the loop (after its jobs have ended) and frees the pool.
func (r *runner) close() {
	close(r.stop)
	<-r.done
	r.pool.Close()
	if r.drafter != nil {
		r.drafter.close()
	}
}

// loop is the replica's goroutine: take submissions, plan a step, run it, deliver.
func (r *runner) loop() {
	defer close(r.done)
	var timer *time.Timer
	for {
		now := time.Now()
		r.intake(now)
		r.reap()
		r.masks()
		began := time.Now()
		r.propose()
		step := r.st.Plan(now, r.cached)
		r.untake(step)
		r.st.Apply(now, step)
		work := r.prepare(now, step)
		r.publishStats()
		if len(work) > 0 {
			n, decode := decodeTokens(work)
			r.run(work)
			if decode {
				r.steps.Observe(n, time.Since(began).Seconds()) // drafting, the step and sampling
			}
			continue
		}
		var wakeAt <-chan time.Time
		if !step.WakeAt.IsZero() {
			d := time.Until(step.WakeAt)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			wakeAt = timer.C
		}
		select {
		case <-r.wake:
		case <-wakeAt:
		case <-r.stop:
			r.failAll(ErrClosed)
			return
		}
		if timer != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// intake enqueues the inbox's jobs.
func (r *runner) intake(now time.Time) {
	r.mu.Lock()
	in, calls := r.inbox, r.calls
	r.inbox, r.calls = nil, nil
	r.mu.Unlock()
	for _, f := range calls {
		f()
	}
	for _, j := range in {
		r.nextID++
		id := r.nextID
		class := sched.Interactive
		if j.req.Priority == Batch {
			class = sched.Batch
		}
		err := r.st.Enqueue(now, sched.Request{ID: id, Tenant: j.req.Tenant, Weight: j.req.Weight, Class: class,
			Prompt: len(j.req.Prompt), MaxTokens: j.max, Chunk: j.chunk})
		if err != nil {
			if errors.Is(err, sched.ErrTooLong) {
				err = fmt.Errorf("%w: model %s: %w", ErrTooLong, r.id, err)
			}
			j.finish(j.u, err)
			continue
		}
		r.live[id] = j
		if j.gm != nil && !j.req.PromptOnly { // a prompt-only request samples nothing: no mask
			r.gjobs[id] = j
		}
	}
}

// reap ends the jobs whose context is done (the client went away): their slot and KV
// blocks are free for this step.
func (r *runner) reap() {
	for id, j := range r.live {
		if j.ctx.Err() == nil {
			continue
		}
		r.st.Remove(id)
		r.end(id, j, FinishCancelled, nil)
	}
}

// cached is Plan's Cached: the prefix of a joining job that the prefix cache holds,
// taken now (its warm blocks replayed into hot ones), so that the job's work starts
// after it. Taken, the blocks are the job's: a replay for a later join of the step
// cannot evict them, and the plan's work is what runs. Asked again in the same Plan,
// it answers the same; untake gives back what the plan did not join.
func (r *runner) cached(id sched.ID) int {
	j := r.live[id]
	if r.noCache || j == nil || j.pool != model.PoolNone || j.promptRows() {
		return 0 // an embedding needs every position's hidden state, prompt logprobs every position's logits
	}
	if j.kv == nil {
		j.kv = r.pool.NewSeq(cacheSalt(j.req, r.attnMin))
		j.kv.Prefix(j.tokens[:len(j.tokens)-1])
		r.taken = append(r.taken, id)
	}
	return j.kv.Cached()
}

// untake releases the prefixes cached took for jobs the step does not join.
func (r *runner) untake(step sched.Step) {
	for _, id := range r.taken {
		if j := r.live[id]; j != nil && j.kv != nil && !slices.Contains(step.Join, id) {
			j.kv.Release()
			j.kv = nil
		}
	}
	r.taken = r.taken[:0]
}

// prepare applies a step's preemptions and joins and returns the batch to run: the
// plan's work, the joining sequences' cached prefixes taken (by cached, during Plan).
func (r *runner) prepare(now time.Time, step sched.Step) []sched.Work {
	for _, id := range step.Preempt {
		// Its full blocks were published after each step and stay cached.
		if j := r.live[id]; j != nil && j.kv != nil {
			j.kv.Release()
			j.kv = nil
		}
	}
	for _, id := range step.Join {
		j := r.live[id]
		cached := 0
		if j.kv == nil { // cached took nothing: no prefix cache for it
			j.kv = r.pool.NewSeq(cacheSalt(j.req, r.attnMin))
		} else {
			cached = j.kv.Cached() // where Plan started its work
		}
		if j.pool != model.PoolNone {
			clear(j.embed) // (re)computed from the first token: cached blocks hold no hidden states (cached said 0)
		}
		if !j.joined {
			j.joined = true
			j.u.QueueTime = now.Sub(j.start)
			j.u.CachedTokens = cached
		}
	}
	return step.Work
}

// run computes one step and delivers its tokens.
func (r *runner) run(work []sched.Work) {
	items, ran := r.items[:0], r.ran[:0]
	defer func() { clear(items); r.items, r.ran = items[:0], ran[:0] }() // no stale Seqs kept alive
	n := 0
	for _, w := range work {
		j := r.live[w.ID]
		if err := j.kv.Grow(w.Start + w.N); err != nil {
			// The scheduler counts the pool's blocks, so this is a bug; fail the job, not the batch.
			r.st.Remove(w.ID)
			r.end(w.ID, j, "", fmt.Errorf("engine: model %s: %w", r.id, err))
			continue
		}
		logits := 0
		if w.Sample && j.pool == model.PoolNone {
			logits = 1
		}
		if j.promptRows() {
			logits = w.N // every position's row: the prompt's logprobs
		}
		toks := j.tokens[w.Start : w.Start+w.N]
		if w.Draft > 0 {
			toks, logits = j.verifyTokens(w), w.N // every position's row, to verify
		}
		items = append(items, model.Item{KV: j.kv, Start: w.Start, Tokens: toks, Logits: logits,
			Pool: j.pool, Embed: j.embed, Attn: model.AttentionFor(len(j.req.Prompt), r.attnMin), LoRA: j.loras})
		ran = append(ran, w)
		n += w.N
	}
	if len(items) == 0 {
		return
	}
	out, err := r.batch.Forward(items)
	r.stats.steps.Add(1)
	r.stats.stepTokens.Add(uint64(n))
	r.stats.stepSeqs.Add(uint64(len(items)))
	for k, w := range ran {
		j := r.live[w.ID]
		if err != nil {
			r.st.Remove(w.ID)
			r.end(w.ID, j, "", fmt.Errorf("engine: model %s: %w", r.id, err))
			continue
		}
		if w.Draft > 0 {
			r.verify(w, j, out[k]) // publishes the accepted tokens only
			continue
		}
		if !r.noCache {
			j.kv.Publish(j.tokens[:w.Start+w.N])
		}
		if w.Sample && r.specOn(j) {
			j.skip(nSources) // a decode without a verification: pauses run down
		}
		row := out[k]
		if j.promptRows() {
			j.promptLogprobs(row, w.Start, w.N)
			row = row[len(row)-len(row)/w.N:] // the last position's, to sample from
		}
		if !w.Sample {
			continue
		}
		if j.pool != model.PoolNone {
			j.vec = pooled(j.embed, j.pool, len(j.req.Prompt))
			if !w.Last {
				r.st.Remove(w.ID)
			}
			r.end(w.ID, j, FinishStop, nil)
			continue
		}
		for _, t := range j.ptoks {
			j.out.Send(t)
		}
		j.ptoks = nil
		if j.req.PromptOnly {
			if !w.Last {
				r.st.Remove(w.ID)
			}
			r.end(w.ID, j, FinishLength, nil)
			continue
		}
		id, err := j.pick(row)
		if err != nil {
			r.st.Remove(w.ID)
			r.end(w.ID, j, "", fmt.Errorf("engine: model %s: %w", r.id, err))
			continue
		}
		r.stats.decode(j.req.Tenant)
		if reason, over := j.accept(r.tok, id, row[id]); over {
			if !w.Last {
				r.st.Remove(w.ID)
			}
			r.end(w.ID, j, reason, nil)
		} else if w.Last {
			// The scheduler's count and the job's agree (max tokens); this is a bug if reached.
			r.end(w.ID, j, FinishLength, nil)
		} else if j.gm != nil {
			// The next token's mask: from the cache, or computed while the batch goes on.
			if err := r.nextMask(j); err != nil {
				r.st.Remove(w.ID)
				r.end(w.ID, j, "", err)
			}
		}
	}
}

// accept takes a sampled token: it delivers its text and reports whether the job is
// over (end of generation, a stop string, its max tokens) and why.
func (j *job) accept(tok *tokenizer.Tokenizer, id int32, logit float32) (string, bool) {
	now := time.Now()
	if j.first.IsZero() {
		j.first = now
		j.u.TimeToFirstToken = now.Sub(j.start)
	}
	j.last = now
	if tok.IsEOG(id) {
		j.text = append(j.text, j.dec.Flush()...)
		if len(j.text) > j.emitted {
			j.send(-1, 0, true)
		}
		return FinishStop, true
	}
	j.tokens = append(j.tokens, id)
	j.u.CompletionTokens++
	j.pred.Advance(id)
	j.text = append(j.text, j.dec.Next(id)...)
	complete := j.gm != nil && j.gm.Done() // the grammar's output is whole: nothing may follow
	full := j.u.CompletionTokens >= j.max || complete
	if full {
		j.text = append(j.text, j.dec.Flush()...)
	}
	if j.send(id, logit, full) || complete {
		return FinishStop, true
	}
	if full {
		return FinishLength, true
	}
	return "", false
}

// pick chooses the next token from the logits row of the job's last position: it
// records the logprobs asked for (from the raw row), removes the end-of-generation
// tokens under ignore_eos, masks the row with the grammar, samples, and advances the
// grammar. The row is the step's own memory, changed in place.
func (j *job) pick(row []float32) (int32, error) {
	j.lp = Token{}
	if j.vocab == nil {
		return j.smp.Sample(row, j.tokens), nil
	}
	wantLP := j.req.Logprobs || j.req.TopLogprobs > 0
	lse := 0.0
	if wantLP {
		lse = sample.LogSumExp(row)
		sample.TopLogprobs(row, lse, j.top)
	}
	if j.req.Sampling.IgnoreEOS {
		for _, id := range j.vocab.eog {
			row[id] = float32(math.Inf(-1))
		}
	}
	var allow []uint64
	if j.gm != nil {
		if !j.mask.ready {
			if err := j.waitMask(); err != nil {
				return -1, err
			}
		}
		bits, n := j.mask.bits, j.mask.n
		if n == 0 {
			return -1, fmt.Errorf("%w: no token of the vocabulary continues the output", ErrGrammar)
		}
		allow = bits
	}
	id := j.smp.SampleMasked(row, j.tokens, allow)
	if id < 0 {
		return -1, fmt.Errorf("%w: no token of the vocabulary continues the output", ErrGrammar)
	}
	if j.gm != nil && !j.gm.Accept(id) {
		return -1, fmt.Errorf("%w: token %d refused after its mask allowed it", ErrGrammar, id)
	}
	if wantLP {
		// row[id] is still the model's logit: ignore_eos changed only tokens it then
		// never picks.
		j.lp.Piece = j.vocab.pieces[id]
		j.lp.Logprob = float32(float64(row[id]) - lse)
		if len(j.top) > 0 {
			j.lp.TopLogprobs = make([]TopLogprob, 0, len(j.top))
			for _, t := range j.top {
				if t.ID >= 0 {
					j.lp.TopLogprobs = append(j.lp.TopLogprobs, TopLogprob{ID: t.ID, Piece: j.vocab.pieces[t.ID], Logprob: t.Logprob})
				}
			}
		}
	}
	return id, nil
}

// cacheSalt is a request's prefix-cache salt: its CacheSalt, marked when the
// request's sequence runs in model.AttnF32 mode (model.AttentionFor its prompt), so
// that cached blocks are only ever reused by sequences of the mode that computed
// them: the modes' K and V rows differ in their bits, and a reused block must be the
// bits the sequence would compute itself.
func cacheSalt(req Request, attnMin int) string {
	if model.AttentionFor(len(req.Prompt), attnMin) == model.AttnF32 {
		return req.CacheSalt + "\x00attn-f32"
	}
	return req.CacheSalt
}

// promptRows reports whether the job still needs its prompt's logits rows.
func (j *job) promptRows() bool { return j.req.PromptLogprobs && j.pnext < len(j.req.Prompt) }

// promptLogprobs turns a prefill chunk's logits rows (positions start … start+n-1,
// token-major) into the prompt tokens they predict, with their logprobs, kept in
// ptoks until the first output token is sent. Positions delivered before (a
// preempted sequence computes its prompt again) are skipped; the first prompt token
// has no logprob.
func (j *job) promptLogprobs(rows []float32, start, n int) {
	prompt := j.req.Prompt
	v := len(rows) / n
	token := func(p int) Token {
		id := prompt[p]
		t := Token{ID: id, Prompt: true, Piece: j.vocab.pieces[id], Text: j.pdec.Next(id)}
		if p == len(prompt)-1 {
			t.Text += j.pdec.Flush()
		}
		return t
	}
	if j.pnext == 0 {
		j.ptoks = append(j.ptoks, token(0))
		j.pnext = 1
	}
	for q := max(start, j.pnext-1); q < start+n && q+1 < len(prompt); q++ {
		row := rows[(q-start)*v : (q-start+1)*v]
		t := token(q + 1)
		lse := sample.LogSumExp(row)
		t.Logprob = float32(float64(row[t.ID]) - lse)
		if len(j.top) > 0 {
			sample.TopLogprobs(row, lse, j.top)
			t.TopLogprobs = make([]TopLogprob, 0, len(j.top))
			for _, tl := range j.top {
				if tl.ID >= 0 {
					t.TopLogprobs = append(t.TopLogprobs, TopLogprob{ID: tl.ID, Piece: j.vocab.pieces[tl.ID], Logprob: tl.Logprob})
				}
			}
		}
		j.ptoks = append(j.ptoks, t)
		j.pnext = q + 2
	}
}

// send delivers the text that no stop string can still claim; it reports whether a
// stop string matched.
func (j *job) send(id int32, logit float32, final bool) bool {
	safe, stopped := j.stop.Check(string(j.text))
	if final && !stopped {
		safe = len(j.text)
	}
	t := Token{ID: id, Text: string(j.text[j.emitted:safe]), Logit: logit}
	if id >= 0 && (j.req.Logprobs || j.req.TopLogprobs > 0) {
		t.Piece, t.Logprob, t.TopLogprobs = j.lp.Piece, j.lp.Logprob, j.lp.TopLogprobs
	}
	j.out.Send(t)
	j.emitted = safe
	if stopped {
		j.u.StopSequence = j.stop.Matched()
	}
	return stopped
}

// end finishes a job: its KV blocks go back to the pool (full ones stay cached) and
// its usage to the request.
func (r *runner) end(id sched.ID, j *job, reason string, err error) {
	if j.kv != nil {
		j.kv.Release()
		j.kv = nil
	}
	delete(r.live, id)
	delete(r.gjobs, id)
	if r.ngrams != nil && err == nil && j.pool == model.PoolNone {
		r.ngrams.Add(j.req.Tenant, j.tokens[len(j.req.Prompt):]) // the tenant's own pool only
	}
	j.stopMask()
	if j.smp != nil {
		j.smp.Release() // its vocabulary-sized buffers go to the next request's sampler
	}
	j.u.FinishReason = reason
	j.u.Replica = r.index
	if j.u.CompletionTokens > 1 {
		j.u.TimePerOutputToken = j.last.Sub(j.first) / time.Duration(j.u.CompletionTokens-1)
	}
	j.finish(j.u, err)
}

// failAll ends every job with err (the runner is stopping).
func (r *runner) failAll(err error) {
	r.intake(time.Now())
	for id, j := range r.live {
		r.st.Remove(id)
		r.end(id, j, "", err)
	}
}

func (r *runner) publishStats() {
	r.running.Store(int64(r.st.Running()))
	r.waiting.Store(int64(r.st.Waiting()))
}
