package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/forward"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
	"github.com/lmlite/lmlite/usage"
)

// Engine is what the gateway needs of the embedded engine's Block. It is satisfied by
// *engine.Block; tests may use a fake at exactly this interface.
type Engine interface {
	Generate(ctx context.Context, modelID string, req engine.Request) (*engine.Stream, error)
	// Tokenize adds BOS per the vocabulary and parses special tokens.
	Tokenize(modelID, text string) ([]int32, error)
	// ChatTokens applies the model's chat template (ChatML if it has none) with the
	// generation prompt added and tokenizes it: the template's markup as special
	// tokens, the messages' texts as plain text.
	ChatTokens(modelID string, msgs []engine.Message) ([]int32, error)
	Models() []engine.ModelStatus
	Ready() bool
}

// CappedTokenizer is an optional ability of an Engine (the Block and the workers
// mode have it): tokenizing that gives up once a prompt is over limit tokens, with
// an error wrapping engine.ErrPromptOverLimit, so an oversized prompt is refused
// for about limit tokens' work. ChatTokensCapped is ChatTokens, or with tools or
// tool messages Features.ChatTokensTools.
type CappedTokenizer interface {
	TokenizeCapped(modelID, text string, limit int) ([]int32, error)
	ChatTokensCapped(modelID string, msgs []engine.Message, tools []engine.Tool, limit int) ([]int32, error)
}

// ModelLoader is an optional ability of an Engine: the admin API loads and unloads
// models through it.
type ModelLoader interface {
	Load(modelID string) error
	Unload(modelID string) error
}

// Options are the gateway's settings that are not in the config file.
type Options struct {
	Logger   *slog.Logger // nil: slog.Default()
	AdminKey string       // guards /admin/*; "": admin API off
	Now      func() time.Time
	Usage    usage.Rollups // nil: in memory, loaded at start from the rollups the ledger's store keeps (usage.go)
	// TenantKeyHint says where a tenant's API key is found, for the 401 the admin key
	// gets on /v1 (e.g. "the demo key: data/demo-key"); "": how to make one.
	TenantKeyHint string
	// MetricsKey, when set, is the bearer token GET /metrics requires (metrics_key_env).
	MetricsKey string
	// Collectors are added to /metrics (e.g. the Redis client's, internal/rediscli).
	Collectors []prometheus.Collector
	// Batches holds the Batch API's files and jobs (batches.go); nil: the API is off.
	// The server runs its jobs from New until Shutdown, BatchConcurrency lines of a
	// job at once (0: 4).
	Batches          *batch.Store
	BatchConcurrency int
	// BatchQueue carries batch lines to the processes that run them; nil: this
	// process runs its own (batch.InProcess). batch.RedisQueue shares them.
	BatchQueue batch.Queue
	// BatchCrashLimit is batch.Options.CrashLimit: how many runs of this process may
	// die with a batch line started before the line is failed (line_crashed_server)
	// instead of run again; 0: 2; below 0: never (tests that kill the process).
	BatchCrashLimit int

	// Peers, when set, is the registry of the processes sharing a Redis
	// (registry.Keeper), and NodeID this process's id in it: a request for a model
	// this process does not serve, or has scaled to zero while another holds it ready,
	// is forwarded to that process (peers.go, package forward), and /v1/models lists the models of
	// every live process.
	Peers  Peers
	NodeID string
	// ForwardFirstByte is the longest a forwarded request waits for the other
	// process's first byte (its 102 Processing, or its answer's headers; never an
	// event stream's body); 0: DefaultForwardFirstByte (redis.forward_first_byte_timeout).
	ForwardFirstByte time.Duration
	// ForwardIdle is the longest a forwarded event stream may go without a byte from
	// the other process once it has started; 0: DefaultForwardIdle
	// (redis.forward_idle_timeout). The other process sends an SSE comment when it has
	// written nothing for a third of it (KeepAliveHeader).
	ForwardIdle time.Duration
	// Responses keeps the stored responses of /v1/responses (respstore: bbolt in the
	// data directory, or Redis, which lets any process continue any response); nil:
	// this process's memory (at most 10,000 a tenant, forgotten at a restart).
	Responses respstore.Store
	// IdentifierKey keys the hashes of the end-user identifiers (user,
	// safety_identifier) kept in the ledger (identifiers.go); nil: a random key per
	// process, so hashes compare only within one run.
	IdentifierKey []byte
}

