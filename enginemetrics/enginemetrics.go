// Package enginemetrics presents an engine's Stats as Prometheus series: the
// engine keeps plain counters and snapshots (engine.Stats), and this edge package
// names them, reads them at scrape time and labels them (tailscale's clientmetric is
// the model). The gateway registers a Collector for an engine with a Stats method
// (engine.Block, worker.Pool); a program embedding the Block does
// prometheus.MustRegister(enginemetrics.New(block.Stats)).
//
// Batch sizes are counters of steps, sequences and tokens (rate(seqs)/rate(steps)
// is the mean batch); the KV pool's and prefix cache's figures are the replicas'
// kvcache.Stats summed. A mixture of experts also exports the tokens routed to each
// expert of each layer (ModelStatus.ExpertLoad). The workers mode adds each model's
// worker process: its crashes and whether it is up.
package enginemetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/workerapi"
)

var (
	descModelState = prometheus.NewDesc("lmlite_engine_model_state",
		"Lifecycle state of an embedded model: 1 for its current state, 0 for the others.", []string{"model", "state"}, nil)
	descModelMemory = prometheus.NewDesc("lmlite_engine_model_memory_bytes",
		"Memory of a loaded embedded model (weights mapped + KV cache of its replicas); 0 when unloaded.", []string{"model"}, nil)
	descModelReplicas = prometheus.NewDesc("lmlite_engine_model_replicas",
		"Replicas configured for an embedded model.", []string{"model"}, nil)
	descModelMaxLen = prometheus.NewDesc("lmlite_engine_model_max_len_tokens",
		"Length limit of an embedded model (prompt + output tokens).", []string{"model"}, nil)
	descQueueDepth = prometheus.NewDesc("lmlite_engine_queue_depth",
		"Requests of an embedded model waiting to join a batch.", []string{"model"}, nil)
	descRunning = prometheus.NewDesc("lmlite_engine_running_sequences",
		"Sequences in an embedded model's batches.", []string{"model"}, nil)
	descSteps = prometheus.NewDesc("lmlite_engine_batch_steps_total",
		"Batch steps run (one forward pass over the weights each).", []string{"model"}, nil)
	descStepSeqs = prometheus.NewDesc("lmlite_engine_batch_sequences_total",
		"Sequences summed over the batch steps: divided by the steps, the mean batch size.", []string{"model"}, nil)
	descStepTokens = prometheus.NewDesc("lmlite_engine_batch_tokens_total",
		"Tokens computed summed over the batch steps (decodes and prefill chunks).", []string{"model"}, nil)
	descDrafted = prometheus.NewDesc("lmlite_engine_draft_tokens_total",
		"Tokens drafted for verification by speculative decoding (source ngram: prompt lookup).", []string{"model", "source"}, nil)
	descAccepted = prometheus.NewDesc("lmlite_engine_draft_accepted_tokens_total",
		"Drafted tokens accepted by verification (each an output token without a step of its own).", []string{"model", "source"}, nil)
	descLoads = prometheus.NewDesc("lmlite_engine_model_loads_total",
		"Loads of an embedded model (the first and every reload after an unload).", []string{"model"}, nil)
	descUnloads = prometheus.NewDesc("lmlite_engine_model_unloads_total",
		"Unloads of an embedded model (idle, admin or to make room).", []string{"model"}, nil)
	descColdStart = prometheus.NewDesc("lmlite_engine_model_load_seconds",
		"Duration of an embedded model's last load.", []string{"model"}, nil)
	descKVBlocks = prometheus.NewDesc("lmlite_engine_kv_blocks",
		"KV blocks of an embedded model's replicas by tier and use: hot used (referenced by sequences), hot cached (prefix cache, evictable), hot free, warm.", []string{"model", "tier"}, nil)
	descKVBytes = prometheus.NewDesc("lmlite_engine_kv_bytes",
		"Bytes of KV blocks in use or cached, by tier.", []string{"model", "tier"}, nil)
	descKVLookups = prometheus.NewDesc("lmlite_engine_prefix_cache_lookups_total",
		"Prefix-cache lookups (one per sequence joining a batch).", []string{"model"}, nil)
	descKVTokens = prometheus.NewDesc("lmlite_engine_prefix_cache_tokens_total",
		"Prompt tokens looked up in the prefix cache, by result (hit or miss).", []string{"model", "result"}, nil)
	descKVMoves = prometheus.NewDesc("lmlite_engine_kv_block_moves_total",
		"KV blocks moved between tiers: demoted (hot to warm), replayed (warm to hot), evicted (dropped).", []string{"model", "move"}, nil)
	descMaskLookups = prometheus.NewDesc("lmlite_engine_grammar_mask_lookups_total",
		"Structured outputs: token-mask cache lookups, by result (hit, or miss: a mask computed off the batch step).", []string{"model", "result"}, nil)
	descMaskBytes = prometheus.NewDesc("lmlite_engine_grammar_mask_cache_bytes",
		"Structured outputs: bytes of token masks cached (bounded per grammar and in all).", []string{"model"}, nil)
	descExpertTokens = prometheus.NewDesc("lmlite_engine_expert_tokens_total",
		"Mixture-of-experts models: tokens routed to each expert of each layer since the model was loaded (routing skew shows as uneven experts within a layer).", []string{"model", "layer", "expert"}, nil)
	descWorkerRestarts = prometheus.NewDesc("lmlite_engine_worker_crashes_total",
		"Crashes and hangs of a model's worker process (workers mode).", []string{"model"}, nil)
	descWorkerUp = prometheus.NewDesc("lmlite_engine_worker_up",
		"1 while a model's worker process runs and beats (workers mode).", []string{"model"}, nil)
)

