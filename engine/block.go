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

const kvBlockTokens = 16 // tokens per KV block

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

	// The janitor (janitor.go) owns the lifecycle; these are its mailboxes.
	begins    chan *beginReq                                   // requests' begins (Generate, Embed, Load, LoadAdapter)
	ends      chan endMsg                                      // requests' ends
	calls     chan func()                                      // everything else, run on the janitor
	kick      chan struct{}                                    // cap 1: decide again
	done      chan struct{}                                    // closed when the janitor has stopped
	life      janitorState                                     // owned by the janitor goroutine
	lio       leaseIO                                          // the lease store's calls, off the janitor
	leaseDone sync.WaitGroup                                   // the lease calls' goroutine
	startLoad func(in *instance, la *loadAttempt, reload bool) // starts a load off the janitor (tests script it)

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

	// mu guards the adapter slots' load state (adapters.go).
	mu sync.Mutex

	// life is the model's lifecycle, the janitor's alone (janitor.go).
	life lifeState
}

// New builds a Block and starts loading its models in the background; Ready reports
// when they are all loaded and warmed up. Each model file is opened once here to read
// its tokenizer, template and shape, so a missing or malformed file fails New at once.
func New(cfg Config) (*Block, error) {
	if len(cfg.Models) == 0 {
		return nil, configErrorf("engine: no models configured")
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
	b := newBlock(cfg, log)
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
			return nil, configErrorf("engine: a model has no model_id (path %q)", mc.Path)
		}
		if _, dup := b.models[mc.ID]; dup {
			return nil, configErrorf("engine: model_id %q configured twice", mc.ID)
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
			return nil, configErrorf("engine: model %s: device %q not found (devices: %s)", id, in.device(), strings.Join(slices.Sorted(maps.Keys(b.budgets)), ", "))
		}
		if need := in.leaseBytes(); need > budget {
			return nil, fmt.Errorf("%w: model %s needs %d MiB (weights + KV pools of %d replicas for max_model_len × max_model_concurrency), the budget of %s is %d MiB",
				ErrNoMemory, id, need>>20, in.cfg.Replicas, in.device(), budget>>20)
		}
	}
	if p, ok := b.leases.(preempter); ok {
		// Other processes ask for our idle models' memory on this store's channel.
		stop, err := p.Listen(b.onPreempt)
		if err != nil {
			return nil, fmt.Errorf("engine: memory leases: %w", err)
		}
		b.stopListen = stop
	}
	for _, id := range b.order {
		b.models[id].life.attempt = newLoadAttempt() // every model is wanted at start
	}
	b.leaseDone.Add(1)
	go b.runLeaseIO()
	go b.runJanitor()
	signal(b.kick)
	return b, nil
}

// newBlock is a Block without models, its janitor not started.
func newBlock(cfg Config, log *slog.Logger) *Block {
	b := &Block{cfg: cfg, log: log, models: map[string]*instance{}, leases: cfg.Leases,
		begins: make(chan *beginReq), ends: make(chan endMsg, 256), calls: make(chan func()),
		kick: make(chan struct{}, 1), done: make(chan struct{}), lio: leaseIO{wake: make(chan struct{}, 1)},
		ttl: cmp.Or(cfg.LeaseTTL, leaseTTL), proc: fmt.Sprintf("%d-%x", os.Getpid(), rand.Uint32())}
	if b.leases == nil {
		b.leases = &lease.Memory{}
	}
	b.startLoad = func(in *instance, la *loadAttempt, reload bool) { go in.load(la, reload) }
	return b
}

func newInstance(b *Block, mc ModelConfig, log *slog.Logger) (*instance, error) {
	mf, err := openModelFile(mc)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	f, tok, tmpl, cfg := mf.File, mf.tok, mf.tmpl, mf.cfg
	mc.MaxModelLen = mf.maxLen
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
		return nil, configErrorf("engine: model %s: max_queue %d is negative", mc.ID, mc.MaxQueue)
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
			return nil, configErrorf("engine: model %s: kv_cache_bytes %d holds %d blocks of %d tokens, less than one sequence of max_model_len %d needs (%d)",
				mc.ID, mc.KVCacheBytes, kc.Blocks, kvBlockTokens, mc.MaxModelLen, one)
		}
	}
	if mc.KVWarmFile != "" && mc.Replicas > 1 {
		return nil, configErrorf("engine: model %s: kv_warm_file serves one replica; use kv_warm_bytes in memory with %d replicas", mc.ID, mc.Replicas)
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
	return &instance{b: b, cfg: mc, log: log.With("model", mc.ID), tok: tok, tmpl: tmpl, rc: rc, kvSize: perReplica, fileSize: f.Size(), hdr: f.Header("tokenizer."), life: lifeState{state: StateUnloaded},
		pool: poolingOf(f, mc), dim: cfg.Dim, adapters: slots, adapterIDs: adapterIDs, adapterBudget: adapterBudget}, nil
}

// modelFile is a model's open file and what serving it needs before its weights
// (readMeta), with its length limit checked.
type modelFile struct {
	*gguf.File
	tok    *tokenizer.Tokenizer
	tmpl   *chat.Template
	cfg    model.Config
	maxLen int // mc.MaxModelLen, or the model's context length when not set
}

