// Package gateway is lmlite's front door: an OpenAI-compatible HTTP API on fasthttp,
// with API-key auth, per-tenant quotas and budgets, TierSet routing, server-sent-event
// streaming, Prometheus metrics and an admin API.
//
// # The request path
//
// For POST /v1/chat/completions and POST /v1/completions the handler runs, in order
// (DESIGN.md, "The request path"):
//
//  1. X-Request-Id: the client's (when sane) or a new one; it is on every response,
//     log line and ledger entry.
//  2. Drain and overload: 503 while shutting down or above max_in_flight.
//  3. Auth: "Authorization: Bearer lml_…" → tenancy.Store.Authenticate (401), then the
//     tenant's effective policy from policies.Book (resolved once at start-up).
//  4. Parse: the body is checked for UTF-8 and decoded strictly; a bad field, an
//     unknown parameter or a supported-but-unimplemented one (n > 1, tools, …) is a
//     400 naming it, in OpenAI's error shape.
//  5. Route: "model" names a model, "auto" (the plan's default mode) or "tier:NAME"
//     (fixed); the body's "lmlite" object or the X-LMLite-* headers add the mode,
//     tier, max latency and max cost. A model or tier the policy forbids is a 403.
//  6. Admit: tenancy.Admit checks concurrency, tokens/min and requests/s (429 with
//     Retry-After).
//  7. Select: tiers.Select picks the tier and model from live latency statistics,
//     the request's budgets and the tenant's remaining money.
//  8. Prepare: embedded models render and tokenize chat with their template
//     (Engine.ChatTokens: message texts stay plain text, only the template's markup
//     becomes control tokens); max_tokens is checked against the model's limit (400).
//  9. Reserve the worst-case cost (429 insufficient_quota when the budget is spent).
//  10. Run: embedded models through Engine.Generate, upstream models through a pooled
//     fasthttp client (bodies pass through; streams are relayed event by event). A
//     tier that fails before answering is excluded and the router steps down.
//  11. Answer: JSON, or SSE flushed per token ending "data: [DONE]"; a client that
//     goes away cancels the generation (a failed flush when streaming, a socket
//     peek every 100ms otherwise).
//  12. Settle: the actual cost replaces the reservation and the usage goes to the
//     ledger; the response completes only after its ledger group is logged, so a
//     server killed with SIGKILL never loses usage it acknowledged.
//
// # The engine
//
// The gateway needs five methods of the embedded engine (the Engine interface, which
// the engine's Block satisfies); it knows nothing of tensors. Optional abilities are
// found by type assertion: ModelLoader for the admin API's load and unload (cmd/lmlite
// adapts the Block's context-taking Load), and prometheus.Collector for the engine's
// own metrics (lmlite_engine_*: model state, memory, replicas, queue depth; batch
// sizes and KV blocks as the runtime reports them), registered beside the gateway's.
//
// # Metrics
//
// The gateway's own (metrics.go): requests by tenant, model, tier and status; time to
// first token, time per output token (embedded models, and streamed upstream
// answers) and end-to-end latency histograms per model; tokens; spend by tenant and
// model; rejections by reason; prefix-cache hit tokens; cold starts (requests that
// waited for their model to load); upstream failures; admin loads and unloads; and,
// at scrape time, every model's state, memory, replicas and queue depth (upstream
// models included) and the requests in flight.
//
// # Other endpoints
//
// GET /v1/models (the models the tenant may use), GET /healthz, GET /readyz (200
// only when the engine is ready and the server is not draining), GET /metrics, and
// /admin/* guarded by the admin key (see handleAdmin).
//
// Shutdown drains: it answers 503 to new requests, closes the listener, and waits
// for in-flight requests, streams included, to finish and settle.
package gateway
