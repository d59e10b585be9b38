// Package api holds the types of the engine's Block API, its errors, the Stream a
// request's tokens arrive on, and the device report: what the engine (which aliases
// them, so callers write engine.Request) and its workers mode (engine/worker, which
// serves the same API from child processes without importing the engine) share. It
// also defines the workers mode's wire-level meaning of them: a worker's frames carry
// these types as JSON, and an error crosses the socket as the name of one of these
// sentinels.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/engine/sample"
	"github.com/lmlite/lmlite/engine/spec"
	"github.com/lmlite/lmlite/engine/workerapi"
	"github.com/lmlite/lmlite/kvcache"
)

// This file holds the types of the Block API (LM Lite's LMLiteBlock shape) that the
// gateway and embedding programs use. The Block itself (scheduler, replicas, idle
// unload, leases) is package engine's, which aliases these types.

// ModelConfig declares one model of a Block. Zero values take the documented defaults.
type ModelConfig struct {
	ID                  string        `yaml:"model_id"`
	Path                string        `yaml:"path"`                           // GGUF file
	MaxModelLen         int           `yaml:"max_model_len"`                  // prompt + output tokens; 0: the model's context length
	MaxModelConcurrency int           `yaml:"max_model_concurrency"`          // sequences in one batch; 0: 8
	BatchExecuteTimeout time.Duration `yaml:"model_batch_execute_timeout_ms"` // run a batch that is not full after this long; 0: single-request mode
	Replicas            int           `yaml:"replicas"`                       // 0: 1
	IdleTimeout         time.Duration `yaml:"idle_timeout"`                   // unload after this long idle; 0: 5 minutes; <0: never
	Priority            int           `yaml:"priority"`                       // for memory leases: higher keeps its memory
	Device              string        `yaml:"device"`                         // the device whose memory it leases: "host" (default) or "gpu:N"; execution is on the CPU either way (no GPU backend yet)
	MaxQueue            int           `yaml:"max_queue"`                      // requests in flight (waiting or running) before Generate answers ErrQueueFull; 0: Config.MaxQueue + Replicas × MaxModelConcurrency
	AttnF32MinPrompt    int           `yaml:"attention_f32_min_prompt"`       // requests whose prompt has at least this many tokens run in float32 attention (model.AttnF32: faster prefill and decoding); 0: the default, 64 (llama.cpp's threshold) on AVX-512 with head size 64, none elsewhere (model.AttnF32MinPromptFor); -1: none, every request takes llama.cpp's binary16 one-query numerics
	BatchChunkTokens    int           `yaml:"batch_chunk_tokens"`             // prompt tokens batch-priority requests prefill in one step, all together, while an interactive request came within the last 10 s (a shorter step for an interactive request arriving during it to wait out); 0: no cap but the step's

	// The KV cache (per replica). The hot pool holds the running sequences and the
	// prefix cache's hot tier; the warm tier keeps blocks evicted from it.
	KVCacheBytes       int64  `yaml:"kv_cache_bytes"`       // hot pool; 0: room for MaxModelConcurrency sequences of MaxModelLen
	KVWarmBytes        int64  `yaml:"kv_warm_bytes"`        // warm tier; 0: none (evicted blocks are dropped)
	KVWarmFile         string `yaml:"kv_warm_file"`         // the warm tier in this file (mapped) instead of host memory; it survives unloads and restarts (with its .index)
	KVCacheTypeK       string `yaml:"kv_cache_type_k"`      // how K rows are stored: "f16" ("": the default), "q8_0" or "q4_0" (llama.cpp's -ctk and block formats); KVCacheBytes and KVWarmBytes count the stored bytes
	KVCacheTypeV       string `yaml:"kv_cache_type_v"`      // how V rows are stored (llama.cpp's -ctv)
	DisablePrefixCache bool   `yaml:"disable_prefix_cache"` // no lookups, nothing published

	// Embeddings serves Block.Embed (/v1/embeddings) from this model; on by default
	// when the GGUF declares a pooling type (<arch>.pooling_type), which also says
	// how to pool (mean, first or last token); mean otherwise.
	Embeddings bool `yaml:"embeddings"`

	// The grammar budget of a request with structured outputs, in steps of mask work
	// (grammar.Matcher.MaskWithin: vocabulary trie nodes visited times the matcher's
	// live alternatives; ~35 ns each): one token's mask, and the whole request. A
	// request past either ends with ErrGrammarBudget. 0: DefaultGrammarMaskSteps
	// (2^20), DefaultGrammarRequestSteps (2^25); -1: no limit.
	GrammarMaskSteps    int64 `yaml:"grammar_mask_steps"`
	GrammarRequestSteps int64 `yaml:"grammar_request_steps"`

	// Speculative decoding (engine/spec; off by default): with ngram on, a decoding
	// sequence drafts up to max_draft tokens from its own prompt and output (prompt
	// lookup) and the batch step verifies them beside the other sequences' work.
	// The output is bit-identical to plain decoding; only its speed changes. A
	// request's Prediction drafts on every model unless ignore_prediction. Not for
	// requests with a Grammar (their next mask depends on each accepted token; they
	// decode plainly), nor embeddings.
	Speculative spec.Config `yaml:"speculative"`

	// Adapters are LoRA adapters over this model (llama.cpp's GGUF adapter format;
	// model.Adapter): a request names the ones it applies (Request.Adapters). Each
	// loads on its first request while the model is loaded, within AdapterMemory
	// (the least recently used idle ones unloaded to make room), and unloads after
	// the model's idle timeout without requests, or with the model. A loaded adapter
	// costs its file size (its tensors are views of the mapped file).
	Adapters []AdapterConfig `yaml:"adapters"`
	// AdapterMemory is the bytes of adapters loaded at once, part of the model's
	// memory lease; 0: the sum of its adapters' files (all may be loaded).
	AdapterMemory int64 `yaml:"adapter_memory"`
}

