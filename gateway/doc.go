// Package gateway is lmlite's front door: an OpenAI-compatible HTTP API on fasthttp,
// with API-key auth, per-tenant quotas and budgets, TierSet routing, server-sent-event
// streaming, Prometheus metrics and an admin API.
//
// # A request in eight steps
//
// A generation request (OpenAI's chat or completions, OpenAI's Responses,
// Anthropic's Messages) goes one way through one core; the packages it meets:
//
//  1. gateway (server.go, Server.handle): an id, the endpoint's codec (codec.go:
//     chat/completions in openai.go, Responses in responses.go, Messages in
//     messages.go, each a thin value that decodes and picks its output), then
//     Server.handleGenerate (run.go), after which every error is answered in the
//     codec's shape. The wire formats live in the codec packages, which import
//     gateway/core and never package gateway: gateway/openai (chat and
//     completions' rendering, Responses' items and rendering, embeddings) and
//     gateway/anthropic (Messages' decoding and rendering).
//  2. tenancy and policies: the key (where the codec reads it) authenticates a
//     tenant; the tenant is admitted from the header alone (concurrency,
//     requests/s) before the body is read.
//  3. The codec decodes the body into the core request (input: messages, features,
//     sampling, limits, stream), strictly with gateway/core (core.DecodeBody; a codec
//     package's errors are core.FieldErrors); a bad field is a 400 naming it in its
//     API's terms.
//  4. gateway/forward: with a registry (package registry), a request for a model
//     another process serves is forwarded there (peers.go decides, Server.forwardBy;
//     forward.Forwarder sends and relays), and a stream that breaks ends with the
//     client's codec's error event (forward.Ender).
//  5. tenancy again: tokens/min and money (the request's least cost), before any
//     expensive work.
//  6. tiers (decide.go, job.decide): one routing decision over the candidates' exact
//     worst cases (the prompt rendered and tokenized once per model by the engine).
//  7. engine (or an upstream server, upstream.go): the reservation on the ticket,
//     then the generation; a refusal before answering releases and takes the next
//     choice.
//  8. The codec's output (a core.Output of gateway/openai or gateway/anthropic)
//     renders the core's events (core.Event) or its whole (core.Whole), every
//     stream framed and flushed by internal/sse; tenancy settles the ticket and
//     usage records it before the answer completes.
//
// # Each step in detail
//
// Every generation request goes one way through one core, whatever its wire format:
// the format is a codec (codec.go, the contract), which decodes the body into the
// core request (parse.go, input: messages or prompt, features, sampling, limits,
// stream) and renders the core's result and its errors in its own shape through an
// output of its package: gateway/core (result.go) holds the result's types (Events
// while streaming: start, text, tool-call fragments, finish, usage, error; a Whole
// otherwise), the Output a codec package implements and the Error it renders.
// OpenAI's chat and completions are openai.go's codecs (chatCodec,
// completionsCodec), rendered by gateway/openai's ChatOutput (chat.go). Admission, routing, the engine and settlement never
// see wire bytes, and a codec never touches them. A chat request (POST
// /v1/chat/completions; /v1/completions is the same) goes through these steps,
// each a file and function:
//
//  1. server.go, Server.handle: the request's own id ("req_" + 16 random hex
//     digits: its ledger entry's, its logs', its completion id's); the client's
//     X-Request-Id, when sane, is kept apart (the entry's client_request_id, a label
//     never matched by the server) and echoed in the response header, else the
//     server's id is. Then run.go, Server.handleGenerate(ctx, reqID, codec), the
//     entry of every codec: from here on every error is answered in the codec's
//     shape and status (Server.writeErrorIn: codec.appendError, codec.errorStatus).
//     503 while draining or above
//     max_in_flight; a body over max_body_bytes is a 413 (Server.bodyFits: fasthttp
//     streams a body over the limit to the handler, for POST /v1/files; every other
//     request gets its 413 there, a chunked body read up to the limit).
//  2. server.go, Server.authenticateFor: the key where the codec reads it
//     (apiKeyer; OpenAI's: "Authorization: Bearer lml_…") →
//     tenancy.Store.Authenticate (401; the admin key is told it is the admin key and
//     where a tenant's key is, Options.TenantKeyHint), then the tenant's policy from
//     policies.Book. Then the tenant's admission from the header alone, before the
//     body is decoded (run.go, job.admitTenant: tenancy.Tenancy.Admit with no
//     estimate; concurrency and requests/s, 429 with Retry-After), so a request over
//     its tenant's limits costs no parse, whatever its body; so for
//     /v1/embeddings. fasthttp has read at most 8 KiB of the body by then (the
//     server streams bodies, for uploads): a refused request's rest is read and
//     dropped (Server.dropBody), at most max_body_bytes of network I/O into a small
//     buffer, never kept or decoded. Every refusal after this (a bad body, a 400 or
//     404 below, tokens/min, money) settles the ticket at no cost: its slot is
//     freed at once, its requests/s token stays spent, and it has a ledger entry
//     (status, cost 0). A process with peers (peers.go) admits a request the
//     body may send elsewhere at step 5 instead (the receiving process alone
//     admits it); one forwarded to it, here.
//  3. codec.decode into the core request (OpenAI's: parse.go, input.decodeChat,
//     input.fromChat, input.chatTail, which a chat-shaped codec ends with too;
//     input.decodeCompletion): the body decoded strictly (request.go, decodeBody,
//     with go-json-experiment) into gateway/openai's request types, whose
//     request.go also reads the sampling parameters, stop strings, output limits,
//     messages, prompts and metadata; a bad or unknown field, or one the server does not
//     serve (best_of, audio, …) is a 400 naming it, in the codec's error
//     shape; a value of the wrong type says what the field expects in JSON's
//     words ("expected an integer, got a string": gateway/core's json.go, which
//     the Batch API's create body is decoded with too; never Go's type names). gateway/openai's features.go reads
//     the OpenAI features: response_format, tools,
//     tool_choice, parallel_tool_calls, logprobs, top_logprobs, echo and n
//     (completions' max_tokens 0 with echo scores the prompt: engine.Request.PromptOnly);
//     the deprecated functions/function_call become tools/tool_choice
//     (legacyFeatures; the answer then has message.function_call).
//     logit_bias is checked for its shape there (openai.ParseLogitBias) and against the chosen
//     model's vocabulary when planned (job.checkTokenIDs: no positive bias on a
//     control token), as a completions prompt of token ids is (no control token but
//     BOS). reasoning_effort and verbosity are checked and do nothing; store and
//     metadata are accepted; user and safety_identifier reach the ledger entry only
//     as keyed hashes (identifiers.go); prompt_cache_key is an affinity
//     (prefix.go, cacheKeyHash: engine.Request.Affinity picks the replica, and
//     with peers it is the request's prefix key). prediction (Predicted Outputs, on
//     chat and completions: prediction.go, parsePrediction) becomes
//     engine.Request.Prediction, drafts verified by the engine (the output is the
//     same with or without it); usage then has completion_tokens_details'
//     accepted_prediction_tokens and rejected_prediction_tokens, the rejected ones
//     part of completion_tokens and billed, as OpenAI bills them (at most 64 KiB of
//     prediction; the worst case reserves its bytes + 1 tokens per choice). "lmlite":
//     {"speculative": false} decodes without drafts (engine.Request.NoSpeculation).
//  4. route.go, Server.routeOf: "model" is a model, a LoRA adapter's id (adapters.go:
//     the request runs on its base with route.adapter applied), "auto" (the plan's
//     default mode) or "tier:NAME" (fixed); the body's "lmlite" object or
//     X-LMLite-* headers add mode, tier, max latency and max cost. A model or
//     adapter the key may not use (the plan forbids it or every tier it serves in;
//     another tenant's private adapter) is a 404 model_not_found like an unknown
//     one, listing what the key may use; a forbidden tier is a 403. A tier may list
//     an adapter (decide.go: the candidate runs on its base with choice.adapter,
//     Server.candidate); another tenant's private one is tiers.Request.Hidden for
//     the request, passed over without naming it.
//     With a registry (Options.Peers: several processes sharing a Redis), a request
//     naming a model this process does not serve, or has scaled to zero while
//     another holds it ready, is forwarded here to that process as it came
//     (peers.go, Server.maybeForward, registry.Pick; preferring a process warm
//     for the prompt's prefix key, prefix.go) and its answer relayed; the
//     receiving process alone admits, charges and ledgers it. A request naming
//     another tenant's private adapter is not forwarded (Server.forwardQuery reads
//     the adapters' owners, here or announced: registry.Model.Owners): its 404 comes
//     from this process, as fast as for a name nobody serves. A request routed by
//     tier whose best tier only another process has goes there before admission
//     (job.maybeForwardTier, registry.PickTier). A forwarded request asks for a
//     102 Processing (AckHeader) and waits at most Options.ForwardFirstByte for it:
//     502 node_unresponsive past it; a node lost under it is a 502 node_lost, or an
//     error event mid-stream (package forward's relay), in the client's API
//     (forward.Ender, streamEnder: OpenAI's chat an {"error":…} event and [DONE];
//     Responses an error event in sequence; Messages event: error). A forwarded
//     event stream may go at most Options.ForwardIdle without a byte (an error
//     event node_unresponsive past it); the receiving process writes
//     ": keep-alive" comments when it has written nothing for a third of that
//     (KeepAliveHeader, keepAlive), which the relay drops.
//  5. run.go, job.serve: admission, before any expensive work (the chat template,
//     the tokenizer, the router). A batch line is admitted here by
//     tenancy.Tenancy.AdmitBatchLine (its budgets only); any other request by
//     job.admit: tokens/min on the prompt's estimate from its bytes, on the ticket
//     of step 2 (tenancy.Ticket.CheckTokens; with peers, tenancy.Tenancy.Admit
//     here, concurrency and requests/s too) (429 with Retry-After), then a tenant whose
//     money left is less than the request's least cost (one output token on the
//     cheapest model it may use: job.leastCost) is a 429 insufficient_quota. A
//     refused request's prompt is never rendered or tokenized.
//  6. decide.go, decide (job.decide): the one routing decision, a pure function
//     of the request, a snapshot and now, whose value is an ordered fallback chain
//     (each entry: the model and tier, its prompt tokens, worst case and reservation;
//     a named model or a fixed tier: a chain of one; else the best model of each tier
//     the mode steps down to, tiers.Select's choice with the tiers before excluded and
//     the models before counted as failing). It reads
//     the tenant's remaining money (the admitted ticket's: with Redis, the money
//     left at its last answer) and each candidate's exact worst case
//     (job.planFor: the prompt rendered and tokenized once per model with
//     Engine.ChatTokens, or Features.ChatTokensTools when tools or tool messages are
//     present, every text of the request as plain text, only the template's markup
//     as control tokens; with CappedTokenizer (the Block and the workers mode) the
//     tokenizer gives up once the prompt is over the model's limit less one output
//     token, from the prompt's length alone when the vocabulary allows: a prompt
//     over the limit is a 400 context_length_exceeded for about the limit's work;
//     the output limit checked; features.go, job.planFeatures:
//     the grammar of response_format or of a required/named tool call, and the
//     model's tool-call syntax; the budget's worst case is n choices), so a
//     request over every candidate's limit is a 400 naming the limit, money is a
//     429 insufficient_quota, load a 503. A request with tools is decided first
//     over the models whose template renders tools (NativeTools), then, only if
//     none may serve it, over all (the Hermes-style fallback prompt).
//  7. run.go, job.run walks the chain: entry k's reservation on the admitted ticket
//     (tenancy.Ticket.Reserve; refused for money a concurrent request took: entry
//     k+1). Then job.launch: the
//     engine's Generate (Features.GenerateN for n > 1; the plan's grammar and the
//     logprobs asked for in the engine.Request), or upstream.go, job.runUpstream
//     (OpenAI's codecs only: for another a model served upstream is refused like
//     one that cannot serve it; the body forwarded; a stream's events read as
//     JSON, job.streamUpstream: the
//     usage reported settles it and reaches the client only if asked for; a stream
//     cut short is charged what was relayed; a 502 never names the upstream's
//     address). A model that refuses before answering (queue full, no
//     memory, closed, restarting, upstream down) is released (Ticket.Release) and
//     entry k+1 runs, without deciding again; every entry refused, the chain's end
//     answers (why no tier is left), else the last refusal. An engine restarting
//     the model (engine.ErrRestarting: the workers mode's worker crashed or hung)
//     answers 503 engine_restarting with Retry-After, or an SSE error event with
//     that code mid-stream; the request settles at no cost.
//  8. The answer: the core makes the result and the request's output
//     (codec.newOutput, job.startOutput) renders it. run.go, job.respondEmbedded /
//     job.streamEmbedded (one plain choice): a whole (core.Output.AppendWhole), or
//     events (core.Output.AppendEvent, then AppendEnd; OpenAI's: chunks flushed per
//     token ending "data: [DONE]"; every event framed by internal/sse, Begin/End,
//     and written by an sse.Writer), a failure mid-stream an EventError; an output
//     that is a core.Pinger writes its own keep-alive event while the stream waits
//     (keepAlive); one that is a core.Finisher is told the whole or the error once the
//     request is settled. A client that goes away cancels
//     the generation, and so does one that stops reading: a write to a client that
//     makes no progress for Config.WriteTimeout (write_timeout, 30s) fails and closes
//     its connection (conn.go, deadlineConn), and the stream settles what it
//     produced. Requests with n > 1, logprobs, tools to parse or echo take
//     choices.go, job.respondChoices / job.streamChoices: every choice's stream read
//     at once; the core parses the output with engine/toolcall into tool calls
//     (core.ToolCall; streamed, EventCall fragments: id and name first, then argument
//     fragments; white space before a call held back; at most one call without
//     parallel_tool_calls) with finish "tool_calls" ("function_call" for the
//     functions API), the tokens' logprobs going with the next event of their
//     choice, the echoed prompt (completions), and usage counting the prompt once
//     and every choice's output; gateway/openai's chat.go renders them as message.tool_calls or
//     delta.tool_calls, chat logprobs (content[] with token, logprob, bytes,
//     top_logprobs) or completions' legacy logprobs, chunks naming their choice.
//     Then job.settle:
//     tenancy.Ticket.Settle replaces the reservation by the actual cost and the
//     response completes only after its ledger group is logged, so a server killed
//     with SIGKILL never loses usage it acknowledged. A request the model took is
//     held first (job.hold, tenancy.Ticket.Hold: its reservation logged in the
//     background as it runs), so one still running when the process is killed is
//     charged its reservation at the next start (tenancy.Tenancy.SettleInterrupted,
//     in New); batch lines are not held (they run again after a restart);
//     the rollups (package usage; the ledger's store keeps them durably, written
//     with the entries) count it from its ledger entry, the one feed of usage
//     (usage.go: tenancy.Store.FollowRollups, or usage.Redis with Redis). A refusal before
//     admission is ledgered by job.refuse (tenancy.Entry.NotAdmitted), coalesced
//     per tenant, key, model and reason into one entry per flush (Entry.Count,
//     tenancy.Store.RecordRefusal): the 429 waits for no commit, and a flood of them
//     is a few ledger entries, not one each.
//
// # The engine
//
// The gateway needs five methods of the embedded engine (the Engine interface, which
// the engine's Block satisfies); it knows nothing of tensors. Optional abilities are
// found by type assertion: Features (the Block has it) for structured outputs, tools,
// n > 1, logprobs and embeddings (without it such a request is a 400 naming the
// field); ModelLoader for the admin API's and the dashboard's load and unload (both
// through loadModel; cmd/lmlite adapts the Block's context-taking Load), and StatsSource for the engine's own metrics
// (lmlite_engine_*: model state, memory, replicas, queue depth; batch sizes, KV
// blocks and, for mixtures of experts, the tokens routed to each expert, as the
// runtime reports them in its engine.Stats), which the enginemetrics package
// presents beside the gateway's.
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
// # The Batch API
//
// batches.go serves /v1/files and /v1/batches (OpenAI's shapes) over package batch,
// when Options.Batches is set; every file and batch is its tenant's, and another
// tenant's id is a 404. Server.Check is batch's Checker: a line is parsed and routed
// as a request would be (a model or tier the plan forbids fails validation with its
// line number; so does a schema that cycles without writing, grammar.ErrCycle, strict
// or not, checkSchemas, also for a line another process will run) and priced at the largest worst case of the models its route may use,
// less the plan's batch_discount. Server.RunLine is batch's LineRunner: the line enters
// the core directly (core.go, runCore: its body in, a coreResult out, no HTTP request)
// in the codec of its endpoint (lineCodec: chat, completions, responses or messages;
// the answer in that API's shape) and goes
// through job.serve (steps 3 to 8 above, after authentication) at the engine's Batch
// priority, charged under the request id "<batch id>-<line>" with the discount. A
// refusal for money (429 insufficient_quota) pauses the job until the next UTC day;
// one for load (429 rate limit, 503) retries it later. After a restart, a line whose
// charge the ledger already holds runs again for its output but is charged nothing
// more (its ledger entry "<id>-rerun" costs 0): the ledger is read once at start-up
// (tenancy.Tenancy.LoadChargedLines) for the entries the lines' own tickets wrote
// (batch_line, with the tenant), never by request id: a client's X-Request-Id cannot
// pass for a line's charge.
// With shared state, a line's settlement answers whether another run of the line
// (reclaimed from a worker that stalled past its lease, so both ran at once) was
// settled before it, in the same script that decides the charge (tenancy's
// Ticket.Rerun); if so it is a "<id>-rerun" at 0 too, even when both settle in one
// round trip, so the ledgers' sum is the shared spend. A settlement queued while Redis
// is down cannot know yet: it is recorded at its cost, and lmlite ledger verify finds
// the difference if another run had charged the line.
// A batch line is admitted by tenancy.AdmitBatch: the tenant's budgets, not its
// interactive concurrency, requests/s or tokens/min. POST /v1/files reads its
// multipart body as a stream (uploadFile), the file part written to disk as it
// arrives (batch.Store.PutFileWith), so a file may be far over max_body_bytes.
// batchquota.go admits the Batch API's calls before their work: uploads and batch
// creates are rate limited per tenant (the plan's file_uploads_per_minute and
// batch_creates_per_minute: 429 with Retry-After; x/time/rate in this process, or
// GCRA in Redis across processes when the tenancy's state is shared), an
// upload is counted against files_max_bytes as its bytes arrive and files_max_count
// before it starts (400 file_quota_exceeded), a create past batch_max_unfinished is a
// 429 (counted across processes with shared state: batch.Options.Unfinished), and metadata (of a batch or a chat completion) is held to OpenAI's limits.
// Files carry expires_at (expires_after on upload; a batch's output_expires_after;
// 30 days by default): an expired file is a 404 at once, and the batch Manager's
// sweeper deletes it.
// Options.BatchQueue (batch.RedisQueue with redis:) runs lines on every process: the
// Server is its batch.Placer (LineModel, LineModels), so a line naming a model runs
// only on a process serving it, and one routed by tier on a process having the best
// tier it may use; Check prices a line for a model only other processes serve from
// their registry announcements (checkRemote).
// Metrics, at scrape time: lmlite_batch_jobs by status, and lmlite_batch_lines and
// lmlite_batch_spend_usd of each unfinished job.
//
// # Other endpoints
//
// POST /v1/embeddings (embeddings.go; the body, its input's shapes and the answer
// in gateway/openai's embeddings.go): the same auth, admission before the body
// is decoded (step 2), model permission, tokens/min on the inputs' estimate,
// budget reservation and ledger as a generation, billed as prompt tokens; input a
// string, strings, token ids or arrays of them; encoding_format float or base64;
// dimensions only the model's own size. A model embeds when the engine says so
// (ModelStatus.Embeddings; configs: embeddings: true).
//
// GET /v1/models (the models the tenant may use, each with an "lmlite" object:
// embeddings marks the models that embed, state gives an embedded model's state:
// ready, loading, unloaded when scaled to zero, failed; with a registry, the models
// of every live process too, and nodes names the processes serving each), GET /healthz, GET /readyz
// (200 when the server can accept work: the engine's first loads are done and it is
// not draining; a model scaled to zero, or coming back from zero, leaves it ready),
// GET /metrics (with a bearer token when Options.MetricsKey is set), and /admin/*
// guarded by the admin key (see handleAdmin). No probe and no listing wakes a model.
//
// usage.go: GET /v1/organization/usage/completions and /v1/organization/costs
// (OpenAI's shapes, answered from the rollups, scoped to the caller's tenant; the
// admin key may name tenant_ids) and GET /v1/lmlite/limits. dashboard.go: the
// dashboards at /dashboard (tenant and operator views; sessions, CSRF tokens,
// html/template pages from dashboard/, server-side SVG charts); GET / from a browser
// (Accept: text/html) redirects there, and is a JSON 404 for API clients.
//
// # The Responses API
//
// POST /v1/responses is a codec over the same core (responses.go): its body is
// decoded strictly into a chat request (instructions a first system message, the
// input items, decoded by package gateway/openai (ParseInput, Messages), messages, function_call items the assistant's tool calls,
// function_call_output items tool messages; tools, tool_choice and text.format put
// in chat's shape and checked by chatFeatures, so a field at fault is named
// as the Responses API names it, respNames). previous_response_id reads the
// tenant's stored conversation (another tenant's id is a 404, as an unknown one):
// each response of its chain, oldest first, its input then its output items, before
// the new input; instructions are not carried over, as OpenAI's are not.
// gateway/openai's ResponseOutput (responses_out.go) renders the core's events as
// OpenAI's event sequence (each item opened, its deltas, closed; the items
// themselves by items_out.go) or the whole Response object, and has the response
// stored (store: true; responses_output.go, responsesCodec.save) before the bytes
// that end the answer are written, so a client holding an answer can always
// continue it. The plan's limits on stored
// responses (responses_max_count, responses_max_bytes) are kept twice (respquota.go):
// a request with store: true whose tenant is already at one is a 400
// response_quota_exceeded at admission (serve calls the codec's admitStore after
// decode, before any generation work; charged nothing), and the Put at the end is
// atomic within them, so requests admitted together never pass them: a response
// refused there (or one whose own size passes the bytes) is answered, not stored,
// with "store": false. The stored responses sit behind a consumer-side interface
// (responseStore: Put within limits, Full, Get, Delete, InputItems and
// Conversation by tenant and id): package respstore's bbolt or Redis store
// (Options.Responses; responses_respstore.go adapts it), or without one this
// process's memory; responses_store.go serves GET and DELETE /v1/responses/{id} and
// /v1/responses/{id}/input_items from it, and responses_tokens.go
// /v1/responses/input_tokens (the request routed and its prompt rendered and
// tokenized as POST /v1/responses would, nothing generated). reasoning is accepted
// and does nothing: no model served here has a reasoning mode.
//
// # Anthropic's Messages API
//
// POST /v1/messages is Anthropic's Messages API as a codec over the same core
// (codec.go; messages.go fills the core request from package anthropic's decoded
// Request; package anthropic holds the request's decoding, the Message, its event
// stream, the error shape and the Output that renders them, output.go;
// messages_out.go picks it): the key comes as
// x-api-key or "Authorization: Bearer"; anthropic-version and anthropic-beta are
// accepted and change nothing. The body is decoded strictly (an unknown member is a
// 400 naming it) into the chat request: system (a string or text blocks) first,
// then each message; a user message's text blocks are one user message and each
// tool_result (content a string or text blocks; is_error prefixes "Error: ") a
// message with role "tool"; an assistant's text blocks are its content, its
// tool_use blocks its tool calls, earlier thinking blocks are dropped. Blocks of one
// message join with a blank line. tools (input_schema; strict), tool_choice (auto;
// any is required; tool is a named function; none; disable_parallel_tool_use) and
// output_config.format (a JSON schema) are the chat request's tools, tool_choice,
// parallel_tool_calls and response_format, checked by the chat decoder, its errors
// named in this API's fields (tools[i].input_schema). max_tokens is required;
// stop_sequences, temperature (0–1), top_p, top_k and metadata.user_id (the ledger's
// user hash) as in chat; lmlite.seed is the seed (the API has none) and the lmlite
// routing fields are read. cache_control is accepted and ignored (the prefix cache
// is automatic); thinking, service_tier and output_config.effort are accepted and do
// nothing: no model here has a thinking mode. What the server cannot serve is a 400
// naming it: image, document and search-result blocks (messages[i].content[k]),
// server tools (tools[i].type), a final assistant message (a prefill).
// Of the betas Claude Code sends (package anthropic's doc names them): messages
// with role "system" are system messages in their place, a tool with defer_loading
// is left out of the prompt, context_management's clear_thinking is accepted; other
// context edits are a 400 naming them.
//
// The answer is a Message (id "msg_…", content of a text block and tool_use blocks
// with ids "toolu_…" and input as a JSON object; stop_reason end_turn, max_tokens,
// stop_sequence with the stop string that ended it, or tool_use) or, streamed, its
// events: message_start, content_block_start/_delta (text_delta,
// input_json_delta)/_stop per block, message_delta (stop_reason, usage),
// message_stop, and ping while the stream waits; an error after the stream began is
// an error event, and the stream ends there. usage is Anthropic's: input_tokens are
// the prompt's tokens not read from the prefix cache, cache_read_input_tokens those
// read from it, cache_creation_input_tokens 0. Errors are Anthropic's
// {"type":"error","error":{"type","message"}}: invalid_request_error (400; a prompt
// over the model's limit says "prompt is too long"), authentication_error (401),
// permission_error (403), not_found_error (404), request_too_large (413),
// rate_limit_error (429), api_error (500, 503) and overloaded_error with status 529
// for an overloaded engine or server.
//
// POST /v1/messages/count_tokens (messages_count.go) answers {"input_tokens": N}:
// the prompt planned on the model the same request would run on (its template with
// the tools, its tokenizer), N = input_tokens + cache_read_input_tokens of that
// request. It is admitted as a generation is and charges nothing (a ledger entry
// with no tokens and no cost).
//
// # Scale to zero
//
// A model unloads after its config's idle_timeout. A request's "lmlite":
// {"keep_alive": "30s"} (a Go duration) asks for another stay once it ends, and no
// tenant can unload what another uses (keepalive.go): a longer one is granted up to
// max_keep_alive (0, the default: none longer); a shorter one only to a plan with
// allow_short_keep_alive (else it is ignored), not below min_keep_alive (30s), and
// never below what other tenants' uses still keep the model (each use keeps it for
// its own request's stay, counted from its end), so a shorter stay affects only its
// tenant's own use. The engine is given the result (engine.Request.KeepAlive; the
// last request to end sets it): a request without keep_alive gives the model the
// longest of its idle timeout and other tenants' stays.
//
// Shutdown drains: it answers 503 to new requests, closes the listener, closes the
// idle keep-alive connections and those a client opened and never sent a byte on
// (after a 250 ms grace: Server.closeFresh), and waits for in-flight requests,
// streams included, to finish and settle.
package gateway