// Server is the HTTP front door. Create it with New, run it with Serve, stop it with
// Shutdown.
type Server struct {
	idKey      []byte // keys the hashes of end-user identifiers (identifiers.go)
	cfg        *Config
	eng        Engine // nil when every model is upstream
	ten        *tenancy.Tenancy
	book       *policies.Book
	quotas     map[*policies.Policy]*tenancy.Quota // every tenant's, by its policy
	set        *tiers.Set
	pred       *tiers.Predictor
	models     map[string]*model
	order      []string            // model ids in config order
	adapters   map[string]*adapter // LoRA adapters by id (adapters.go)
	adapterIDs []string            // their ids in config order
	log        *slog.Logger
	admin      []byte
	keyHint    string // Options.TenantKeyHint
	now        func() time.Time
	metrics    *metrics
	usage      usage.Rollups
	stored     respstore.Store // Options.Responses: GET /v1/lmlite/limits reports a tenant's; nil: none
	dash       sessions        // dashboard sign-ins (dashboard.go)
	metricsKey []byte          // nil: /metrics is open
	http       *fasthttp.Server
	clients    map[string]*fasthttp.HostClient // upstream connection pools, by scheme and host

	inFlight  atomic.Int64
	decoded   atomic.Int64 // request bodies handed to the JSON decoder (tests: a refused request decodes none)
	decisions atomic.Int64 // routing decisions made (decide; tests: one per request, whatever its fallbacks)
	draining  atomic.Bool
	conns     sync.Map       // *deadlineConn → time.Time accepted: the open connections (Shutdown closes those that never sent a byte)
	wg        sync.WaitGroup // in-flight requests, including streams after the handler returned
	created   int64
	batches   *batches        // nil: the Batch API is off
	responses *responsesCodec // /v1/responses (responses.go)
	peer      *peering        // nil: no registry (Options.Peers)
	keeps     keepAlives

	batchCrashLimit int // Options.BatchCrashLimit
}

// model is one servable model.
type model struct {
	id       string
	price    money.Price
	maxLen   atomic.Int64         // prompt + output tokens; 0: not known (yet)
	tier     string               // first tier listing it ("" if none), for X-LMLite-Tier
	in       [tiers.NumTiers]bool // the tiers listing it
	upstream *upstream
	dim      atomic.Int64  // embeddings' size, once an embedding request has seen it
	ownedBy  string        // "": "lmlite"
	idle     time.Duration // its idle timeout in the engine; forever: never unloaded for idleness
}

// limit is the model's length limit (0: unknown). For an embedded model whose limit
// the config leaves to the model file, it asks the engine until the model reports one.
func (s *Server) limit(m *model) int {
	if n := m.maxLen.Load(); n > 0 || m.upstream != nil || s.eng == nil {
		return int(n)
	}
	for _, st := range s.eng.Models() {
		if st.ID == m.id && st.MaxModelLen > 0 {
			m.maxLen.Store(int64(st.MaxModelLen))
			return st.MaxModelLen
		}
	}
	return 0
}

