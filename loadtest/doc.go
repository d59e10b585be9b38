// Package loadtest drives an OpenAI-compatible server with a scenario and reports
// latency percentiles, throughput, goodput, errors and fairness between tenants.
//
// It is what `lmlite loadtest` runs before a release. Nothing in it knows lmlite's
// internals: it speaks the OpenAI HTTP API (POST /v1/chat/completions and
// /v1/completions, streamed as SSE), so one scenario compares lmlite with
// llama.cpp's server or vLLM side by side. lmlite's extras are optional: the tier
// options it sends (the body's "lmlite" object or X-LMLite-* headers) and the
// X-LMLite-Tier / X-LMLite-Model response headers it counts.
//
// # How the pieces fit
//
// A Scenario (scenario.go; YAML documented in scenarios/README.md) names tenants
// with keys and weights, an arrival process, a workload and its bounds.
// ParseScenario validates it once and fills the defaults; every run is bounded in
// time and in count, within hard limits (MaxDuration, MaxRequests).
//
// Run (runner.go) owns the run. Per tenant, a generator (workload.go) builds
// requests (prompt lengths from distributions, shared system prompts, growing
// multi-turn chats, tier options), and either a schedule (open loop: constant,
// Poisson, bursts; a pure function of a seeded random source) or closed-loop users
// decide when to send them. Open loops keep their schedule whatever the server
// does; an arrival that finds the concurrency cap full is dropped and counted,
// never delayed. Each request goes through do (client.go), which reads the SSE
// stream line by line as it arrives and stamps every content chunk with
// time.Since of the send, a monotonic reading: time to first token, every
// inter-token gap and end-to-end latency come from these stamps. A request lost
// because the server closed a reused keep-alive connection just before it arrived
// (servers with an idle timeout, such as llama.cpp's, do) is sent once more on a
// new connection instead of being charged as a transport error, since Go's
// transport does not retry a POST; only the case where no byte of answer arrived
// on a reused connection is retried, and Metrics.Retried counts them. At the bound Run
// stops issuing, gives the requests in flight the scenario's drain period, then
// cancels them.
//
// One goroutine feeds every Result to a Collector (stats.go), which leaves out
// warm-up requests and keeps HDR histograms (github.com/HdrHistogram/hdrhistogram-go)
// per tenant and overall, counts, goodput against per-request latency limits, and a
// compact record per request for the timeline. Its Report is the JSON report
// (report.go) and, through WriteHTML (html.go), a self-contained HTML page whose
// SVG charts are drawn in Go: it loads nothing and opens offline.
//
// Fairness is Jain's index over tenants of served ÷ fair share, where the fair
// shares split everything served by weighted max-min fairness (MaxMinFair) of what
// each tenant asked for; requests refused by a tenant's own quota or budget are not
// part of its claim.
//
// # Example
//
//	s, err := loadtest.LoadScenario("loadtest/scenarios/steady-chat.yaml")
//	if err != nil { ... }
//	rep, err := loadtest.Run(ctx, loadtest.Config{Scenario: s, Target: "http://127.0.0.1:8080"})
//	if err != nil { ... }
//	slos, _ := loadtest.ParseSLOs("ttft_p99=500ms,error_rate=1%")
//	ok := rep.CheckSLOs(slos)
//	err = rep.WriteFiles("out") // out/report.json, out/report.html
//
// # Safety
//
// Run refuses a target whose host is not loopback (127.0.0.0/8, ::1, localhost)
// unless Config.AllowRemote is set, never follows redirects, and ignores proxy
// settings, so traffic cannot leave the machine by accident.
package loadtest
