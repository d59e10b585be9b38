package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/device"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/engine/model"
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
	// Devices is the lease budget of each device ("host", "gpu:N"); nil:
	// device.Probe().Capacities(the host budget): host plus the GPUs NVML finds. A
	// configured MemoryBudget replaces the host entry.
	Devices map[string]int64
	// LeaseTTL is how long a model's memory lease lives without a heartbeat (the
	// janitor beats every TTL/3, and at least every second); 0: 30 s.
	LeaseTTL time.Duration
	MaxQueue int // requests waiting per model beyond its running slots: the default of ModelConfig.MaxQueue is this + Replicas × MaxModelConcurrency; 0: DefaultMaxQueue
	Logger   *slog.Logger

	// Clock is the lifecycle's time: idle timeouts, lease expiry and heartbeats (the
	// janitor still wakes every real second). nil: time.Now. Batching and the
	// timings of Usage always use the real time.
	Clock func() time.Time
}

// leaseTTL is the default of Config.LeaseTTL.
const leaseTTL = 30 * time.Second

// batchChunkFor is how long after an interactive arrival a model's BatchChunkTokens
// caps batch prefill (sched.Config.BatchChunkFor): with no interactive request for
// this long, batch prefills at the step budget.
const batchChunkFor = 10 * time.Second

// Block serves a set of models: it loads each one (memory-mapped), warms it up,
// runs requests on its replicas, unloads it when idle and reloads it on demand.
//
// Each replica is a runner: one goroutine that batches its model's concurrent
// requests step by step (engine/sched decides, over a paged kvcache.Pool; see
// runner.go). Requests go to the replicas round-robin.
type Block struct {
	cfg     Config
	log     *slog.Logger
	models  map[string]*instance
	order   []string
	leases  lease.Store
	budgets map[string]int64 // lease budget of each device
	ttl     time.Duration    // of the leases
	proc    string           // this process in lease holders: model@proc

	mu       sync.Mutex  // orders Generate's inflight.Add before Close's inflight.Wait
	closed   atomic.Bool // set once by Close, under mu; read anywhere
	inflight sync.WaitGroup
	stop     chan struct{} // closed by Close: stops the janitor
	janitor  sync.WaitGroup
	kick     chan struct{} // cap 1: the janitor should decide again (a model is wanted, a load ended)
	reqs     chan passReq  // passes asked for by GC, Close and tests
	ended    chan lifeEnd  // loads and preemptions report their ends to the janitor
	life     janitorState  // owned by the janitor goroutine

	stopListen func() // the store's preempt requests (preempter), if it has them

	schemas grammar.SchemaCache // compiled JSON schemas (constrain.go)
}

// now is the lifecycle's time.
func (b *Block) now() time.Time { return b.cfg.Clock() }

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
	kvSize   int64 // bytes per replica: its KV pool, and its draft model's weights and KV pool (draft.go)
	fileSize int64
	hdr      *gguf.File // the file's parsed header but its vocabulary (tok has it): each load maps the file again with it (Remap)
	stats    runnerStats
	vocab    vocabInfo     // the vocabulary as bytes, built on first use (constrain.go)
	pool     model.Pooling // how Embed pools, PoolNone when the model does not embed (embed.go)
	dim      int           // the embedding's length
	// The configured adapters (adapters.go): the map and ids are immutable, each
	// slot's load state is guarded by mu.
	adapters      map[string]*adapterSlot
	adapterIDs    []string // in configuration order
	adapterBudget int64    // bytes of adapters loaded at once, in the lease

	// mu guards everything below. Only the janitor (janitor.go) writes the lifecycle:
	// state, err, file, model, replicas, lease, loadTime, loads and unloads; requests
	// write active, lastUsed, keep and rr, and a request that waits for an unloaded
	// model sets attempt (it wants it loaded).
	mu       sync.Mutex
	state    ModelState
	err      error
	file     *gguf.File
	model    *model.Model
	replicas []*runner     // while loaded
	attempt  *loadAttempt  // StateLoading: the load in progress; StateUnloaded: the load someone waits for (the model is wanted)
	lease    lease.Lease   // held while loading and loaded
	loadTime time.Duration // of the last load
	active   int           // requests submitted and not finished
	loads    uint64
	unloads  uint64
	lastUsed time.Time
	keep     time.Duration // the KeepAlive of the last request that ended (0: none)
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
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &Block{cfg: cfg, log: log, models: map[string]*instance{}, stop: make(chan struct{}), leases: cfg.Leases,
		kick: make(chan struct{}, 1), reqs: make(chan passReq), ended: make(chan lifeEnd),
		life: janitorState{loading: map[*instance]bool{}, asking: map[*instance]bool{}},
		ttl:  cmp.Or(cfg.LeaseTTL, leaseTTL), proc: fmt.Sprintf("%d-%x", os.Getpid(), rand.Uint32())}
	if b.leases == nil {
		b.leases = &lease.Memory{}
	}
	hostBudget := cfg.MemoryBudget
	if hostBudget <= 0 {
		if hb := cfg.Devices[lease.HostDevice]; hb > 0 {
			hostBudget = hb
		} else if hb, err := lease.HostBudget(0); err == nil {
			hostBudget = hb
		} else {
			log.Warn("no memory budget: host memory unknown", "err", err)
			hostBudget = math.MaxInt64
		}
	}
	if cfg.Devices == nil {
		b.budgets = device.Probe().Capacities(hostBudget)
	} else {
		b.budgets = maps.Clone(cfg.Devices)
		b.budgets[lease.HostDevice] = hostBudget
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
			return nil, err
		}
		b.models[mc.ID] = inst
		b.order = append(b.order, mc.ID)
	}
	// A model that cannot fit even alone is a configuration error; models that fit
	// alone but not together take turns through their leases.
	for _, id := range b.order {
		in := b.models[id]
		budget, ok := b.budgets[in.device()]
		if !ok {
			return nil, fmt.Errorf("engine: model %s: device %q not found (devices: %s)", id, in.device(), strings.Join(slices.Sorted(maps.Keys(b.budgets)), ", "))
		}
		if need := in.leaseBytes(); need > budget {
			return nil, fmt.Errorf("%w: model %s needs %d MiB (weights + KV pools of %d replicas for max_model_len × max_model_concurrency), the budget of %s is %d MiB",
				ErrNoMemory, id, need>>20, in.cfg.Replicas, in.device(), budget>>20)
		}
	}
	for _, id := range b.order {
		b.models[id].attempt = newLoadAttempt() // every model is wanted at start
	}
	b.janitor.Add(1)
	go b.runJanitor()
	if p, ok := b.leases.(preempter); ok {
		// Other processes ask for our idle models' memory on this store's channel.
		stop, err := p.Listen(b.onPreempt)
		if err != nil {
			close(b.stop)
			b.janitor.Wait()
			return nil, fmt.Errorf("engine: memory leases: %w", err)
		}
		b.stopListen = stop
	}
	signal(b.kick)
	return b, nil
}