// New builds a server for a configuration (cmd/lmlite builds one from the config file).
// eng may be nil when every model is upstream.
func New(cfg Config, eng Engine, ten *tenancy.Tenancy, opts Options) (*Server, error) {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MinKeepAlive == 0 {
		cfg.MinKeepAlive = DefaultMinKeepAlive
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 1024
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	book := cfg.Book
	if book == nil {
		var err error
		if book, err = policies.NewBook(nil, nil, nil); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	set := cfg.Tiers
	for t := range set.Tiers {
		for _, c := range set.Tiers[t] {
			if !slices.ContainsFunc(cfg.Models, func(m Model) bool { return m.ID == c.Model }) &&
				!slices.ContainsFunc(cfg.Adapters, func(a Adapter) bool { return a.ID == c.Model }) {
				return nil, fmt.Errorf("gateway: tier %s lists the unknown model %q", tiers.Tier(t), c.Model)
			}
		}
	}
	s := &Server{
		cfg: &cfg, eng: eng, ten: ten, book: book, set: &set, pred: tiers.NewPredictor(),
		models: map[string]*model{}, log: opts.Logger, now: opts.Now, created: time.Now().Unix(),
		clients: map[string]*fasthttp.HostClient{}, idKey: newIdentifierKey(opts.IdentifierKey),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.responses = &responsesCodec{store: newMemResponses(maxMemResponses), log: s.log}
	if opts.Responses != nil {
		s.responses.store = &durableResponses{st: opts.Responses, now: func() time.Time { return s.now() }}
	}
	s.quotas = map[*policies.Policy]*tenancy.Quota{}
	for _, id := range book.Tenants() {
		pol, _ := book.Resolve(id)
		s.quotas[pol] = quotaOf(pol)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.AdminKey != "" {
		s.admin = []byte(opts.AdminKey)
	}
	s.keyHint = opts.TenantKeyHint
	if opts.MetricsKey != "" {
		s.metricsKey = []byte(opts.MetricsKey)
	}
	var status map[string]engine.ModelStatus
	if eng != nil {
		status = map[string]engine.ModelStatus{}
		for _, st := range eng.Models() {
			status[st.ID] = st
		}
	}
	for _, mc := range cfg.Models {
		m := &model{id: mc.ID, price: mc.Price, ownedBy: mc.OwnedBy, idle: cmp.Or(mc.IdleTimeout, engine.DefaultIdleTimeout)}
		if m.idle < 0 {
			m.idle = forever
		}
		m.maxLen.Store(int64(mc.MaxModelLen))
		if mc.Upstream != nil {
			var err error
			if m.upstream, err = newUpstream(mc.ID, *mc.Upstream, s.clients); err != nil {
				return nil, err
			}
		} else {
			if eng == nil {
				return nil, fmt.Errorf("gateway: model %q is embedded but there is no engine", mc.ID)
			}
			if m.maxLen.Load() == 0 {
				m.maxLen.Store(int64(status[mc.ID].MaxModelLen))
			}
		}
		// One queue limit: an embedded model's is the engine's (ModelStatus.MaxQueue,
		// where Generate starts refusing), and the router keeps away from the model at
		// the same depth; an upstream model's is the config's.
		maxQueue := mc.MaxQueue
		if st, ok := status[mc.ID]; ok && mc.Upstream == nil && st.MaxQueue > 0 {
			maxQueue = st.MaxQueue
		}
		s.pred.SetCapacity(mc.ID, mc.Slots, maxQueue)
		s.models[mc.ID] = m
		s.order = append(s.order, mc.ID)
	}
	s.adapters = map[string]*adapter{}
	for _, ac := range cfg.Adapters {
		base := s.models[ac.Base]
		switch {
		case base == nil || base.upstream != nil:
			return nil, fmt.Errorf("gateway: adapter %q: its base %q is not an embedded model", ac.ID, ac.Base)
		case s.models[ac.ID] != nil || s.adapters[ac.ID] != nil:
			return nil, fmt.Errorf("gateway: adapter %q: the id is taken", ac.ID)
		}
		s.adapters[ac.ID] = &adapter{id: ac.ID, base: base, tenant: ac.Tenant}
		s.adapterIDs = append(s.adapterIDs, ac.ID)
	}
	for t := tiers.Max; t >= tiers.Fast; t-- {
		for _, c := range s.set.Tiers[t] {
			if a := s.adapters[c.Model]; a != nil {
				a.tier, a.in[t] = t.String(), true
				continue
			}
			s.models[c.Model].tier = t.String()
			s.models[c.Model].in[t] = true
		}
	}
	s.metrics = newMetrics(s)
	if opts.Peers != nil {
		forwarded := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_forwarded_requests_total",
			Help: "Requests forwarded to the process serving their model, by node and the status it answered (error: not reached)."},
			[]string{"node", "status"})
		s.metrics.reg.MustRegister(forwarded)
		s.peer = &peering{nodeID: opts.NodeID, Forwarder: forward.New(forward.Options{Peers: opts.Peers, NodeID: opts.NodeID,
			FirstByte: opts.ForwardFirstByte, Idle: opts.ForwardIdle, Now: s.now, Log: s.log, Forwarded: forwarded})}
	}
	// Requests a killed process left running are charged before anything reads the
	// ledger (the rollups, the batch lines' charges).
	if n, err := ten.SettleInterrupted(func(tenant string) *tenancy.Quota {
		if pol, ok := s.book.Resolve(tenant); ok {
			return s.quota(pol)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("gateway: interrupted requests: %w", err)
	} else if n > 0 {
		s.log.Warn("charged requests interrupted by the last stop at their reservation", "requests", n)
	}
	s.stored = opts.Responses
	if err := s.initUsage(opts.Usage); err != nil {
		return nil, fmt.Errorf("gateway: usage rollups: %w", err)
	}
	for _, c := range opts.Collectors {
		s.metrics.reg.MustRegister(c)
	}
	if opts.Batches != nil {
		s.batchCrashLimit = opts.BatchCrashLimit
		if err := s.startBatches(opts.Batches, opts.BatchConcurrency, opts.BatchQueue); err != nil {
			return nil, fmt.Errorf("gateway: batches: %w", err)
		}
	}
	s.http = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleConnError,
		Name:               "lmlite",
		MaxRequestBodySize: cfg.MaxBodyBytes,
		// A body over MaxRequestBodySize reaches the handler as a stream rather than a
		// 413: POST /v1/files writes it to disk as it arrives (uploadFile); every other
		// request gets the 413 from bodyFits. Multipart forms are parsed by uploadFile.
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  5 * time.Minute,
		IdleTimeout:                  2 * time.Minute,
		CloseOnShutdown:              true,
		ConnState:                    s.connState,
		NoDefaultServerHeader:        false,
		NoDefaultContentType:         true,
		Logger:                       fasthttpLogger{s.log},
		SecureErrorLogMessage:        true, // fasthttp's errors do not quote the request's headers (handleConnError, fasthttpLogger)
	}
	return s, nil
}

// fasthttpLogger logs fasthttp's own lines at debug level. fasthttp quotes request
// bytes in its errors (with %q: a header's value, the first and last 200 bytes of
// the headers), which may hold an Authorization header: an error's text is logged
// up to its first quote only. SecureErrorLogMessage drops most of them at the
// source; this covers those it does not (an invalid header value).
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	if !f.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = redactedError(err)
		}
	}
	f.l.Debug("fasthttp", "msg", fmt.Sprintf(format, args...))
}