// modelStates are the values of the state label, each reported for every model.
var modelStates = []engine.ModelState{engine.StateLoading, engine.StateReady, engine.StateUnloaded, engine.StateFailed}

// Collector is a prometheus.Collector of an engine's Stats, taken at each scrape.
type Collector struct {
	stats func() engine.Stats
}

// New returns the Collector of the snapshots stats takes (e.g. Block.Stats).
func New(stats func() engine.Stats) *Collector { return &Collector{stats: stats} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descModelState, descModelMemory, descModelReplicas, descModelMaxLen, descQueueDepth,
		descRunning, descSteps, descStepSeqs, descStepTokens, descDrafted, descAccepted, descLoads, descUnloads, descColdStart,
		descKVBlocks, descKVBytes, descKVLookups, descKVTokens, descKVMoves, descMaskLookups, descMaskBytes, descExpertTokens,
		descWorkerRestarts, descWorkerUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	collectModels(ch, st.Models)
	collectWorkers(ch, st.Workers)
}

// collectWorkers reports, for each model of each worker group, its process's
// crashes and whether it runs.
func collectWorkers(ch chan<- prometheus.Metric, workers []workerapi.Status) {
	for _, w := range workers {
		up := 0.0
		if w.State == "running" {
			up = 1
		}
		for _, id := range w.Models {
			ch <- prometheus.MustNewConstMetric(descWorkerRestarts, prometheus.CounterValue, float64(w.Crashes), id)
			ch <- prometheus.MustNewConstMetric(descWorkerUp, prometheus.GaugeValue, up, id)
		}
	}
}

