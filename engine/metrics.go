package engine

import "github.com/prometheus/client_golang/prometheus"

// A Block is a prometheus.Collector: register it (the gateway does when its engine is
// one) to export the engine's own view of its models, read at scrape time from
// Models(). A program embedding the Block gets the same metrics with
// prometheus.MustRegister(block).
//
// Batch sizes, KV blocks and model load/unload counts come from the scheduler and
// the lifecycle inside the Block; they join these descriptors when the runtime
// reports them.
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
		"Requests of an embedded model waiting for a replica or running.", []string{"model"}, nil)
)

// modelStates are the values of the state label, each reported for every model.
var modelStates = []ModelState{StateLoading, StateReady, StateUnloaded, StateFailed}

// Describe implements prometheus.Collector.
func (b *Block) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descModelState, descModelMemory, descModelReplicas, descModelMaxLen, descQueueDepth} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (b *Block) Collect(ch chan<- prometheus.Metric) {
	for _, st := range b.Models() {
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
	}
}