// redactedError is err's text up to its first quote (fasthttp quotes request bytes).
func redactedError(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '"'); i >= 0 {
		return msg[:i] + "[request bytes withheld]"
	}
	return msg
}

// Serve serves on ln until Shutdown. A write to a client that makes no progress for
// Config.WriteTimeout fails and closes the connection (deadlineConn).
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(deadlineListener{Listener: ln, d: s.cfg.WriteTimeout})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// Shutdown drains: new requests answer 503, the listeners close, in-flight requests
// (streams included) finish and settle, or ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	// fasthttp waits for every connection, so every handler (and its wg.Add) has run
	// when it returns; then wait for the stream writers' settling. It closes the idle
	// keep-alive connections itself, but not one accepted that never sent a byte (a
	// client's spare connection): closeFresh does, or the drain would wait for it
	// until ReadTimeout or ctx ends.
	stop := make(chan struct{})
	go s.closeFresh(stop)
	err := s.http.ShutdownWithContext(ctx)
	close(stop)
	if s.batches != nil {
		s.batches.m.Close() // running lines finish and are committed; the rest resume at the next start
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}

// freshGrace is how long Shutdown lets a connection accepted just before it send its
// first byte before closing it.
const freshGrace = 250 * time.Millisecond

// connState tracks the open connections (fasthttp marks a connection active before
// its first byte arrives: deadlineConn.Read notes that byte).
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	dc, ok := c.(*deadlineConn)
	if !ok {
		return
	}
	switch st {
	case fasthttp.StateNew:
		s.conns.Store(dc, time.Now())
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.conns.Delete(dc)
	}
}

// closeFresh closes, until stop, every connection that has sent no byte within
// freshGrace of its accept (every 50 ms).
func (s *Server) closeFresh(stop <-chan struct{}) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		now := time.Now()
		s.conns.Range(func(k, v any) bool {
			if dc := k.(*deadlineConn); !dc.read.Load() && now.Sub(v.(time.Time)) >= freshGrace {
				s.conns.Delete(k)
				dc.Close()
			}
			return true
		})
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// Handler returns the request handler (for tests and embedding).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

// requestID makes the request's own id, "req_" and 16 random hex digits: the id of
// its ledger entry, logs and response. The client's X-Request-Id, when sane, is kept
// apart (clientRequestID: a label, never matched by the server) and echoed in the
// response's X-Request-Id; without one, the server's id is.
func (s *Server) requestID(ctx *fasthttp.RequestCtx) string {
	var b [20]byte
	copy(b[:], "req_")
	v := rand.Uint64()
	const hex = "0123456789abcdef"
	for i := 0; i < 16; i++ {
		b[4+i] = hex[(v>>(60-4*i))&0xf]
	}
	if id := clientRequestID(ctx); id != nil {
		ctx.Response.Header.SetBytesV("X-Request-Id", id)
	} else {
		ctx.Response.Header.SetBytesV("X-Request-Id", b[:])
	}
	return string(b[:])
}

// clientRequestID is the client's X-Request-Id when it is sane (at most 128
// printable ASCII bytes), or nil.
func clientRequestID(ctx *fasthttp.RequestCtx) []byte {
	id := ctx.Request.Header.Peek("X-Request-Id")
	if len(id) == 0 || len(id) > 128 || !printable(id) {
		return nil
	}
	return id
}