// AdapterConfig is one LoRA adapter of a model.
type AdapterConfig struct {
	ID    string  `yaml:"id"`    // the name requests use (Request.Adapters), unique within the model
	Path  string  `yaml:"path"`  // the adapter's GGUF file
	Scale float32 `yaml:"scale"` // the user scale (llama.cpp's --lora-scaled), times alpha/rank; 0: 1
}

// Priority is a request's scheduling class: interactive requests run before batch ones.
type Priority int

const (
	Interactive Priority = iota
	Batch
)

// Sampling holds the sampling parameters of one request. The zero value is greedy.
type Sampling struct {
	Temperature      float32 // 0: greedy
	TopK             int     // 0: off
	TopP             float32 // 0 or 1: off
	MinP             float32 // 0: off
	RepeatPenalty    float32 // 0 or 1: off
	PresencePenalty  float32
	FrequencyPenalty float32
	RepeatLastN      int         // tokens the penalties look back over; 0: 64
	Seed             uint64      // the same seed gives the same tokens
	IgnoreEOS        bool        // never end at an end-of-generation token: run to MaxTokens (or the grammar's end)
	LogitBias        []TokenBias // added to the tokens' logits before sampling (OpenAI's logit_bias; sample.Params.LogitBias)
}

// TokenBias is one token's logit bias (sample.Bias).
type TokenBias = sample.Bias

// Message is one chat message: role "system", "user", "assistant" (with ToolCalls
// when it called tools) or "tool" (a tool's result for ToolCallID, from tool Name).
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is a call of a tool: its id, the function's name and its arguments as
// JSON text.
type ToolCall = chat.ToolCall

