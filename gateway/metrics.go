package gateway

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/enginemetrics"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

// StatsSource is an engine that snapshots its counters and gauges (engine.Block,
// worker.Pool): /metrics shows them as the lmlite_engine_* series (enginemetrics).
type StatsSource interface {
	Stats() engine.Stats
}

// metrics are the server's Prometheus metrics, in a registry of its own (no globals).
// An Engine that is also a StatsSource (batch sizes, KV blocks, loads) gets its
// enginemetrics.Collector registered beside them.
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	ttft       *prometheus.HistogramVec
	tpot       *prometheus.HistogramVec
	e2e        *prometheus.HistogramVec
	spend      *prometheus.CounterVec
	grammar    *prometheus.CounterVec // grammar mask time, by tenant and model
	rejections *prometheus.CounterVec
	prefixHits *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	admin      *prometheus.CounterVec
	coldStart  *prometheus.HistogramVec
	upFailures *prometheus.CounterVec
	// adapterRequests and adapterTokens are requests and tokens on LoRA adapters, by
	// adapter beside its base model (the series above count them under the base).
	adapterRequests *prometheus.CounterVec
	adapterTokens   *prometheus.CounterVec
	handler         fasthttp.RequestHandler

	// Children of the vectors, looked up once: WithLabelValues hashes its labels on
	// every call, and observe runs for every request.
	perModel map[string]*modelMetrics // by model id (the set is fixed by the config)
	counters sync.Map                 // requestKey or spendKey → prometheus.Counter
}

// modelMetrics are one model's children of the per-model vectors.
type modelMetrics struct {
	ttft, tpot, e2e            prometheus.Observer
	prefixHits, prompt, output prometheus.Counter
	coldStart                  prometheus.Observer // embedded models
	upFailures                 prometheus.Counter  // upstream models
}

type requestKey struct {
	tenant, model, tier string
	status              int
}

type spendKey struct{ tenant, model string }

// requestCounter returns the requests counter of the labels.
func (m *metrics) requestCounter(k requestKey) prometheus.Counter {
	if c, ok := m.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := m.requests.WithLabelValues(k.tenant, k.model, k.tier, strconv.Itoa(k.status))
	m.counters.Store(k, c)
	return c
}

func (m *metrics) spendCounter(k spendKey) prometheus.Counter {
	if c, ok := m.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := m.spend.WithLabelValues(k.tenant, k.model)
	m.counters.Store(k, c)
	return c
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_requests_total",
		Help: "Generation requests admitted, by tenant, model, tier and HTTP status."}, []string{"tenant", "model", "tier", "status"})
	lat := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lmlite_time_to_first_token_seconds",
		Help: "Time to first token.", Buckets: lat}, []string{"model"})
	m.tpot = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lmlite_time_per_output_token_seconds",
		Help: "Mean time per output token after the first.", Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"model"})
	m.e2e = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lmlite_request_duration_seconds",
		Help: "End-to-end latency of generation requests.", Buckets: lat}, []string{"model"})
	m.spend = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_spend_usd_total",
		Help: "Money charged, by tenant and model."}, []string{"tenant", "model"})
	m.grammar = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_grammar_seconds_total",
		Help: "Time the structured outputs' grammar masks took to compute (off the batch's step), by tenant and model."}, []string{"tenant", "model"})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_rejections_total",
		Help: "Requests refused, by reason."}, []string{"reason"})
	m.prefixHits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_prefix_cache_hit_tokens_total",
		Help: "Prompt tokens served from the prefix cache."}, []string{"model"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_tokens_total",
		Help: "Tokens processed, by model and kind (prompt, completion)."}, []string{"model", "kind"})
	m.admin = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_model_admin_actions_total",
		Help: "Model loads and unloads asked through the admin API."}, []string{"model", "action"})
	m.coldStart = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lmlite_model_cold_start_seconds",
		Help: "How long requests waited for their embedded model to load (counted once per request that waited).", Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"model"})
	m.upFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_upstream_failures_total",
		Help: "Upstream requests that failed before answering (connection error or 5xx); the router may have stepped down a tier."}, []string{"model"})
	m.adapterRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_adapter_requests_total",
		Help: "Generation requests admitted on LoRA adapters, by tenant, base model, adapter and HTTP status (also counted in lmlite_requests_total under the base)."}, []string{"tenant", "model", "adapter", "status"})
	m.adapterTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_adapter_tokens_total",
		Help: "Tokens processed on LoRA adapters, by base model, adapter and kind (prompt, completion)."}, []string{"model", "adapter", "kind"})
	for _, c := range []prometheus.Collector{m.requests, m.ttft, m.tpot, m.e2e, m.spend, m.grammar, m.rejections, m.prefixHits, m.tokens, m.admin, m.coldStart, m.upFailures,
		m.adapterRequests, m.adapterTokens,
		&stateCollector{s: s}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	if src, ok := s.eng.(StatsSource); ok && s.eng != nil {
		f(enginemetrics.New(src.Stats))
	}
	if d, ok := s.eng.(DeviceSource); ok && s.eng != nil {
		f(deviceCollector{d}) // devices.go
	}
	m.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	m.perModel = map[string]*modelMetrics{}
	for _, id := range s.order {
		mm := &modelMetrics{
			ttft: m.ttft.WithLabelValues(id), tpot: m.tpot.WithLabelValues(id), e2e: m.e2e.WithLabelValues(id),
			prefixHits: m.prefixHits.WithLabelValues(id),
			prompt:     m.tokens.WithLabelValues(id, "prompt"), output: m.tokens.WithLabelValues(id, "completion"),
		}
		if s.models[id].upstream != nil {
			mm.upFailures = m.upFailures.WithLabelValues(id)
		} else {
			mm.coldStart = m.coldStart.WithLabelValues(id)
		}
		m.perModel[id] = mm
	}
	return m
}