// echoedID is the id the response's X-Request-Id carries: the client's, or reqID.
func echoedID(ctx *fasthttp.RequestCtx, reqID string) string {
	if id := clientRequestID(ctx); id != nil {
		return string(id)
	}
	return reqID
}

func printable(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	reqID := s.requestID(ctx)
	defer func() {
		if p := recover(); p != nil { // a bug, never bad input: keep serving others
			s.log.Error("panic", "request_id", reqID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			ctx.ResetBody()
			s.writeError(ctx, reqID, &apiError{status: 500, typ: "server_error", message: "internal error", reason: "internal"})
		}
	}()
	if ctx.IsPost() {
		forward.Ack(ctx) // a forwarding process's time to first byte
	}
	path := ctx.Path()
	if ctx.Request.IsBodyStream() && !s.bodyFits(ctx, reqID, path) {
		return
	}
	switch string(path) {
	case "/v1/chat/completions":
		if !s.method(ctx, reqID, "POST") {
			return
		}
		s.handleGenerate(ctx, reqID, chatCodec)
	case "/v1/completions":
		if !s.method(ctx, reqID, "POST") {
			return
		}
		s.handleGenerate(ctx, reqID, completionsCodec)
	case "/v1/messages":
		if !s.methodIn(ctx, reqID, messagesAPI, "POST") {
			return
		}
		s.handleGenerate(ctx, reqID, messagesAPI)
	case "/v1/messages/count_tokens":
		if s.methodIn(ctx, reqID, countAPI, "POST") {
			s.handleCountTokens(ctx, reqID)
		}
	case "/v1/responses":
		if !s.method(ctx, reqID, "POST") {
			return
		}
		s.handleGenerate(ctx, reqID, s.responses)
	case "/v1/responses/input_tokens":
		if s.method(ctx, reqID, "POST") {
			s.handleInputTokens(ctx, reqID)
		}
	case "/v1/embeddings":
		if s.method(ctx, reqID, "POST") {
			s.handleEmbeddings(ctx, reqID)
		}
	case "/v1/models":
		if s.method(ctx, reqID, "GET") {
			s.handleModels(ctx, reqID)
		}
	case "/healthz":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.WriteString("ok\n")
	case "/readyz":
		ctx.SetContentType("text/plain; charset=utf-8")
		if s.ready() {
			ctx.WriteString("ready\n")
		} else {
			ctx.SetStatusCode(503)
			ctx.WriteString("not ready\n")
		}
	case "/metrics":
		if s.metricsAllowed(ctx) {
			s.metrics.handler(ctx)
		}
	default:
		if bytes.HasPrefix(path, []byte("/v1/files")) || bytes.HasPrefix(path, []byte("/v1/batches")) {
			s.handleBatchAPI(ctx, reqID)
			return
		}
		if bytes.HasPrefix(path, []byte("/admin/")) {
			s.handleAdmin(ctx, reqID)
			return
		}
		if s.handleUsageAPI(ctx, reqID, path) || s.handleDashboard(ctx, reqID, path) || s.handleResponsesAPI(ctx, reqID, path) {
			return
		}
		if id, ok := bytes.CutPrefix(path, []byte("/v1/models/")); ok {
			if s.method(ctx, reqID, "GET") {
				s.handleModel(ctx, reqID, string(id))
			}
			return
		}
		if string(path) == "/" && ctx.IsGet() && bytes.Contains(ctx.Request.Header.Peek("Accept"), []byte("text/html")) {
			ctx.Redirect("/dashboard", 303) // a browser; API clients get the JSON 404
			return
		}
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error",
			message: "unknown URL " + string(path), reason: "not_found"})
	}
}

func (s *Server) method(ctx *fasthttp.RequestCtx, reqID, m string) bool {
	return s.methodIn(ctx, reqID, chatCodec, m)
}

// methodIn is method answering in codec c's error shape.
func (s *Server) methodIn(ctx *fasthttp.RequestCtx, reqID string, c codec, m string) bool {
	if string(ctx.Method()) == m {
		return true
	}
	ctx.Response.Header.Set("Allow", m)
	s.writeErrorIn(ctx, reqID, c, &apiError{status: 405, typ: "invalid_request_error",
		message: "method " + string(ctx.Method()) + " not allowed; use " + m, reason: "bad_request"})
	return false
}

func (s *Server) ready() bool {
	if s.draining.Load() {
		return false
	}
	return s.eng == nil || s.eng.Ready()
}

