// Package worker is the engine's workers mode (DJL LMI's Python-engine mode): each
// model, or each group of models (worker_group in the config), runs in a child
// `lmlite worker` process that serves it from an engine.Block, behind a Pool in the
// parent that offers the same Block API (Generate, Tokenize, ChatTokens, Models,
// Ready, Load, Unload, LoadAdapter, UnloadAdapter, Adapters, GC, Close, Stats) and the gateway's Features
// (CompileSchema, ChatTokensTools, ToolSyntax, ToolGrammar, GenerateN, Embed). The
// gateway cannot tell the Pool from the in-process Block; `lmlite serve` picks one by
// `engine: {mode: ...}`.
//
// A crash takes down one group's in-flight requests and nothing else; the parent
// keeps tokenizing (it reads each model's tokenizer and template itself, through
// engine.Prep) and the other groups keep serving. The parent also renders prompts
// with tools, compiles JSON schemas and tool-call grammars (cached by their text, as
// the Block caches them); a grammar crosses to the worker in its compiled form.
//
// The package does not import the engine (internal/importgraph checks): the
// protocol's types and errors are engine/api's, which the engine aliases
// (engine.Request is api.Request, engine.ErrRestarting is api.ErrRestarting), and
// the program passes in what needs the engine itself: engine.New to Main (NewBlock,
// the child's Block) and engine.OpenPrep in Config.OpenPrep (the parent's Prep).
//
// # Protocol
//
// Parent and worker talk over one Unix stream socket: a socketpair whose worker end
// is the child's file descriptor 3 (no path, so nothing to clean up and no name to
// guess). Both directions carry frames:
//
//	uint32 length of the payload (big-endian) | uint8 type | uint64 request id | payload
//
// Parent to worker: submit (id, JSON {model, req: engine.Request}, its grammar in
// the compiled form of grammar.Grammar's MarshalJSON), devices (id, no payload:
// the worker's Block.Devices, answered by a device-list frame, JSON
// []engine.DeviceStatus, or a reply with the error), submit-n (id, JSON {model,
// req, n}: n choices, which the worker's Block.GenerateN runs, so choice i has seed
// engine.ChoiceSeed(seed, i) and the later choices share choice 0's prompt through
// the prefix cache; choice i streams under id+i: accepted, tokens and end each, or
// one end under id if the request is refused), embed (id, JSON {model, req:
// engine.EmbedRequest}), cancel (id, no payload; for a submit-n it cancels every
// choice, which share one context as in process; for an embed it ends the embed),
// load and unload (id, JSON {model}), load-adapter and unload-adapter (id, JSON
// {model, adapter}: the Block's LoadAdapter and UnloadAdapter, answered by a reply),
// adapters (id, no payload: the Block's Adapters, answered by an adapter-list frame,
// JSON []engine.AdapterStatus). Worker to parent: hello (id 0, JSON
// {pid}, once, when its Block exists), accepted (id: the request is queued), token
// (id; binary: int32 token id, uint32 bits of the logit, the UTF-8 text; or, for a
// request with logprobs, a token-json frame with the whole engine.Token), end (id;
// JSON {usage, code, msg}: the last frame of a request; code names the engine's
// sentinel error, so errors.Is works across the socket), reply (id; JSON {code, msg}:
// the answer to a load or unload, or an embed's error), embeddings (id; binary: the
// answer to an embed: uint32 prompt tokens, uint32 vectors, each a uint32 length and
// its float32s' bits, so the vectors are the in-process bits), and beat (id 0) every
// Beat (200 ms): JSON []engine.ModelStatus when the status changed since the last
// beat, else empty (an idle worker's beats cost its parent no decoding). Tokens and embeddings are binary because
// they are most of the traffic; everything else is JSON because it is rare and easy
// to read in a dump. Every frame is written at once, in a group commit: a frame
// added while another write is in progress goes out with the next write. The worker
// relays its tokens without a goroutine per request: each request's Stream forwards
// them (engine.Stream.Forward) from the decode loop straight onto the socket's queue,
// which the writer's own goroutine writes, so one decode step's tokens cross in one
// write after one wake-up. Many requests are multiplexed on
// the socket by their ids; the parent's reader appends each token to its request's
// Stream, which never blocks, so a slow client never stalls the reader.
//
// # Supervision
//
// The heartbeat is the worker's Models(): a Block whose locks are stuck stops beating
// too. The Pool's janitor applies timing.next, a pure function of the group's state
// and times (TestTimingNext) that also says when it is next due (the next possible
// hang, idle timeout or backoff's end); the janitor sleeps until then or until a
// state change or a request's end wakes it, so an idle parent is not woken on a tick
// (TestIdlePoolJanitorSleepsUntilDeadlines):
//   - a worker without a heartbeat for HangAfter (700 ms, 3.5 beats) is late: its
//     models are not ready at once and new requests wait (those in flight go on); a
//     beat makes it ready again. Without one for KillAfter (5 s, 25 beats) it is hung
//     and killed with SIGKILL (which also ends a stopped process). The gap keeps a
//     healthy worker that a busy machine starved for a moment (or a parent too
//     starved to read its beats) from being killed with its requests and caches
//     (TestLateWorkerThatBeatsAgainIsNotKilled);
//   - a worker whose socket ends, or that exits, without the parent asking is crashed:
//     its models are not ready at once and its in-flight requests end with an error
//     matching engine.ErrRestarting (the gateway answers 503 engine_restarting with
//     Retry-After, or an SSE error event mid-stream);
//   - Policy.OnCrash (a pure function of the crash times and now) decides the restart:
//     after an exponential backoff (100 ms, doubling, at most 10 s), or, after
//     MaxCrashes (5) crashes within Window (2 min), never: the circuit is open, the
//     group's models are failed and their ModelStatus.Err holds the worker's last
//     stderr lines (the admin API shows it); their requests fail with a *FailedError.
//     GC or an admin load closes the circuit.
//   - Pool.Workers reports each group's process (pid, state, uptime, starts, crashes,
//     last exit, last start's time, stderr lines): the admin API's /admin/workers.
//   - New requests during a restart's backoff fail at once with ErrRestarting; new
//     requests while a worker starts wait for it.
//
// No orphans: the worker has PDEATHSIG=SIGKILL (Linux), and it exits when its socket
// closes, which the kernel does when the parent dies however it dies. (Linux ties
// PDEATHSIG to the thread that started the child; Go ends a thread only when a
// goroutine locked to it exits, which lmlite never does, and the socket covers it.) Each worker's
// pid and the parent's run id are in DataDir/workers/GROUP.pid; New (and GC) kills
// the live workers of other runs found there, after checking that the process's
// command line still carries that run id, so a reused pid is never killed.
//
// Scale to zero is per process: once each model of a group has been idle (no
// request in flight, none loading) for its idle_timeout, or for the keep_alive of
// its last request (Request.KeepAlive, which as in process replaces the timeout; the
// gateway bounds it), the group's worker is stopped (the parent closes
// the socket; the worker exits), so all its memory returns to the OS; the models
// report unloaded (which is ready, as in process). A model that never times out keeps
// its group's worker. The next request starts the worker and waits for it; the wait
// is in the request's Usage.ColdStart.
//
// Weights are memory-mapped read-only by each worker's Block, so the page cache holds
// one copy of a file however many workers map it.
//
// # Limits
//
// Without Config.Redis each worker's Block leases memory in its own process against
// MemoryBudget: the budget is per worker, not shared between them. With it (lmlite
// serve's redis: block) every worker leases in Redis (lease.Redis) as node
// NODE/GROUP, the URL in its environment (LMLITE_WORKER_REDIS_URL, since it may hold a
// password) rather than on its command line: the workers of every process share the
// devices' budgets, a killed worker's leases expire after their TTL, and a stopping
// worker gives them back at once. Pool.Devices reports the devices as Block.Devices
// does, merging the running workers' leases. ModelStatus counters (steps, loads)
// restart from zero with each worker.
package worker
