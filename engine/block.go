package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/engine/sample"
	"github.com/lmlite/lmlite/engine/sched"
	"github.com/lmlite/lmlite/engine/tokenizer"
	"github.com/lmlite/lmlite/kvcache"
)

// Defaults of ModelConfig and Config fields left zero.
const (
	DefaultMaxModelConcurrency = 8
	DefaultIdleTimeout         = 5 * time.Minute
	DefaultMaxQueue            = 256
	kvBlockTokens              = 16 // tokens per KV block
)

// Config configures a Block. The zero value of each field takes its default.
type Config struct {
	Models       []ModelConfig
	MemoryBudget int64       // bytes the models may map and allocate (weights + KV); 0: host memory minus a margin (lease.HostBudget)
	Leases       lease.Store // where models lease their memory; nil: an in-process store
	MaxQueue     int         // requests waiting per model before Generate answers ErrQueueFull; 0: DefaultMaxQueue
	Logger       *slog.Logger
}

// leaseTTL is how long a model's memory lease lives without a heartbeat (the janitor
// beats every second).
const leaseTTL = 30 * time.Second

// Block serves a set of models: it loads each one (memory-mapped), warms it up,
// runs requests on its replicas, unloads it when idle and reloads it on demand.
//
// Each replica is a runner: one goroutine that batches its model's concurrent
// requests step by step (engine/sched decides, over a paged kvcache.Pool; see
// runner.go). Requests go to the replicas round-robin.
type Block struct {
	cfg    Config
	log    *slog.Logger
	models map[string]*instance
	order  []string
	leases lease.Store
	budget int64  // bytes of the host device
	proc   string // this process in lease holders: model@proc

	mu       sync.Mutex // guards closed
	closed   bool
	inflight sync.WaitGroup
	stop     chan struct{} // closed by Close: stops the janitor
	janitor  sync.WaitGroup

	schemas schemaCache // compiled JSON schemas (constrain.go)
}

// instance is one configured model and its loaded form, if any.
type instance struct {
	b   *Block
	cfg ModelConfig
	log *slog.Logger

	// Immutable after New: the tokenizer and template are small copies out of the file's
	// metadata, kept across unloads so that requests can be prepared while unloaded.
	tok      *tokenizer.Tokenizer
	tmpl     *chat.Template
	rc       runnerConfig
	kvSize   int64 // KV pool bytes per replica
	fileSize int64
	stats    runnerStats
	vocab    vocabInfo     // the vocabulary as bytes, built on first use (constrain.go)
	pool     model.Pooling // how Embed pools, PoolNone when the model does not embed (embed.go)
	dim      int           // the embedding's length

	mu       sync.Mutex // guards everything below
	state    ModelState
	err      error
	file     *gguf.File
	model    *model.Model
	replicas []*runner     // while loaded
	loading  *loadAttempt  // the load in progress or the last one
	lease    lease.Lease   // held while loaded
	loadTime time.Duration // of the last load
	active   int           // requests submitted and not finished
	loads    uint64
	unloads  uint64
	lastUsed time.Time
	rr       int
}