// handleConnError answers errors fasthttp meets before the handler: a body over the
// configured size (413), headers over its read buffer (431), a read that timed out
// (408), or a malformed request (400). The answer never quotes the error: fasthttp's
// errors quote the request's bytes, Authorization header included.
func (s *Server) handleConnError(ctx *fasthttp.RequestCtx, err error) {
	reqID := s.requestID(ctx)
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.writeError(ctx, reqID, s.tooLarge())
	case errors.As(err, &small):
		s.writeError(ctx, reqID, &apiError{status: 431, typ: "invalid_request_error", code: "request_header_fields_too_large",
			message: "the request's header fields are too large", reason: "bad_request"})
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, fasthttp.ErrTimeout):
		s.writeError(ctx, reqID, &apiError{status: 408, typ: "invalid_request_error", code: "request_timeout",
			message: "the request was not received in time", reason: "bad_request"})
	default:
		s.writeError(ctx, reqID, &apiError{status: 400, typ: "invalid_request_error", code: "malformed_request",
			message: "malformed HTTP request", reason: "bad_request"})
	}
}

// bodyFits makes sure a request's body is in memory and within max_body_bytes (it
// answers 413 when not), except for an upload to POST /v1/files, which streams. A
// body within the limit with a Content-Length is already read; a chunked one is read
// here, up to the limit.
func (s *Server) bodyFits(ctx *fasthttp.RequestCtx, reqID string, path []byte) bool {
	if string(path) == "/v1/files" && ctx.IsPost() {
		return true
	}
	n := ctx.Request.Header.ContentLength()
	if n >= 0 && n <= s.cfg.MaxBodyBytes {
		return true
	}
	if n < 0 {
		b, err := io.ReadAll(io.LimitReader(ctx.RequestBodyStream(), int64(s.cfg.MaxBodyBytes)+1))
		if err != nil {
			s.writeError(ctx, reqID, badRequest("body", "reading the body: "+err.Error()))
			ctx.SetConnectionClose()
			return false
		}
		if len(b) <= s.cfg.MaxBodyBytes {
			ctx.Request.SetBody(b)
			return true
		}
	}
	// Read (and drop) a body up to 4 MiB over the limit, so that a client still
	// writing it reads the 413 rather than a connection reset (closing a socket with
	// unread data resets it, and the reset discards the answer on the client's side).
	switch {
	case n < 0: // chunked: the limit was read; drop at most 4 MiB more
		io.Copy(io.Discard, io.LimitReader(ctx.RequestBodyStream(), 4<<20))
	case n-s.cfg.MaxBodyBytes <= 4<<20:
		io.Copy(io.Discard, io.LimitReader(ctx.RequestBodyStream(), int64(n)))
	}
	s.writeError(ctx, reqID, s.tooLarge())
	ctx.SetConnectionClose() // the rest of the body is not read
	return false
}

// tooLarge is the answer to a body over max_body_bytes: 413, naming the limit.
func (s *Server) tooLarge() *apiError {
	return &apiError{status: 413, typ: "invalid_request_error", code: "request_too_large", param: "body",
		message: "the request body is larger than the limit of " + strconv.Itoa(s.cfg.MaxBodyBytes) + " bytes (max_body_bytes)",
		reason:  "bad_request"}
}

// writeError writes e in OpenAI's error shape.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, reqID string, e *apiError) {
	s.writeErrorIn(ctx, reqID, chatCodec, e)
}

// writeErrorIn writes e in the error shape of codec c, with c's status for it, and
// counts and logs it.
func (s *Server) writeErrorIn(ctx *fasthttp.RequestCtx, reqID string, c codec, e *apiError) {
	ctx.SetStatusCode(c.errorStatus(e))
	ctx.SetContentType("application/json")
	if e.retry > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(e.retry))
	}
	b := make([]byte, 0, 256)
	b = c.appendError(b, e)
	ctx.SetBody(b)
	s.noteError(reqID, e)
}

// noteError counts and logs an error answered.
func (s *Server) noteError(reqID string, e *apiError) {
	if e.reason != "" && e.reason != "not_found" {
		s.metrics.rejections.WithLabelValues(e.reason).Inc()
	}
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	s.log.Info("rejected", "request_id", reqID, "status", e.status, "reason", e.reason, "param", e.param, "error", e.message)
}

// appendErrorJSON appends e in OpenAI's error shape (openai.AppendError).
func appendErrorJSON(b []byte, e *apiError) []byte { return openai.AppendError(b, e.wire()) }