// Request is one generation request: prompt tokens (already rendered and tokenized;
// see Block.Tokenize and Block.ChatTokens), sampling and limits.
type Request struct {
	Prompt    []int32
	MaxTokens int // 0: until the model's limit
	Sampling  Sampling
	Stop      []string // stop strings; the output ends before the first match

	Tenant    string   // fair queues are per tenant
	Weight    float64  // the tenant's share weight; 0: 1
	Priority  Priority // interactive before batch
	CacheSalt string   // prefix-cache salt; "" means shared on purpose
	// Affinity, when not 0, keeps requests that share it on one replica (the
	// gateway's hash of a tenant's prompt_cache_key): it takes the replica a
	// round-robin turn would, unless another replica's prefix cache holds a longer
	// part of the prompt.
	Affinity uint64

	// KeepAlive replaces the model's idle timeout once this request ends, until the
	// next request ends (each request's KeepAlive replaces the last one's): the model
	// unloads after KeepAlive idle. 0: the model's IdleTimeout. The engine honours
	// any value, shorter or longer; the caller decides what a client may ask (the
	// gateway: a longer one up to max_keep_alive, a shorter one for plans with
	// allow_short_keep_alive, never below another tenant's recent use).
	KeepAlive time.Duration

	// Grammar constrains the output (nil: free text): a JSON Schema compiled by
	// Block.CompileSchema, grammar.JSONObject() for json_object, or a grammar wrapped
	// in a tool call's markup (Grammar.Wrap). Generation stops (FinishStop) as soon as
	// the grammar's output is complete.
	Grammar *grammar.Grammar
	// Logprobs asks for each token's log-probability (Token.Logprob) and TopLogprobs
	// (0–20) for the most likely tokens at each step (Token.TopLogprobs), both from
	// the model's distribution: softmax of the raw logits, before penalties,
	// temperature, filters and the grammar's mask.
	Logprobs    bool
	TopLogprobs int
	// PromptLogprobs asks for the prompt's tokens with their logprobs (OpenAI's echo
	// with logprobs on completions): before the first output token the stream
	// delivers one Token per prompt token, in order, with Prompt set, Piece, Text (the
	// token's decoded text) and, from the second on, Logprob and TopLogprobs
	// (TopLogprobs many) of the model's distribution at the position before it. The
	// first prompt token has none (nothing precedes it): its Logprob is 0 and its
	// TopLogprobs nil. They come from the prefill's own logits rows, so such a request
	// computes its whole prompt (the prefix cache gives it nothing; under GenerateN
	// each choice does) in chunks small enough that the rows stay within
	// promptLogitsBytes (16 MiB).
	PromptLogprobs bool
	// PromptOnly generates nothing: the request ends after its prompt's prefill,
	// with no output token and FinishLength (OpenAI's max_tokens 0 with echo, which
	// scores a prompt). With PromptLogprobs the stream delivers the prompt's tokens
	// first, as always. MaxTokens is then ignored.
	PromptOnly bool
	// NoSpeculation decodes the request plainly where its model speculates
	// (ModelConfig.Speculative); the output is the same either way.
	NoSpeculation bool `json:",omitempty"`
	// Prediction is the output the client expects (OpenAI's Predicted Outputs), as
	// text: tokenized as plain text (no control tokens), its tokens are drafts for
	// speculative decoding, re-aligned to the output after it departs from them
	// (spec.Predicted). It changes the speed only, never the output; requests that
	// decode plainly (a Grammar, NoSpeculation, ignore_prediction) ignore it.
	Prediction string `json:",omitempty"`

	// Adapters are the ids of the model's LoRA adapters (ModelConfig.Adapters) the
	// request applies, in order, each at its configured scale; none: the bare base.
	// Requests on different adapters share batched steps (each sequence's rows take
	// its own adapters' updates); the prefix cache never shares blocks between
	// different adapter sets.
	Adapters []string
}

// MaxTopLogprobs is the most TopLogprobs a request may ask for (OpenAI's limit).
const MaxTopLogprobs = 20

// Token is one generated token as the stream delivers it. Text holds the complete
// UTF-8 characters that this token finishes (possibly empty while a character is
// still split across tokens): concatenating Text of a stream gives the output text.
type Token struct {
	ID    int32
	Text  string
	Logit float32 // the model's raw logit of ID (before sampling's penalties and temperature); 0 when ID is -1

	// With Request.Logprobs (zero otherwise, and when ID is -1): the token's own bytes
	// (possibly part of a UTF-8 character; what logprobs report as its text), its
	// log-probability, and the Request.TopLogprobs most likely tokens, most likely first.
	Piece       string
	Logprob     float32
	TopLogprobs []TopLogprob

	// Prompt marks a prompt token (Request.PromptLogprobs): not part of the output.
	Prompt bool `json:",omitempty"`
}

// TopLogprob is one of the most likely tokens at a step.
type TopLogprob struct {
	ID      int32
	Piece   string // the token's bytes
	Logprob float32
}

// Finish reasons.
const (
	FinishStop      = "stop"      // end-of-sequence token or a stop string
	FinishLength    = "length"    // MaxTokens or the model's length limit
	FinishCancelled = "cancelled" // the context was cancelled
)