// collectModels reports each model's series.
func collectModels(ch chan<- prometheus.Metric, models []engine.ModelStatus) {
	for _, st := range models {
		for _, s := range modelStates {
			v := 0.0
			if st.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descModelState, prometheus.GaugeValue, v, st.ID, string(s))
		}
		ch <- prometheus.MustNewConstMetric(descModelMemory, prometheus.GaugeValue, float64(st.MemoryBytes), st.ID)
		ch <- prometheus.MustNewConstMetric(descModelReplicas, prometheus.GaugeValue, float64(st.Replicas), st.ID)
		ch <- prometheus.MustNewConstMetric(descModelMaxLen, prometheus.GaugeValue, float64(st.MaxModelLen), st.ID)
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(st.QueueDepth), st.ID)
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(st.Running), st.ID)
		ch <- prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(st.Steps), st.ID)
		ch <- prometheus.MustNewConstMetric(descStepSeqs, prometheus.CounterValue, float64(st.StepSeqs), st.ID)
		ch <- prometheus.MustNewConstMetric(descStepTokens, prometheus.CounterValue, float64(st.StepTokens), st.ID)
		ngramDrafted := st.DraftTokens - st.PredictionDraftTokens - st.PoolDraftTokens - st.DraftModelDraftTokens
		ngramAccepted := st.AcceptedTokens - st.PredictionAcceptedTokens - st.PoolAcceptedTokens - st.DraftModelAcceptedTokens
		for _, s := range []struct {
			src               string
			drafted, accepted uint64
		}{
			{"ngram", ngramDrafted, ngramAccepted},
			{"prediction", st.PredictionDraftTokens, st.PredictionAcceptedTokens},
			{"pool", st.PoolDraftTokens, st.PoolAcceptedTokens},
			{"draft_model", st.DraftModelDraftTokens, st.DraftModelAcceptedTokens},
		} {
			ch <- prometheus.MustNewConstMetric(descDrafted, prometheus.CounterValue, float64(s.drafted), st.ID, s.src)
			ch <- prometheus.MustNewConstMetric(descAccepted, prometheus.CounterValue, float64(s.accepted), st.ID, s.src)
		}
		ch <- prometheus.MustNewConstMetric(descLoads, prometheus.CounterValue, float64(st.Loads), st.ID)
		ch <- prometheus.MustNewConstMetric(descUnloads, prometheus.CounterValue, float64(st.Unloads), st.ID)
		ch <- prometheus.MustNewConstMetric(descColdStart, prometheus.GaugeValue, st.ColdStart.Seconds(), st.ID)
		kv := st.KV
		for _, g := range []struct {
			tier string
			n    int64
		}{{"hot_used", kv.HotUsed}, {"hot_cached", kv.HotCached}, {"hot_free", kv.HotFree}, {"warm", kv.WarmBlocks}} {
			ch <- prometheus.MustNewConstMetric(descKVBlocks, prometheus.GaugeValue, float64(g.n), st.ID, g.tier)
		}
		ch <- prometheus.MustNewConstMetric(descKVBytes, prometheus.GaugeValue, float64(kv.HotBytes), st.ID, "hot")
		ch <- prometheus.MustNewConstMetric(descKVBytes, prometheus.GaugeValue, float64(kv.WarmBytes), st.ID, "warm")
		ch <- prometheus.MustNewConstMetric(descKVLookups, prometheus.CounterValue, float64(kv.Lookups), st.ID)
		ch <- prometheus.MustNewConstMetric(descKVTokens, prometheus.CounterValue, float64(kv.HitTokens), st.ID, "hit")
		ch <- prometheus.MustNewConstMetric(descKVTokens, prometheus.CounterValue, float64(kv.MissTokens), st.ID, "miss")
		ch <- prometheus.MustNewConstMetric(descKVMoves, prometheus.CounterValue, float64(kv.Demotions), st.ID, "demoted")
		ch <- prometheus.MustNewConstMetric(descKVMoves, prometheus.CounterValue, float64(kv.Replays), st.ID, "replayed")
		ch <- prometheus.MustNewConstMetric(descKVMoves, prometheus.CounterValue, float64(kv.Evictions), st.ID, "evicted")
		gm := st.GrammarMasks
		ch <- prometheus.MustNewConstMetric(descMaskLookups, prometheus.CounterValue, float64(gm.Hits), st.ID, "hit")
		ch <- prometheus.MustNewConstMetric(descMaskLookups, prometheus.CounterValue, float64(gm.Misses), st.ID, "miss")
		ch <- prometheus.MustNewConstMetric(descMaskBytes, prometheus.GaugeValue, float64(gm.Bytes), st.ID)
		for l, row := range st.ExpertLoad {
			layer := strconv.Itoa(l)
			for e, n := range row {
				ch <- prometheus.MustNewConstMetric(descExpertTokens, prometheus.CounterValue, float64(n), st.ID, layer, strconv.Itoa(e))
			}
		}
	}
}