// authenticateFor authenticates a request in the wire format of c: its API key is
// where c reads it (apiKeyer), else in Authorization: Bearer.
func (s *Server) authenticateFor(ctx *fasthttp.RequestCtx, c codec) (string, *policies.Policy, *apiError) {
	if k, ok := c.(apiKeyer); ok {
		key := k.apiKey(&ctx.Request.Header)
		if len(key) == 0 {
			return "", nil, &apiError{status: 401, typ: "invalid_request_error", code: "invalid_api_key",
				message: "missing API key", reason: "auth"}
		}
		return s.authenticateKey(key)
	}
	return s.authenticate(ctx)
}

// authenticate returns the key id and policy of the request's API key
// (Authorization: Bearer).
func (s *Server) authenticate(ctx *fasthttp.RequestCtx) (string, *policies.Policy, *apiError) {
	auth := ctx.Request.Header.Peek("Authorization")
	key, ok := bytes.CutPrefix(auth, []byte("Bearer "))
	if !ok || len(key) == 0 {
		return "", nil, &apiError{status: 401, typ: "invalid_request_error", code: "invalid_api_key",
			message: "missing API key: send 'Authorization: Bearer lml_...'", reason: "auth"}
	}
	return s.authenticateKey(key)
}

// authenticateKey returns the key id and policy of an API key.
func (s *Server) authenticateKey(key []byte) (string, *policies.Policy, *apiError) {
	tenant, keyID, err := s.ten.Store().Authenticate(string(key))
	if err != nil {
		msg := "incorrect API key provided"
		if s.admin != nil && subtle.ConstantTimeCompare(key, s.admin) == 1 {
			hint := s.keyHint
			if hint == "" {
				hint = "`lmlite keys create --tenant T` makes one"
			}
			msg = "this is the admin key (for /admin and the operator's dashboard); use a tenant API key (" + hint + ") for /v1"
		}
		return "", nil, &apiError{status: 401, typ: "invalid_request_error", code: "invalid_api_key",
			message: msg, reason: "auth"}
	}
	pol, ok := s.book.Resolve(tenant)
	if !ok {
		return "", nil, &apiError{status: 401, typ: "invalid_request_error", code: "invalid_api_key",
			message: "the key's tenant is not configured on this server", reason: "auth"}
	}
	return keyID, pol, nil
}

// quotaOf copies the limits and budgets tenancy enforces out of a policy.
func quotaOf(pol *policies.Policy) *tenancy.Quota {
	return &tenancy.Quota{Tenant: pol.Tenant, RequestsPerSecond: pol.RequestsPerSecond, Burst: pol.Burst,
		TokensPerMinute: pol.TokensPerMinute, MaxConcurrency: pol.MaxConcurrency,
		DailyBudget: pol.DailyBudget, MonthlyBudget: pol.MonthlyBudget}
}

// quota is the tenant's Quota (made once per policy at start-up).
func (s *Server) quota(pol *policies.Policy) *tenancy.Quota {
	if q := s.quotas[pol]; q != nil {
		return q
	}
	return quotaOf(pol)
}

// allowed reports whether the policy lets the tenant use model id: the plan allows the
// model and a tier it serves in (policies.Policy.AllowsServing). An unknown model is
// not allowed.
func (s *Server) allowed(pol *policies.Policy, id string) bool {
	m, ok := s.models[id]
	return ok && pol.AllowsServing(id, m.in)
}

// modelNotFound is the answer for a model that does not exist or that the key may
// not use, the same for both (OpenAI's 404), so a key cannot probe other plans'
// models. It lists what the key may use.
func (s *Server) modelNotFound(pol *policies.Policy, id string) *apiError {
	var b strings.Builder
	b.WriteString("The model '")
	b.WriteString(id)
	b.WriteString("' does not exist or you do not have access to it. This key may use: auto, tier:NAME")
	for _, m := range s.order {
		if s.allowed(pol, m) {
			b.WriteString(", ")
			b.WriteString(m)
		}
	}
	for _, a := range s.adapterIDs {
		if s.adapterFor(pol, a) != nil {
			b.WriteString(", ")
			b.WriteString(a)
		}
	}
	reason := "model_not_found" // the operator's metrics and logs tell the two apart
	if _, ok := s.models[id]; ok {
		reason = "forbidden"
	} else if a := s.adapters[id]; a != nil && a.visible(pol.Tenant) {
		reason = "forbidden"
	}
	return &apiError{status: 404, typ: "invalid_request_error", code: "model_not_found", param: "model",
		message: b.String(), reason: reason}
}

