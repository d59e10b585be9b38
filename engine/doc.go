// Package engine is lmlite's embedded inference runtime: GGUF models loaded by mmap
// (engine/gguf), tokenizers (engine/tokenizer), chat templates (engine/chat), the
// model architectures (engine/model) over a small kernel interface (engine/kernels),
// and sampling (engine/sample).
//
// The Block API is the shape that the gateway and Go programs embedding the engine
// use (LM Lite's LMLiteBlock): a block of model configs, Ready, Generate returning a
// Stream of tokens and a final Usage, Close and GC. Its types (ModelConfig, Config,
// Request, Stream, Token, Usage, ModelStatus, Stats, the device and adapter reports)
// and its errors live in package engine/api, which both modes use; aliases.go aliases
// them here under the same names (the errors are the same values, so errors.Is
// matches either name).
//
// The engine presents nothing: Models and Stats (stats.go) are plain snapshots of
// its counters and gauges, and the edges turn them into Prometheus series (the
// enginemetrics package) and admin JSON (the gateway). The engine imports no
// Prometheus, no HTTP and no configuration format (internal/importgraph checks).
//
// # Modes
//
// The Block runs its models in the caller's process (the default, inprocess). The
// workers mode (engine/worker) runs each model, or group of models, in a child
// process serving a Block, behind a Pool with the same API: a crash or hang ends
// that group's requests with ErrRestarting and nothing else, and the worker is
// restarted with backoff (a worker late on its heartbeats is only not ready until
// it beats again; engine/worker's doc). Prep (modes.go) is the part of a model the parent keeps:
// tokenizer, chat template and limits. engine/worker imports engine/api, not the
// engine (internal/importgraph checks): cmd/lmlite passes it New, for the child's
// Block, and OpenPrep, for the parent's Preps.
//
// # A request's path
//
// Generate checks what can be checked at once (unknown model, empty prompt, prompt +
// max tokens over MaxModelLen) and sends the janitor a begin; the janitor refuses it
// (closed, or the model's queue full: its requests in flight at ModelConfig.MaxQueue,
// the one queue limit, which ModelStatus reports with the current count for routers)
// or counts it in flight and answers with the loaded model's replicas, or with the
// load to wait for. Generate returns a Stream. With the replicas it picks one — the
// one whose prefix cache holds the longest part of the prompt, round-robin otherwise
// — and hands the request to it at once; with a load, a goroutine waits for it once
// (the wait is the Usage's ColdStart) and then hands it over. The request's end is
// a message to the janitor too.
//
// Each replica is a runner (runner.go): one goroutine owning a scheduler state
// (engine/sched), a paged KV pool (kvcache) and a model.Batch. Step after step it
// takes new requests into per-tenant queues, lets sched.Plan decide the step
// (preemptions, joins, each running decode's token and chunks of prefills, fair
// between tenants by weight, interactive before batch, each joining request's work
// starting after the prefix the runner takes from the KV pool's cache for it when
// Plan asks, so that a warm block replayed for one join can only shorten a later
// join's prefix before it is planned: the plan is final, and runs as it is), runs
// all the step's tokens through the model in one pass over the weights, samples, and publishes the newly full KV blocks into the
// prefix cache. Each token goes into its request's Stream, a mailbox that never
// blocks the runner and that the consumer (the gateway's HTTP writer) reads directly:
// one hand-off per token, and a slow client never stalls the batch. A cancelled
// context frees its slot and blocks at the next step.
//
// # Memory
//
// A model's memory is its mapped file plus, per replica, a KV pool: room for
// MaxModelConcurrency sequences of MaxModelLen (or KVCacheBytes), and an optional
// warm tier (KVWarmBytes) where cached blocks evicted from the pool are kept and
// replayed from. In a file (KVWarmFile) the warm tier outlives the model: an unload
// demotes the cached blocks into it and writes its index, so a long system prompt
// cached before a scale to zero, or a restart, is replayed after it (kvcache's
// persist.go). KVCacheTypeK and KVCacheTypeV store the pool's rows as llama.cpp's
// q8_0 or q4_0 blocks (-ctk / -ctv) instead of binary16; the byte budgets count the
// blocks, so the same KVCacheBytes holds 1.88× (q8_0) or 3.56× (q4_0) the tokens,
// the warm tier and its file keep the blocks quantized, and attention reads them
// directly (kernels.AttendBlocksKV). Before loading, a model leases those bytes (engine/lease) on its
// device (ModelConfig.Device: "host", the default, or "gpu:N"; execution is on the
// CPU either way) against that device's budget (Config.Devices, default
// device.Probe().Capacities: the MemoryBudget, or host memory minus a margin, for
// host, and each GPU NVML finds); when they do not fit, idle models of lower priority
// are unloaded, or the load fails at once with ErrNoMemory. On a store shared by
// several processes (lease.Redis) the victims may be another process's idle models,
// asked to unload over its preempt channel, and the Block unloads its own idle models
// when another process asks (docs/REDIS.md). Devices reports the devices and their
// leases (/admin/devices). A model idle for IdleTimeout (or the Request.KeepAlive of its last
// request, which replaces it) is unloaded (scale to zero) and reloads on the next request.
//
// # Cold start
//
// A reload is cheap on purpose: the file is mapped again with the GGUF header parsed
// at New (gguf.File.Remap: no parsing; the header is kept without its vocabulary)
// and without being touched (pages fault in as the first forward pass reads them,
// from the page cache, 2 MiB at a time when the file was read in through the
// mapping, which asks for huge pages), the KV pool is an anonymous mapping whose
// pages are zeroed by the system when a block is first written (kvcache/arena.go:
// nothing to allocate or clear up front), the tokenizer and chat template stay in
// memory across unloads, and only the first load runs a warm-up pass: a reload is for a request that waits, and that request is the
// warm-up. Ready stays true through a reload. A burst to an unloaded model makes one
// load (the requests wait on the same attempt); the requests waiting for it count
// against the model's MaxQueue like requests in flight on a loaded model, so a
// burst the loaded model would accept is accepted while it loads
// (TestBurstOnUnloadedModelLoadsOnce). lmlite bench --cold-start measures the
// comeback and prints where it went (docs/PERFORMANCE.md, "Cold start"). Loaded models heartbeat their leases (a lost lease is acquired again);
// GC expires the leases of holders that stopped.
//
// # Lifecycle
//
// One pure function decides the lifecycle (lifecycle.go): decide takes the models
// (state, requests in flight, whether someone waits for a load, last use,
// keep-alive), the devices' leases and an explicit time, and returns the actions:
// load (after unloading idle victims of lower priority, or asking other processes
// for theirs), unload (idle past its timeout, asked by another process, or at
// Close), refuse a wanted load (no memory, or closing), and GC's lease expiry and
// reset of failed models. Its traces are in testdata/lifecycle.
//
// The janitor (janitor.go) is the one goroutine that owns each model's lifecycle
// (state, load attempt, lease, requests in flight, last use, keep-alive, replicas),
// behind no lock. Everything else sends it messages: a request's begin (answered
// with the replicas or the load to wait for) and end; Load (a begin that counts no
// request); the operator's Unload, GC, Close, the store's preempt requests and the
// status readers (Models, Ready) as calls run on it. Each second, when a model is
// wanted and when a load ends, it asks the lease store for the devices' leases, and
// when they come back it calls decide with them and the state it owns and applies
// the actions in the same turn: no message comes between. The janitor waits for no
// I/O: loads and preemptions run off it and report back as messages, and the lease
// store's calls (list, acquire, heartbeat, release, expire) run on a goroutine of
// their own, one at a time in the order the janitor asked them (a release before
// the next acquire of the same holder), so a Redis outage never holds a request's
// begin. Close refuses new begins, waits for the requests in flight to end, then
// unloads everything, waits for the loads in progress, and for the releases.
// TestJanitorProtocol drives the janitor's own handlers through scripted
// interleavings (testdata/janitor/protocol: a load racing an unload, idle expiry
// during a load, a request beginning between a preemption's want and its decide,
// Close); TestBlockLifecycleMessagesRace sends a real Block's janitor those messages
// from many goroutines at once (requests, Load, Unload, passes on a moving clock and
// GC, on two models that fit one at a time), and `make stress-lifecycle` runs the
// lifecycle tests under -race 200 times. Config.Clock is the lifecycle's time. The Block's files: block.go (the
// API), dispatch.go (a request's way in), lifecycle.go, janitor.go, runner.go (a
// replica).
//
// # What a request can ask for beyond text
//
// The engine carries the OpenAI API's features; the gateway maps the JSON onto them.
//
//   - Structured outputs: Request.Grammar (Block.CompileSchema for a JSON Schema, cached;
//     grammar.JSONObject for json_object). Each step the sequence's token mask
//     (engine/grammar: a pushdown matcher over the vocabulary's bytes, masks cached
//     per grammar and state and shared by the model's sequences) restricts the
//     sampler; generation stops when the JSON is complete. A mask the cache does not
//     hold is computed off the batch's step (masks.go): by a goroutine of the
//     sequence's own, started as soon as its last token is accepted, while the
//     runner holds the sequence (sched.State.Hold) and the step runs the others;
//     it joins the first step after its mask is ready. Each request has a grammar
//     budget (ModelConfig.GrammarMaskSteps per token, GrammarRequestSteps per
//     request) past which it ends with ErrGrammarBudget; its grammar work is in
//     its Usage (GrammarTime, GrammarSteps).
//   - Logprobs: Request.Logprobs and TopLogprobs (0–20) fill Token.Logprob, Piece and
//     TopLogprobs from softmax of the raw logits: before penalties, temperature,
//     filters, ignore_eos and the grammar, as OpenAI documents.
//     Request.PromptLogprobs (echo with logprobs) sends the prompt's tokens with theirs
//     first, from the prefill's logits rows (its chunks cut so that they stay within
//     16 MiB; the prefix cache gives it nothing); Request.PromptOnly ends a request
//     after its prefill without an output token (max_tokens 0 with echo).
//   - Sampling extensions: Sampling.TopK, MinP, RepeatPenalty (vLLM's
//     repetition_penalty), IgnoreEOS.
//   - Tools: Message.ToolCalls / ToolCallID / Name; Block.RenderChatTools renders
//     tools, calls and results through the template's own support in the shapes
//     the families' templates read (Llama 3.1+, Qwen2.5/3, Mistral with 9-character
//     call ids, Phi-4-mini with the tools on the system message; see
//     testdata/families) or a Hermes-style fallback prompt, Block.ToolSyntax names
//     the syntax (from the template's markup, else the vocabulary's markers) for
//     package engine/toolcall to parse the output (streamed as name then argument
//     fragments), and Block.ToolGrammar constrains a call for tool_choice
//     "required" or a named function.
//   - n: Block.GenerateN runs up to 8 choices, seeds ChoiceSeed(seed, i); choices
//     after the first join once the prompt's KV blocks are in the prefix cache.
//   - LoRA adapters (adapters.go): ModelConfig.Adapters (id, GGUF path, scale)
//     are checked at New, loaded and closed with their model and counted in its
//     lease; Request.Adapters names the ones a request applies (ErrUnknownAdapter
//     otherwise). Requests on different adapters share batched steps, each
//     sequence's rows taking its own adapters' update (model.Item.LoRA); the
//     adapters' tags join the request's prefix-cache salt, so blocks are reused only
//     under the same adapters. Embeddings do not take adapters.
//   - Embeddings: Block.Embed pools the final hidden states (mean, or the first or
//     last token when the GGUF's <arch>.pooling_type says so), L2-normalized, as
//     prefill-only sequences in the batches; ModelConfig.Embeddings turns a model on,
//     ModelStatus.Embeddings reports it.
//
// # Speculative decoding
//
// With ModelConfig.Speculative (speculative: {ngram: true}; off by default), a
// decoding sequence drafts tokens from its own prompt and output (engine/spec's
// prompt lookup: the tokens that followed the last earlier occurrence of its last 2–4
// tokens; nothing of another sequence, let alone another tenant) and tells the
// scheduler how many; the plan grants them after all other work, within the step's
// token budget, the KV blocks and the request's max tokens (sched.Work.Draft). The
// step computes the sequence's last token and its drafts as one item of the batch,
// through the same kernels, with a logits row per position; speculate.go samples the
// rows in order exactly as plain decoding samples those positions and accepts while
// the sampled token is the draft. The first mismatch ends the step with the sampled
// token, the model's own; the KV rows of the rejected drafts are rolled back
// (kvcache.Seq.Truncate, no copy) and only accepted tokens are published to the
// prefix cache. The output — ids, text, logits, logprobs, stop strings, finish
// reason — is bit-identical to plain decoding (TestSpeculationSameOutputStories,
// TestSpeculationSameOutputGenerated, TestSpeculationInMixedBatch): a position's bits
// never depend on the batch (below), the sampler sees the accepted history, and its
// random stream advances once per sampled position, positions being sampled in
// order, each once, each for an output token, as in plain decoding. Requests with a
// Grammar decode plainly for now (the next position's mask depends on the token
// accepted before it, and masks are computed off the step); so do embeddings and
// prompt-only requests, and any request with Request.NoSpeculation. Per sequence,
// spec.Adapt chooses the draft length from the estimated acceptance chance and the
// cost of a drafted position, and stops drafting, with a doubling pause, where no
// length pays. The cost is speculative.draft_cost if given; otherwise
// (spec.Config.Measure) the runner fits its decode steps' times as a line in their
// tokens (spec.Steps: each loop's drafting, step and sampling) and a drafted
// position costs the slope over the time of a step of the decoding sequences'
// tokens, so a draft pays only for more than it adds to all of the step's sequences. A request's Prediction (OpenAI's Predicted
// Outputs: the output the client expects) is a draft source on every model, ngram
// or not (unless speculative.ignore_prediction), tried first: spec.Predicted follows
// it while the output does and re-aligns at the output's last n-gram after a
// mismatch; Usage.PredictionAccepted and PredictionRejected count its drafts
// (TestPredictionSameOutput, TestPredictionInBatch, TestPredictionChoices). The
// rejected ones are at most the prediction's tokens (a request stops drafting from
// it there), since a gateway bills them as output (TestPredictionRejectedBounded).
// With speculative.pool, a replica keeps each tenant's recent outputs (spec.Pool:
// the last 4096 tokens of each of the 64 most recently active tenants, at most 1 MiB)
// and a request drafts from its own tenant's, after prompt lookup; a tenant's text
// never drafts for another (TestPoolTenantIsolation). With speculative.draft_model,
// another configured model with the same vocabulary (New checks every token's
// text) drafts greedily, the last source: each replica maps it and keeps a KV pool
// for it, and before a step the sequences that draft from it run through it
// together, one batched draft step per drafted position, its KV rolled back to the
// sequence's accepted tokens at the next draft; a prompt it has not seen (a new
// sequence, or a prefix-cache hit) it computes in chunks of the step's tokens, all
// sequences together, drafting once it has caught up (draft.go;
// TestDraftModelSameOutput, TestDraftModelChunkedPrefill,
// TestDraftModelChoicesAndCacheHit, TestDraftModelConfig; workers mode:
// worker.TestWorkersDraftModelSameOutput). Usage.DraftTokens and AcceptedTokens, and ModelStatus's
// and Prometheus's counters, say what was drafted and accepted.
//
// # Determinism
//
// Every kernel computes an output row with a fixed order of operations, whatever the
// batch, the thread count or the paging of the KV cache, and cached KV blocks are the
// bits the model wrote. So a request's tokens and logits are the same bits alone or
// in any batch, with any number of threads, on any replica, with its prefix computed
// or cached (TestDeterminism, TestPrefixCache). Grammar masks are a function of the
// sequence's own state, logprobs of its own logits, and embeddings are summed token
// by token in position order, so constrained outputs, logprobs and embeddings keep
// the property (TestFeaturesDeterminism, TestToolChoiceRequired, TestEmbed), masks
// computed off the step included: a held sequence's tokens come later, not otherwise
// (TestConstrainedBesideUnconstrainedDeterminism).
//
// A sequence's attention numerics are chosen once per request, from its prompt
// length alone (model.AttentionFor): a prompt of 64 tokens or more (llama.cpp's own
// threshold; ModelConfig.AttnF32MinPrompt, attention_f32_min_prompt, sets another)
// runs every token of the sequence, prompt and generated, with a float32
// accumulator (model.AttnF32, the class of llama.cpp's tiled path for ubatches of
// 64 queries or more, about half the cost per position); a shorter prompt keeps
// llama.cpp's binary16 one-query path step for step (model.AttnF16, what the parity
// test compares). llama.cpp itself switches per ubatch, so its prefill and decoding
// bits differ and depend on the batching; here the mode depends on the request
// only, and each mode's kernels give a query the same bits alone or in any tile, so
// the property above holds in both. The mode is part of the prefix-cache salt
// (cacheSalt): a block is reused only by sequences of the mode that wrote it, so a
// short-prompt request does not share cached blocks with a long-prompt one that
// starts the same way (TestPrefixCacheKeepsAttentionModesApart). The float32 mode
// is the default where its assembly runs (AVX-512, head size 64: faster prefill and
// decoding than binary16); elsewhere (AVX2 only, other head sizes, purego) every
// request takes binary16 unless the model sets a threshold
// (model.AttnF32MinPromptFor), so replicas on CPUs with and without AVX-512 give a
// long prompt different bits; -1 turns the float32 mode off.
package engine