// Usage is the final record of one request.
type Usage struct {
	PromptTokens       int
	CompletionTokens   int
	CachedTokens       int // prompt tokens served from the prefix cache
	FinishReason       string
	StopSequence       string        // FinishStop by a stop string: that string (Anthropic's stop_sequence)
	QueueTime          time.Duration // from submission to the first step that included it
	TimeToFirstToken   time.Duration // from submission to the first token
	TimePerOutputToken time.Duration // mean gap between output tokens after the first
	ColdStart          time.Duration // model load time this request waited for, if any
	Replica            int

	// The request's grammar work (structured outputs): the time its masks took to
	// compute, off the batch's step (cached masks cost nothing), and their steps,
	// which its grammar budget bounds (ModelConfig.GrammarRequestSteps).
	GrammarTime  time.Duration
	GrammarSteps int64

	// Speculative decoding (ModelConfig.Speculative): the tokens drafted for
	// verification and how many of them were accepted (each an output token that
	// needed no step of its own).
	DraftTokens    int `json:",omitempty"`
	AcceptedTokens int `json:",omitempty"`
	// Of those, the ones drafted from Request.Prediction: accepted (OpenAI's
	// accepted_prediction_tokens) and verified but rejected (computed and thrown
	// away: rejected_prediction_tokens, at most the prediction's tokens: a request
	// stops drafting from its prediction once that many were rejected, so that a
	// gateway billing them as output, as OpenAI does, can reserve their worst case).
	// Predicted says the request had a prediction.
	Predicted                              bool `json:",omitempty"`
	PredictionAccepted, PredictionRejected int  `json:",omitempty"`
}

// ModelState is the lifecycle state of a model.
type ModelState string

const (
	StateLoading  ModelState = "loading"
	StateReady    ModelState = "ready"
	StateUnloaded ModelState = "unloaded"
	StateFailed   ModelState = "failed"
)

// ModelStatus is what a Block reports about one model.
type ModelStatus struct {
	ID          string
	State       ModelState
	Replicas    int
	MemoryBytes int64 // weights mapped + KV pool + the loaded LoRA adapters
	MaxModelLen int
	QueueDepth  int // requests waiting to join a batch (all replicas)
	Running     int // sequences in the batches (all replicas)

	// The model's queue limit, the only one: Generate answers ErrQueueFull while
	// Queued >= MaxQueue. A router that keeps away from a model before it refuses
	// compares the same two numbers.
	Queued   int // requests in flight: admitted and not finished (waiting for a load, a batch slot or KV memory, or running)
	MaxQueue int // ModelConfig.MaxQueue with its default filled in

	Err string // for StateFailed

	// Counters since the Block started (they survive unloads).
	Steps      uint64 // batch steps run
	StepSeqs   uint64 // sequences summed over the steps: StepSeqs/Steps is the mean batch size
	StepTokens uint64 // tokens computed summed over the steps (decodes + prefill chunks)
	Loads      uint64
	Unloads    uint64
	ColdStart  time.Duration // the last load's duration
	Embeddings bool          // Block.Embed serves this model
	// Speculative decoding's tokens: drafted for verification, and accepted; of
	// them, the ones drafted from requests' predictions (Request.Prediction) and
	// from the tenants' n-gram pools (spec.Config.Pool).
	DraftTokens, AcceptedTokens                     uint64
	PredictionDraftTokens, PredictionAcceptedTokens uint64
	PoolDraftTokens, PoolAcceptedTokens             uint64
	// From the draft model (spec.Config.DraftModel).
	DraftModelDraftTokens, DraftModelAcceptedTokens uint64

	KV kvcache.Stats // the replicas' KV pools, summed (zero while unloaded)

	// GrammarMasks is the model's token-mask cache (structured outputs): lookups
	// (hits, misses: masks computed), and what it holds. It survives unloads.
	GrammarMasks grammar.MaskCacheStats

	// ExpertLoad, for a mixture of experts: per layer, the tokens routed to each expert
	// (by all replicas) since the model was loaded; nil while unloaded or for a dense
	// model. Skewed rows show experts that get most of the traffic.
	ExpertLoad [][]uint64
}

// Errors of the Block API, matched with errors.Is.
var (
	ErrUnknownModel = errors.New("engine: unknown model")
	// ErrUnknownAdapter refuses a request naming an adapter its model does not have.
	ErrUnknownAdapter = errors.New("engine: unknown adapter")
	ErrQueueFull      = errors.New("engine: queue full")
	ErrTooLong        = errors.New("engine: request longer than the model's limit")
	ErrNoMemory       = errors.New("engine: not enough memory to load the model")
	ErrClosed         = errors.New("engine: block closed")
	ErrGrammar        = errors.New("engine: the grammar cannot continue") // a constrained output found no allowed token
	// ErrGrammarBudget ends a constrained request whose masks took more work than its
	// grammar budget allows (ModelConfig.GrammarMaskSteps, GrammarRequestSteps): a
	// schema too expensive to enforce.
	ErrGrammarBudget = errors.New("engine: the grammar's work is over its budget")
	ErrNoEmbeddings  = errors.New("engine: the model does not serve embeddings")
)