// openModelFile opens mc's file and reads its metadata; a max_model_len above the
// model's context length is an error. New and OpenPrep both start here; the caller
// closes the file.
func openModelFile(mc ModelConfig) (*modelFile, error) {
	f, err := gguf.Open(mc.Path)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: %w", mc.ID, err)
	}
	mf := &modelFile{File: f, maxLen: mc.MaxModelLen}
	if mf.tok, mf.tmpl, mf.cfg, err = readMeta(f, mc.ID); err != nil {
		f.Close()
		return nil, err
	}
	if mf.maxLen > mf.cfg.Context {
		f.Close()
		return nil, configErrorf("engine: model %s: max_model_len %d is above the model's context length %d", mc.ID, mf.maxLen, mf.cfg.Context)
	}
	if mf.maxLen <= 0 {
		mf.maxLen = mf.cfg.Context
	}
	return mf, nil
}

// readMeta reads what a model needs before its weights: the tokenizer, the chat
// template and the model's configuration.
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
	ready := true
	b.call(func() {
		for _, id := range b.order {
			l := &b.models[id].life
			if s := l.state; s != StateReady && s != StateUnloaded && (s != StateLoading || l.loads == 0) {
				ready = false
			}
		}
	})
	return ready
}

// Models reports each model's state, replicas and memory, in configuration order.
func (b *Block) Models() []ModelStatus {
	out := make([]ModelStatus, 0, len(b.order))
	b.call(func() { out = b.modelsNow(out) })
	return out
}

// modelsNow is Models on the janitor.
func (b *Block) modelsNow(out []ModelStatus) []ModelStatus {
	for _, id := range b.order {
		in := b.models[id]
		l := &in.life
		st := ModelStatus{ID: id, State: l.state, Replicas: in.cfg.Replicas, MaxModelLen: in.cfg.MaxModelLen,
			Queued: l.active, MaxQueue: in.cfg.MaxQueue,
			Steps: in.stats.steps.Load(), StepSeqs: in.stats.stepSeqs.Load(), StepTokens: in.stats.stepTokens.Load(),
			PredictionDraftTokens: in.stats.drafted[srcPrediction].Load(), PredictionAcceptedTokens: in.stats.accepted[srcPrediction].Load(),
			PoolDraftTokens: in.stats.drafted[srcPool].Load(), PoolAcceptedTokens: in.stats.accepted[srcPool].Load(),
			DraftModelDraftTokens: in.stats.drafted[srcDraft].Load(), DraftModelAcceptedTokens: in.stats.accepted[srcDraft].Load(),
			Loads: l.loads, Unloads: l.unloads, ColdStart: l.loadTime, Embeddings: in.pool != model.PoolNone,
			GrammarMasks: in.vocab.maskStats()}
		for src := range nSources {
			st.DraftTokens += in.stats.drafted[src].Load()
			st.AcceptedTokens += in.stats.accepted[src].Load()
		}
		if l.reps != nil {
			in.mu.Lock()
			st.MemoryBytes = l.file.Size() + int64(len(l.reps.reps))*in.kvSize + in.loadedAdapterBytesLocked()
			in.mu.Unlock()
			st.ExpertLoad = l.reps.model.ExpertLoad()
			for _, r := range l.reps.reps {
				st.QueueDepth += int(r.waiting.Load())
				st.Running += int(r.running.Load())
				st.KV = addKV(st.KV, r.pool.Stats())
			}
		}
		if l.err != nil {
			st.Err = l.err.Error()
		}
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
	g := b.begin(in, 0, true) // wants the model; counts no request
	if g.err != nil {
		return g.err
	}
	if g.h != nil {
		return nil
	}
	_, _, err := await(ctx, g.la)
	return err
}

// Unload unloads a model now if no request is using it.
func (b *Block) Unload(modelID string) error {
	in, ok := b.models[modelID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	var err error
	released := make(chan struct{})
	b.call(func() {
		select {
		case <-b.done: // after Close: nothing to do, every model is unloaded
			close(released)
		default:
			err = b.unloadReq(in)
			// The lease's release is queued: wait for it, so that the memory is free
			// in the store when Unload returns.
			b.lio.do("unload done", func() func() { close(released); return nil })
		}
	})
	<-released
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
	var reps []*runner
	b.call(func() {
		if in.life.reps != nil {
			reps = in.life.reps.reps
		}
	})
	for _, r := range reps {
		r.do(func() { r.pool.DemoteAll() })
	}
	return nil
}

// Close refuses new requests, waits for those in flight, and unloads every model
// (waiting for loads in progress).
func (b *Block) Close() error {
	var closed chan struct{}
	b.call(func() {
		if !b.life.closing {
			b.life.closing, b.life.closed = true, make(chan struct{})
			closed = b.life.closed
		}
	})
	if closed == nil {
		<-b.done
		b.leaseDone.Wait()
		return nil
	}
	<-b.done // the janitor stops once every request has ended and every model is unloaded
	if b.stopListen != nil {
		b.stopListen()
	}
	b.leaseDone.Wait() // the releases
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