func newInstance(b *Block, mc ModelConfig, log *slog.Logger) (*instance, error) {
	f, err := gguf.Open(mc.Path)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: %w", mc.ID, err)
	}
	defer f.Close()
	tok, tmpl, cfg, err := readMeta(f, mc.ID)
	if err != nil {
		return nil, err
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
	if mc.MaxQueue < 0 {
		return nil, fmt.Errorf("engine: model %s: max_queue %d is negative", mc.ID, mc.MaxQueue)
	}
	if mc.MaxQueue == 0 {
		mc.MaxQueue = b.cfg.MaxQueue + mc.Replicas*mc.MaxModelConcurrency
	}
	kc := kvcache.Config{Layers: cfg.Layers, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim, BlockTokens: kvBlockTokens,
		WarmBytes: mc.KVWarmBytes, WarmFile: mc.KVWarmFile, WarmFileTag: warmFileTag(mc.Path, f.Size())}
	if kc.TypeK, kc.TypeV, err = kvTypes(mc, cfg.HeadDim); err != nil {
		return nil, err
	}
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
	slots, adapterIDs, adapterBudget, err := checkAdapters(mc, f.Architecture())
	if err != nil {
		return nil, err
	}
	rc := runnerConfig{kv: kc, noCache: mc.DisablePrefixCache, spec: mc.Speculative, attnMin: model.AttnF32MinPromptFor(mc.AttnF32MinPrompt, cfg.HeadDim), sched: sched.Config{MaxModelLen: mc.MaxModelLen, MaxConcurrency: mc.MaxModelConcurrency,
		BatchTimeout: mc.BatchExecuteTimeout, BatchChunk: mc.BatchChunkTokens, BatchChunkFor: batchChunkFor}} // sched has no queue limit: mc.MaxQueue, checked by Generate and Embed, is the only one
	perReplica := kc.Bytes()
	if mc.Speculative.DraftModel != "" {
		if rc.draft, err = newDraftConfig(b.cfg.Models, mc, tok); err != nil {
			return nil, err
		}
		perReplica += rc.draft.bytes()
	}
	return &instance{b: b, cfg: mc, log: log.With("model", mc.ID), tok: tok, tmpl: tmpl, rc: rc, kvSize: perReplica, fileSize: f.Size(), hdr: f.Header("tokenizer."), state: StateUnloaded,
		pool: poolingOf(f, mc), dim: cfg.Dim, adapters: slots, adapterIDs: adapterIDs, adapterBudget: adapterBudget}, nil
}