// ErrPromptOverLimit: a capped tokenization (Block.TokenizeCapped,
// Block.ChatTokensCapped) stopped because the prompt is over its limit.
var ErrPromptOverLimit = errors.New("engine: prompt over the token limit")

// ErrConfig is the kind of a configuration New (or OpenPrep, or the workers mode's
// Pool) refuses: a rule of the models' configuration is broken. The error's text
// names the model and the rule; errors.Is matches ErrConfig (ConfigErrorf).
var ErrConfig = errors.New("engine: invalid configuration")

// ConfigErrorf is an error of kind ErrConfig whose text is fmt.Errorf(format,
// a...)'s, and which wraps what that wraps.
func ConfigErrorf(format string, a ...any) error {
	return configError{fmt.Errorf(format, a...)}
}

type configError struct{ err error }

func (e configError) Error() string   { return e.err.Error() }
func (e configError) Unwrap() []error { return []error{ErrConfig, e.err} }

// ErrRestarting is the retryable error of a request whose model is restarting: its
// worker process crashed or hung while the request ran, or the request came while the
// worker waits out its restart backoff. Nothing about the request was wrong; retry it
// shortly (the gateway answers 503 engine_restarting with Retry-After).
var ErrRestarting = errors.New("engine: model restarting")

// EmbedRequest asks for the embeddings of several inputs, each already tokenized
// (Block.Tokenize). They run as prefill-only sequences in the model's batches,
// beside its generations, fair by tenant like them.
type EmbedRequest struct {
	Inputs   [][]int32
	Tenant   string
	Weight   float64
	Priority Priority
}

// Embeddings are the result of an EmbedRequest: one unit-length vector per input
// (the model's final hidden states after the output norm, pooled as the model says:
// mean, first or last token), and the prompt tokens billed (all the inputs').
type Embeddings struct {
	Vectors      [][]float32
	PromptTokens int
}

// AdapterStatus is one adapter's state (Block.Adapters).
type AdapterStatus struct {
	ID       string `json:"id"`
	Model    string `json:"model"`
	State    string `json:"state"` // AdapterLoaded or AdapterUnloaded
	Bytes    int64  `json:"bytes"` // its file's size: what it costs loaded
	Active   int    `json:"active"`
	Loads    uint64 `json:"loads"`
	Unloads  uint64 `json:"unloads"`
	LastUsed time.Time
}

// Adapter states.
const (
	AdapterLoaded   = "loaded"
	AdapterUnloaded = "unloaded"
)

// Tool is a function the model may call (OpenAI's tools[].function).
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema of the arguments object; nil: none
}

// Stats is a snapshot of an engine's counters and gauges: plain values, cheap to
// take (in process, one call on the Block's janitor, which copies the lifecycle
// state it owns and loads the replicas' counters), read when an edge presents them.
// The engine knows no presentation: the enginemetrics package turns a Stats into
// Prometheus series (the gateway registers it for an engine with a Stats method),
// and the gateway's admin API writes its own JSON (tailscale's clientmetric is the
// model: counters in the core, presentation at the edge).
type Stats struct {
	Models []ModelStatus
	// Workers are the worker processes of the workers mode (engine/worker's Pool);
	// nil in process.
	Workers []workerapi.Status
}

// MaxChoices is the most choices GenerateN runs (OpenAI's n).
const MaxChoices = 8

// ChoiceSeed is the sampling seed of choice i of a request seeded with seed: seed
// itself for choice 0 (so n=1 is a plain request), a SplitMix64 mix of seed and i
// for the others.
func ChoiceSeed(seed uint64, i int) uint64 {
	if i == 0 {
		return seed
	}
	z := seed + uint64(i)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// TokenCheck is what CheckTokenIDs refuses besides ids outside the vocabulary.
type TokenCheck int8

const (
	AnyToken       TokenCheck = iota // every id of the vocabulary
	PromptTokens                     // no control token but the vocabulary's BOS (a prompt of token ids)
	NoControlToken                   // no control token at all (a positive logit bias)
)

// Errors of CheckTokenIDs.
var (
	ErrTokenOutOfRange = errors.New("engine: token id outside the vocabulary")
	ErrControlToken    = errors.New("engine: control token")
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

// ErrAdapterBusy refuses unloading an adapter that requests are using.
var ErrAdapterBusy = errors.New("engine: adapter in use")

// Defaults of ModelConfig and Config fields left zero.
const (
	DefaultMaxModelConcurrency = 8
	DefaultIdleTimeout         = 5 * time.Minute
	DefaultMaxQueue            = 256
)