func (s *Server) handleModels(ctx *fasthttp.RequestCtx, reqID string) {
	_, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	b := append(make([]byte, 0, 512), `{"object":"list","data":[`...)
	embeds, states := s.embedding(), s.modelStates()
	remote := s.remoteModels()
	n := 0
	head := func(id string) {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"id":`...)
		b = jsonenc.AppendString(b, id)
		b = append(b, `,"object":"model","created":`...)
		b = strconv.AppendInt(b, s.created, 10)
	}
	for _, id := range s.order {
		if !s.allowed(pol, id) {
			continue
		}
		head(id)
		b = appendModelTail(b, s.ownedBy(id), embeds[id], states[id], remote[id].nodesWith(s.peer))
	}
	for _, id := range sortedKeys(remote) {
		r := remote[id]
		if _, ok := s.models[id]; ok || !pol.AllowsServing(id, r.in) {
			continue
		}
		head(id)
		b = appendModelTail(b, "lmlite", r.embeds, engine.ModelState(r.state), r.nodes)
	}
	astates := s.adapterStates()
	for _, id := range s.adapterIDs {
		if a := s.adapterFor(pol, id); a != nil {
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = s.appendAdapter(b, a, astates)
		}
	}
	b = append(b, "]}"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// embedding says which models serve /v1/embeddings.
func (s *Server) embedding() map[string]bool {
	out := map[string]bool{}
	if _, ok := s.eng.(Features); !ok {
		return out
	}
	for _, st := range s.eng.Models() {
		if m := s.models[st.ID]; m != nil && m.upstream == nil && st.Embeddings {
			out[st.ID] = true
		}
	}
	return out
}

// appendModelTail ends a model object: owned_by and lmlite's extension, which says
// whether the model serves /v1/embeddings and, for a model the engine serves, its
// lifecycle state (ready, loading, unloaded when scaled to zero, failed).
func appendModelTail(b []byte, ownedBy string, embeds bool, state engine.ModelState, nodes []string) []byte {
	b = append(b, `,"owned_by":`...)
	b = jsonenc.AppendString(b, ownedBy)
	b = append(b, `,"lmlite":{"embeddings":`...)
	b = strconv.AppendBool(b, embeds)
	if state != "" {
		b = append(b, `,"state":`...)
		b = jsonenc.AppendString(b, string(state))
	}
	if nodes != nil {
		b = append(b, `,"nodes":[`...)
		for i, n := range nodes {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, n)
		}
		b = append(b, ']')
	}
	return append(b, "}}"...)
}

// ownedBy is a model's owned_by in /v1/models: its config's owned_by, else "lmlite".
func (s *Server) ownedBy(id string) string {
	if m, ok := s.models[id]; ok && m.ownedBy != "" {
		return m.ownedBy
	}
	return "lmlite"
}

// handleModel answers GET /v1/models/{id}.
func (s *Server) handleModel(ctx *fasthttp.RequestCtx, reqID, id string) {
	_, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	if a := s.adapterFor(pol, id); a != nil {
		ctx.SetContentType("application/json")
		ctx.SetBody(s.appendAdapter(nil, a, s.adapterStates()))
		return
	}
	r, remote := s.remoteModels()[id]
	_, local := s.models[id]
	if !s.allowed(pol, id) && (local || !remote || !pol.AllowsServing(id, r.in)) {
		s.writeError(ctx, reqID, s.modelNotFound(pol, id))
		return
	}
	b := append(make([]byte, 0, 128), `{"id":`...)
	b = jsonenc.AppendString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, s.created, 10)
	if local {
		b = appendModelTail(b, s.ownedBy(id), s.embedding()[id], s.modelStates()[id], r.nodesWith(s.peer))
	} else {
		b = appendModelTail(b, "lmlite", r.embeds, engine.ModelState(r.state), r.nodes)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// modelStates is each embedded model's lifecycle state (ready, loading, unloaded:
// scaled to zero, failed), read without waking anything.
func (s *Server) modelStates() map[string]engine.ModelState {
	if s.eng == nil {
		return nil
	}
	st := map[string]engine.ModelState{}
	for _, m := range s.eng.Models() {
		st[m.ID] = m.State
	}
	return st
}

// checkAdmin checks the admin key in constant time.
func (s *Server) checkAdmin(ctx *fasthttp.RequestCtx) *apiError {
	if s.admin == nil {
		return &apiError{status: 403, typ: "invalid_request_error", code: "admin_disabled",
			message: "the admin API is off: set the admin key (admin_key_env) to enable it", reason: "auth"}
	}
	key, ok := bytes.CutPrefix(ctx.Request.Header.Peek("Authorization"), []byte("Bearer "))
	if !ok || subtle.ConstantTimeCompare(key, s.admin) != 1 {
		return &apiError{status: 401, typ: "invalid_request_error", code: "invalid_api_key",
			message: "incorrect admin key", reason: "auth"}
	}
	return nil
}