// readMeta reads what a model needs before its weights: the tokenizer, the chat
// template and the model's configuration (New and OpenPrep both start here).
func readMeta(f *gguf.File, id string) (*tokenizer.Tokenizer, *chat.Template, model.Config, error) {
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, nil, model.Config{}, fmt.Errorf("engine: model %s: %w", id, err)
	}
	cfg, err := model.ReadConfig(f)
	if err != nil {
		return nil, nil, model.Config{}, fmt.Errorf("engine: model %s: %w", id, err)
	}
	src, _ := f.GetString("tokenizer.chat_template")
	tmpl, err := chat.New(src, chat.Options{BOS: tokenText(tok, tok.BOS()), EOS: tokenText(tok, tok.EOS())})
	if err != nil {
		return nil, nil, model.Config{}, fmt.Errorf("engine: model %s: chat template: %w", id, err)
	}
	return tok, tmpl, cfg, nil
}

// warmFileTag names the model file a warm KV file's blocks were computed with: its
// path, size and modification time. A warm file left by another model (or by this
// path's previous contents) is not replayed.
func warmFileTag(path string, size int64) string {
	var mod int64
	if fi, err := os.Stat(path); err == nil {
		mod = fi.ModTime().UnixNano()
	}
	return fmt.Sprintf("%s size=%d mtime=%d", path, size, mod)
}

func tokenText(t *tokenizer.Tokenizer, id int32) string {
	if id < 0 || int(id) >= t.VocabSize() {
		return ""
	}
	return t.TokenText(id)
}

// device is the device the model leases its memory on.
func (in *instance) device() string { return cmp.Or(in.cfg.Device, lease.HostDevice) }

// leaseBytes is what the model leases: its weights and its replicas' KV pools.
func (in *instance) leaseBytes() int64 {
	return in.fileSize + in.adapterBudget + int64(in.cfg.Replicas)*in.kvSize
}

// Ready reports whether the Block can accept work: every model is ready, cleanly
// unloaded (scaled to zero: its next request reloads it), or coming back from an
// unload. Only the first loads (and a failed model) make it unready: a scale from
// zero must not take a server out of its load balancer. Ready never loads a model.
func (b *Block) Ready() bool {
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		s, back := in.state, in.loads > 0
		in.mu.Unlock()
		if s != StateReady && s != StateUnloaded && (s != StateLoading || !back) {
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
			Queued: in.active, MaxQueue: in.cfg.MaxQueue,
			Steps: in.stats.steps.Load(), StepSeqs: in.stats.stepSeqs.Load(), StepTokens: in.stats.stepTokens.Load(),
			PredictionDraftTokens: in.stats.drafted[srcPrediction].Load(), PredictionAcceptedTokens: in.stats.accepted[srcPrediction].Load(),
			PoolDraftTokens: in.stats.drafted[srcPool].Load(), PoolAcceptedTokens: in.stats.accepted[srcPool].Load(),
			DraftModelDraftTokens: in.stats.drafted[srcDraft].Load(), DraftModelAcceptedTokens: in.stats.accepted[srcDraft].Load(),
			Loads: in.loads, Unloads: in.unloads, ColdStart: in.loadTime, Embeddings: in.pool != model.PoolNone,
			GrammarMasks: in.vocab.maskStats()}
		for src := range nSources {
			st.DraftTokens += in.stats.drafted[src].Load()
			st.AcceptedTokens += in.stats.accepted[src].Load()
		}
		if in.file != nil {
			st.MemoryBytes = in.file.Size() + int64(len(in.replicas))*in.kvSize + in.loadedAdapterBytesLocked()
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
	var err error
	b.request(passReq{unload: in, err: &err}) // after Close: nothing to do, every model is unloaded
	return err
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
		cm[i] = toChat(m)
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

// GC unloads idle models past their timeout, drops expired memory leases (of holders
// that stopped beating: a crashed process), and resets failed models to unloaded so
// that the next request retries them: one pass of the janitor, waited for.
func (b *Block) GC() { b.request(passReq{gc: true}) }

// Close refuses new requests, waits for those in flight, and unloads every model
// (waiting for loads in progress).
func (b *Block) Close() error {
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		return nil
	}
	b.closed.Store(true)
	b.mu.Unlock()
	b.inflight.Wait()
	if b.stopListen != nil {
		b.stopListen()
	}
	b.request(passReq{closing: true})
	close(b.stop)
	b.janitor.Wait()
	return nil
}

// kvTypes reads a model's kv_cache_type_k and kv_cache_type_v (an error matching
// kernels.ErrKVType otherwise): llama.cpp's names, and a block format only where the
// head size is a whole number of blocks.
func kvTypes(mc ModelConfig, hd int) (k, v kernels.KVType, err error) {
	for _, c := range []struct {
		name, val string
		dst       *kernels.KVType
	}{{"kv_cache_type_k", mc.KVCacheTypeK, &k}, {"kv_cache_type_v", mc.KVCacheTypeV, &v}} {
		t, err := kernels.ParseKVType(c.val)
		if err == nil {
			err = kernels.CheckKVType(t, hd)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("engine: model %s: %s: %w", mc.ID, c.name, err)
		}
		*c.dst = t
	}
	return k, v, nil
}