// observe records one settled request. u is the engine's usage of an embedded
// model's request, or for a streamed upstream answer its measured time to first token
// and per output token.
func (m *metrics) observe(j *job, e tenancy.Entry, charged money.Money, u *engine.Usage) {
	model := e.Model
	m.requestCounter(requestKey{j.pol.Tenant, model, e.Tier, e.Status}).Inc()
	if e.Adapter != "" {
		m.adapterRequests.WithLabelValues(j.pol.Tenant, model, e.Adapter, strconv.Itoa(e.Status)).Inc()
		if e.PromptTokens > 0 {
			m.adapterTokens.WithLabelValues(model, e.Adapter, "prompt").Add(float64(e.PromptTokens))
		}
		if e.CompletionTokens > 0 {
			m.adapterTokens.WithLabelValues(model, e.Adapter, "completion").Add(float64(e.CompletionTokens))
		}
	}
	mm := m.perModel[model]
	if mm == nil {
		return
	}
	if e.Status < 400 || e.Status == 499 {
		mm.e2e.Observe(e.Latency.Seconds())
	}
	if charged > 0 {
		m.spendCounter(spendKey{j.pol.Tenant, model}).Add(charged.Dollars())
	}
	if e.PromptTokens > 0 {
		mm.prompt.Add(float64(e.PromptTokens))
	}
	if e.CompletionTokens > 0 {
		mm.output.Add(float64(e.CompletionTokens))
	}
	if u != nil && u.CompletionTokens > 0 {
		mm.ttft.Observe(u.TimeToFirstToken.Seconds())
		if u.CompletionTokens > 1 {
			mm.tpot.Observe(u.TimePerOutputToken.Seconds())
		}
		if u.CachedTokens > 0 {
			mm.prefixHits.Add(float64(u.CachedTokens))
		}
	}
	if u != nil && u.GrammarTime > 0 {
		m.grammar.WithLabelValues(j.pol.Tenant, model).Add(u.GrammarTime.Seconds())
	}
	if u != nil && u.ColdStart > 0 && mm.coldStart != nil {
		mm.coldStart.Observe(u.ColdStart.Seconds())
	}
}

// stateCollector reports, at scrape time, each model's state, memory, replicas and
// queue depth, each LoRA adapter's state and requests in flight, and the gateway's
// requests in flight.
type stateCollector struct{ s *Server }

var (
	descState    = prometheus.NewDesc("lmlite_model_state", "1 for the model's current lifecycle state.", []string{"model", "state"}, nil)
	descMemory   = prometheus.NewDesc("lmlite_model_memory_bytes", "Memory of a loaded model (weights mapped + KV pool).", []string{"model"}, nil)
	descReplicas = prometheus.NewDesc("lmlite_model_replicas", "Replicas of a model.", []string{"model"}, nil)
	descQueue    = prometheus.NewDesc("lmlite_queue_depth", "Requests queued or running per model.", []string{"model"}, nil)
	descInFlight = prometheus.NewDesc("lmlite_in_flight_requests", "Generation requests in flight in the gateway.", nil, nil)
	// A LoRA adapter's state and requests in flight, beside its base model.
	descAdapterState  = prometheus.NewDesc("lmlite_adapter_state", "1 for the LoRA adapter's current state (loaded, unloaded).", []string{"model", "adapter", "state"}, nil)
	descAdapterActive = prometheus.NewDesc("lmlite_adapter_active_requests", "Requests in flight on the LoRA adapter.", []string{"model", "adapter"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descMemory, descReplicas, descQueue, descInFlight, descAdapterState, descAdapterActive} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.inFlight.Load()))
	for _, st := range s.modelStatuses() {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, 1, st.ID, string(st.State))
		ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(st.MemoryBytes), st.ID)
		ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(st.Replicas), st.ID)
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(st.QueueDepth), st.ID)
	}
	if src, ok := s.eng.(AdapterSource); ok && s.eng != nil {
		for _, a := range src.Adapters() {
			if s.adapters[a.ID] == nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(descAdapterState, prometheus.GaugeValue, 1, a.Model, a.ID, a.State)
			ch <- prometheus.MustNewConstMetric(descAdapterActive, prometheus.GaugeValue, float64(a.Active), a.Model, a.ID)
		}
	}
}

// modelStatuses lists every configured model: the engine's status for embedded ones,
// and for upstream ones "ready" with the gateway's own queue depth.
func (s *Server) modelStatuses() []engine.ModelStatus {
	byID := map[string]engine.ModelStatus{}
	if s.eng != nil {
		for _, st := range s.eng.Models() {
			byID[st.ID] = st
		}
	}
	out := make([]engine.ModelStatus, 0, len(s.order))
	for _, id := range s.order {
		m := s.models[id]
		st, ok := byID[id]
		if m.upstream != nil || !ok {
			st = engine.ModelStatus{ID: id, State: engine.StateReady, Replicas: 1, MaxModelLen: int(m.maxLen.Load()),
				QueueDepth: s.pred.Stats(id, s.now()).Queue}
			if m.upstream == nil {
				st.State = engine.StateUnloaded
			}
		}
		out = append(out, st)
	}
	return out
}