// New builds a Block and starts loading its models in the background; Ready reports
// when they are all loaded and warmed up. Each model file is opened once here to read
// its tokenizer, template and shape, so a missing or malformed file fails New at once.
func New(cfg Config) (*Block, error) {
	if len(cfg.Models) == 0 {
		return nil, fmt.Errorf("engine: no models configured")
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &Block{cfg: cfg, log: log, models: map[string]*instance{}, stop: make(chan struct{}), leases: cfg.Leases,
		budget: cfg.MemoryBudget, proc: fmt.Sprintf("%d-%x", os.Getpid(), rand.Uint32())}
	if b.leases == nil {
		b.leases = &lease.Memory{}
	}
	if b.budget <= 0 {
		hb, err := lease.HostBudget(0)
		if err != nil {
			log.Warn("no memory budget: host memory unknown", "err", err)
			hb = math.MaxInt64
		}
		b.budget = hb
	}
	for _, mc := range cfg.Models {
		if mc.ID == "" {
			return nil, fmt.Errorf("engine: a model has no model_id (path %q)", mc.Path)
		}
		if _, dup := b.models[mc.ID]; dup {
			return nil, fmt.Errorf("engine: model_id %q configured twice", mc.ID)
		}
		inst, err := newInstance(b, mc, log)
		if err != nil {
			b.closeAll()
			return nil, err
		}
		b.models[mc.ID] = inst
		b.order = append(b.order, mc.ID)
	}
	// A model that cannot fit even alone is a configuration error; models that fit
	// alone but not together take turns through their leases.
	for _, id := range b.order {
		if need := b.models[id].leaseBytes(); need > b.budget {
			return nil, fmt.Errorf("%w: model %s needs %d MiB (weights + KV pools of %d replicas for max_model_len × max_model_concurrency), the budget is %d MiB",
				ErrNoMemory, id, need>>20, b.models[id].cfg.Replicas, b.budget>>20)
		}
	}
	for _, id := range b.order {
		b.models[id].startLoad()
	}
	b.janitor.Add(1)
	go b.runJanitor()
	return b, nil
}

func newInstance(b *Block, mc ModelConfig, log *slog.Logger) (*instance, error) {
	f, err := gguf.Open(mc.Path)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: %w", mc.ID, err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: %w", mc.ID, err)
	}
	cfg, err := model.ReadConfig(f)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: %w", mc.ID, err)
	}
	src, _ := f.GetString("tokenizer.chat_template")
	tmpl, err := chat.New(src, chat.Options{BOS: tokenText(tok, tok.BOS()), EOS: tokenText(tok, tok.EOS())})
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: chat template: %w", mc.ID, err)
	}
	if mc.MaxModelLen <= 0 || mc.MaxModelLen > cfg.Context {
		if mc.MaxModelLen > cfg.Context {
			return nil, fmt.Errorf("engine: model %s: max_model_len %d is above the model's context length %d", mc.ID, mc.MaxModelLen, cfg.Context)
		}
		mc.MaxModelLen = cfg.Context
	}
	if mc.MaxModelConcurrency <= 0 {
		mc.MaxModelConcurrency = DefaultMaxModelConcurrency
	}
	if mc.Replicas <= 0 {
		mc.Replicas = 1
	}
	if mc.IdleTimeout == 0 {
		mc.IdleTimeout = DefaultIdleTimeout
	}
	kc := kvcache.Config{Layers: cfg.Layers, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim, BlockTokens: kvBlockTokens,
		WarmBytes: mc.KVWarmBytes, WarmFile: mc.KVWarmFile}
	kc.Blocks = kc.BlocksFor(mc.MaxModelLen+1, mc.MaxModelConcurrency, 0)
	if mc.KVCacheBytes > 0 {
		kc.Blocks = int(mc.KVCacheBytes / kc.BlockBytes())
		if one := kc.BlocksFor(mc.MaxModelLen+1, 1, 0); kc.Blocks < one {
			return nil, fmt.Errorf("engine: model %s: kv_cache_bytes %d holds %d blocks of %d tokens, less than one sequence of max_model_len %d needs (%d)",
				mc.ID, mc.KVCacheBytes, kc.Blocks, kvBlockTokens, mc.MaxModelLen, one)
		}
	}
	if mc.KVWarmFile != "" && mc.Replicas > 1 {
		return nil, fmt.Errorf("engine: model %s: kv_warm_file serves one replica; use kv_warm_bytes in memory with %d replicas", mc.ID, mc.Replicas)
	}
	rc := runnerConfig{kv: kc, noCache: mc.DisablePrefixCache, sched: sched.Config{MaxModelLen: mc.MaxModelLen, MaxConcurrency: mc.MaxModelConcurrency,
		BatchTimeout: mc.BatchExecuteTimeout, MaxQueue: 1 << 30}}
	return &instance{b: b, cfg: mc, log: log.With("model", mc.ID), tok: tok, tmpl: tmpl, rc: rc, kvSize: kc.Bytes(), fileSize: f.Size(), state: StateUnloaded,
		pool: poolingOf(f, mc), dim: cfg.Dim}, nil
}

func tokenText(t *tokenizer.Tokenizer, id int32) string {
	if id < 0 || int(id) >= t.VocabSize() {
		return ""
	}
	return t.TokenText(id)
}

// startLoad begins loading the model unless it is loaded or loading.
func (in *instance) startLoad() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.startLoadLocked()
}

func (in *instance) startLoadLocked() {
	if in.state == StateReady || in.state == StateLoading {
		return
	}
	in.state, in.err = StateLoading, nil
	in.loading = &loadAttempt{done: make(chan struct{})}
	go in.load(in.loading)
}

// loadAttempt is one load: done is closed when it ends, with err set if it failed.
type loadAttempt struct {
	done chan struct{}
	err  error
}

// leaseBytes is what the model leases: its weights and its replicas' KV pools.
func (in *instance) leaseBytes() int64 {
	return in.fileSize + int64(in.cfg.Replicas)*in.kvSize
}

// load leases the model's memory (unloading idle models of lower priority if it must),
// maps the file, builds the replicas and warms each up with a forward pass (the model
// is ready only after that).
func (in *instance) load(la *loadAttempt) {
	start := time.Now()
	l, err := in.acquire()
	var f *gguf.File
	var m *model.Model
	var reps []*runner
	if err == nil {
		if f, m, reps, err = in.open(); err != nil {
			in.b.leases.Release(context.Background(), l.Device, l.Holder)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	defer close(la.done)
	in.loadTime = time.Since(start)
	if err != nil {
		la.err = err
		if errors.Is(err, ErrNoMemory) {
			// Not a broken model: it stays unloaded, and the next request tries again.
			in.state = StateUnloaded
			in.log.Warn("model not loaded: no memory", "err", err)
			return
		}
		in.state, in.err = StateFailed, err
		in.log.Error("model failed to load", "err", err)
		return
	}
	in.file, in.model, in.replicas, in.lease = f, m, reps, l
	in.loads++
	in.state, in.lastUsed = StateReady, time.Now()
	in.log.Info("model ready", "load_ms", in.loadTime.Milliseconds(), "replicas", in.cfg.Replicas)
}

// acquire leases the model's bytes on the host device.
func (in *instance) acquire() (lease.Lease, error) {
	want := lease.Lease{Device: lease.HostDevice, Holder: in.cfg.ID + "@" + in.b.proc, Bytes: in.leaseBytes(),
		Priority: in.cfg.Priority, TTL: leaseTTL} // not idle while it loads; the heartbeats say when it is
	l, err := lease.Acquire(context.Background(), in.b.leases, time.Now(), in.b.budget, want, in.b.unloadVictim)
	if errors.Is(err, lease.ErrNoMemory) {
		return l, fmt.Errorf("%w: model %s: %w", ErrNoMemory, in.cfg.ID, err)
	}
	if err != nil {
		return l, fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
	}
	return l, nil
}

// unloadVictim unloads the model holding lease v to make room for another: only if
// it is this process's, loaded and idle.
func (b *Block) unloadVictim(v lease.Lease) error {
	id, proc, _ := strings.Cut(v.Holder, "@")
	in, ok := b.models[id]
	if !ok || proc != b.proc {
		return fmt.Errorf("engine: lease %s is held by another process", v.Holder)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.active > 0 || in.state != StateReady {
		return fmt.Errorf("engine: model %s is busy again (%s, %d requests)", id, in.state, in.active)
	}
	in.unloadLocked()
	return nil
}

func (in *instance) open() (*gguf.File, *model.Model, []*runner, error) {
	f, err := gguf.Open(in.cfg.Path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
	}
	m, err := model.Load(f)
	if err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
	}
	warm := max(in.tok.BOS(), 0)
	var reps []*runner
	fail := func(err error) (*gguf.File, *model.Model, []*runner, error) {
		for _, r := range reps {
			r.pool.Close()
		}
		f.Close()
		return nil, nil, nil, fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
	}
	for i := range in.cfg.Replicas {
		r, err := newRunner(i, in.cfg.ID, m, in.tok, in.rc, &in.stats)
		if err != nil {
			return fail(err)
		}
		reps = append(reps, r)
		if err := r.warmUp(warm); err != nil {
			return fail(fmt.Errorf("warm-up: %w", err))
		}
	}
	for _, r := range reps {
		go r.loop()
	}
	return f, m, reps, nil
}

// unloadLocked stops the replicas and releases the mapping and the KV memory. No
// request may be in flight.
func (in *instance) unloadLocked() {
	if in.state != StateReady || in.active > 0 {
		return
	}
	for _, r := range in.replicas {
		r.close()
	}
	in.model, in.replicas = nil, nil
	if in.file != nil {
		in.file.Close()
		in.file = nil
	}
	if err := in.b.leases.Release(context.Background(), in.lease.Device, in.lease.Holder); err != nil && !errors.Is(err, lease.ErrNotHeld) {
		in.log.Warn("releasing the memory lease", "err", err)
	}
	in.lease = lease.Lease{}
	in.state = StateUnloaded
	in.unloads++
	in.log.Info("model unloaded")
}

// Ready reports whether every model is ready or cleanly unloaded (idle, reloadable).
func (b *Block) Ready() bool {
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		s := in.state
		in.mu.Unlock()
		if s != StateReady && s != StateUnloaded {
			return false
		}
	}
	return true
}

// Models reports each model's state, replicas and memory, in configuration order.
func (b *Block) Models() []ModelStatus {
	out := make([]ModelStatus, 0, len(b.order))
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		st := ModelStatus{ID: id, State: in.state, Replicas: in.cfg.Replicas, MaxModelLen: in.cfg.MaxModelLen,
			Steps: in.stats.steps.Load(), StepSeqs: in.stats.stepSeqs.Load(), StepTokens: in.stats.stepTokens.Load(),
			Loads: in.loads, Unloads: in.unloads, ColdStart: in.loadTime, Embeddings: in.pool != model.PoolNone}
		if in.file != nil {
			st.MemoryBytes = in.file.Size() + int64(len(in.replicas))*in.kvSize
		}
		if in.model != nil {
			st.ExpertLoad = in.model.ExpertLoad()
		}
		for _, r := range in.replicas {
			st.QueueDepth += int(r.waiting.Load())
			st.Running += int(r.running.Load())
			st.KV = addKV(st.KV, r.pool.Stats())
		}
		if in.err != nil {
			st.Err = in.err.Error()
		}
		in.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// addKV sums two pools' stats.
func addKV(a, b kvcache.Stats) kvcache.Stats {
	a.Lookups += b.Lookups
	a.HitTokens += b.HitTokens
	a.MissTokens += b.MissTokens
	a.Demotions += b.Demotions
	a.Replays += b.Replays
	a.Evictions += b.Evictions
	a.HotUsed += b.HotUsed
	a.HotCached += b.HotCached
	a.HotFree += b.HotFree
	a.WarmBlocks += b.WarmBlocks
	a.WarmSlots += b.WarmSlots
	a.HotBytes += b.HotBytes
	a.WarmBytes += b.WarmBytes
	a.BlockSize = b.BlockSize
	return a
}

// DecodedTokens reports how many output tokens a model has produced for each tenant
// since the Block started: the tenants' shares of its decode steps.
func (b *Block) DecodedTokens(modelID string) (map[string]int64, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	in.stats.mu.Lock()
	defer in.stats.mu.Unlock()
	return maps.Clone(in.stats.decoded), nil
}

// Load starts loading a model (if it is not loaded) and waits until it is ready.
func (b *Block) Load(ctx context.Context, modelID string) error {
	in, ok := b.models[modelID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	_, err := in.await(ctx)
	return err
}

// Unload unloads a model now if no request is using it.
func (b *Block) Unload(modelID string) error {
	in, ok := b.models[modelID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.active > 0 {
		return fmt.Errorf("engine: model %s has %d requests in flight", modelID, in.active)
	}
	in.unloadLocked()
	return nil
}

// Tokenize turns text into the model's tokens, with BOS when the vocabulary asks for
// it and special tokens parsed (chat templates write them as text).
func (b *Block) Tokenize(modelID, text string) ([]int32, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return in.tok.Encode(text, in.tok.AddBOS(), true), nil
}

// RenderChat renders messages with the model's chat template (ChatML when it has
// none), ready for the assistant's answer.
func (b *Block) RenderChat(modelID string, msgs []Message) (string, error) {
	in, ok := b.models[modelID]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message(m)
	}
	return in.tmpl.Render(cm, true)
}

// Tokenizer returns a model's tokenizer (for tools that decode ids themselves).
func (b *Block) Tokenizer(modelID string) (*tokenizer.Tokenizer, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return in.tok, nil
}

// Generate starts a request. Requests that can never run (unknown model, empty
// prompt, longer than MaxModelLen) and requests beyond the queue limit fail at once;
// the others stream their tokens and end with a Usage.
func (b *Block) Generate(ctx context.Context, modelID string, req Request) (*Stream, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	limit := in.cfg.MaxModelLen
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("engine: empty prompt (give at least BOS)")
	}
	for _, id := range req.Prompt {
		if id < 0 || int(id) >= in.tok.VocabSize() {
			return nil, fmt.Errorf("engine: prompt token %d is outside the vocabulary of %d", id, in.tok.VocabSize())
		}
	}
	if req.MaxTokens < 0 {
		return nil, fmt.Errorf("engine: max tokens %d is negative", req.MaxTokens)
	}
	if err := checkFeatures(&req); err != nil {
		return nil, err
	}
	if len(req.Prompt) >= limit || len(req.Prompt)+req.MaxTokens > limit {
		return nil, fmt.Errorf("%w: %d prompt tokens + %d max tokens > max_model_len %d of model %s",
			ErrTooLong, len(req.Prompt), req.MaxTokens, limit, modelID)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	in.mu.Lock()
	if in.active >= b.cfg.MaxQueue+in.cfg.Replicas*in.cfg.MaxModelConcurrency {
		in.mu.Unlock()
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: model %s has %d requests waiting", ErrQueueFull, modelID, in.active)
	}
	in.active++
	in.mu.Unlock()
	b.inflight.Add(1)
	b.mu.Unlock()

	s, tokens, finish := NewStream(16)
	go func() {
		defer b.inflight.Done()
		u, err := in.run(ctx, req, tokens)
		in.mu.Lock()
		in.active--
		in.lastUsed = time.Now()
		in.mu.Unlock()
		finish(u, err)
	}()
	return s, nil
}

// await waits until the model is ready, loading it if it was unloaded, and returns
// how long this call waited for a load (the cold start).
func (in *instance) await(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	waited := false
	for {
		in.mu.Lock()
		switch in.state {
		case StateReady:
			in.mu.Unlock()
			if waited {
				return time.Since(start), nil
			}
			return 0, nil
		case StateFailed:
			err := in.err
			in.mu.Unlock()
			return 0, err
		case StateUnloaded:
			in.startLoadLocked()
		}
		la := in.loading
		in.mu.Unlock()
		waited = true
		select {
		case <-la.done:
			if la.err != nil {
				return 0, la.err
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// run waits for the model, hands the request to a replica and forwards its tokens
// until it ends.
func (in *instance) run(ctx context.Context, req Request, out chan<- Token) (Usage, error) {
	start := time.Now()
	u := Usage{PromptTokens: len(req.Prompt)}
	cold, err := in.await(ctx)
	u.ColdStart = cold
	if err != nil {
		return u, finishErr(&u, err)
	}
	r := in.pick(req)

	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = in.cfg.MaxModelLen - len(req.Prompt)
	}
	s := req.Sampling
	j := &job{ctx: ctx, req: req, start: start, max: maxTokens, box: newMailbox(), u: u,
		tokens: append(make([]int32, 0, len(req.Prompt)+maxTokens), req.Prompt...),
		smp: sample.New(sample.Params{Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
			RepeatPenalty: s.RepeatPenalty, PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
			RepeatLastN: s.RepeatLastN, Seed: s.Seed}),
		dec:  in.tok.NewDecoder(),
		stop: sample.NewStopMatcher(req.Stop)}
	if req.Grammar != nil || req.Logprobs || req.TopLogprobs > 0 || s.IgnoreEOS {
		j.vocab = in.vocab.get(in.tok)
		if req.Grammar != nil {
			j.gm = j.vocab.vocab.NewMatcher(req.Grammar)
		}
		j.top = make([]sample.Logprob, req.TopLogprobs)
	}
	j.dec.Prime(req.Prompt)
	r.submit(j)

	var buf []Token
	forward := true
	for {
		select {
		case <-j.box.wake:
		case <-ctx.Done():
			forward = false // the runner sees it at its next step and ends the job
			<-j.box.wake
		}
		var done bool
		buf, done = j.box.take(buf)
		for _, t := range buf {
			if !forward {
				break
			}
			select {
			case out <- t:
			case <-ctx.Done():
				forward = false
			}
		}
		if done {
			j.box.mu.Lock()
			u, err := j.box.u, j.box.err
			j.box.mu.Unlock()
			if err == nil && u.FinishReason == "" {
				u.FinishReason = FinishCancelled
			}
			return u, err
		}
	}
}

// pick chooses the replica for a request: the one whose prefix cache holds the
// longest part of its prompt; ties (no hit anywhere, the usual case) go round-robin.
func (in *instance) pick(req Request) *runner {
	in.mu.Lock()
	reps, rr := in.replicas, in.rr
	in.rr++
	in.mu.Unlock()
	best, bestN := reps[rr%len(reps)], 0
	if len(reps) > 1 && !in.cfg.DisablePrefixCache {
		for i := range reps {
			r := reps[(rr+i)%len(reps)]
			if n := r.pool.Peek(req.CacheSalt, req.Prompt[:len(req.Prompt)-1]); n > bestN {
				best, bestN = r, n
			}
		}
	}
	return best
}

// DemoteCache moves a model's cached KV blocks that no request is using from the hot
// tier to the warm tier (dropping them without one), on every replica, as memory
// pressure would. For benchmarks and operators.
func (b *Block) DemoteCache(modelID string) error {
	in, ok := b.models[modelID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	in.mu.Lock()
	reps := in.replicas
	in.mu.Unlock()
	for _, r := range reps {
		r.do(func() { r.pool.DemoteAll() })
	}
	return nil
}

func finishErr(u *Usage, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		u.FinishReason = FinishCancelled
		return nil
	}
	return err
}

// runJanitor unloads models idle for longer than their IdleTimeout.
func (b *Block) runJanitor() {
	defer b.janitor.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case now := <-tick.C:
			b.unloadIdle(now)
			b.heartbeat(now)
		}
	}
}

// heartbeat renews the leases of the loaded models, telling the store which are idle.
func (b *Block) heartbeat(now time.Time) {
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		l, idle := in.lease, in.active == 0
		in.mu.Unlock()
		if l.Holder == "" {
			continue
		}
		if err := b.leases.Heartbeat(context.Background(), now, l.Device, l.Holder, idle); err != nil && !errors.Is(err, lease.ErrNotHeld) {
			in.log.Warn("memory lease heartbeat", "err", err)
		}
	}
}

func (b *Block) unloadIdle(now time.Time) {
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		if in.cfg.IdleTimeout > 0 && in.state == StateReady && in.active == 0 && now.Sub(in.lastUsed) >= in.cfg.IdleTimeout {
			in.unloadLocked()
		}
		in.mu.Unlock()
	}
}

// GC unloads idle models past their timeout, drops expired memory leases (of holders
// that stopped beating: a crashed process), and resets failed models to unloaded so
// that the next request retries them.
func (b *Block) GC() {
	now := time.Now()
	b.unloadIdle(now)
	if expired, err := b.leases.Expire(context.Background(), now); err != nil {
		b.log.Warn("expiring memory leases", "err", err)
	} else if len(expired) > 0 {
		b.log.Info("expired stale memory leases", "count", len(expired))
	}
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		if in.state == StateFailed {
			in.state, in.err = StateUnloaded, nil
		}
		in.mu.Unlock()
	}
}

// Close refuses new requests, waits for those in flight, and unloads every model.
func (b *Block) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	b.janitor.Wait()
	b.inflight.Wait()
	b.closeAll()
	return nil
}

func (b *Block) closeAll() {
	ids := make([]string, 0, len(b.models))
	for id := range b.models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		in := b.models[id]
		if in.loading != nil {
			<-in.loading.done
		}
		in.mu.Lock()
		in.unloadLocked()
		in.mu.Unlock()
	}
}
