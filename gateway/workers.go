package gateway

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine/workerapi"
)

// WorkerSource is an engine that runs its models in worker processes (worker.Pool,
// the workers mode): /admin/workers lists them. An engine without it (in-process,
// upstream only) lists none.
type WorkerSource interface {
	Workers() []workerapi.Status
}

// workerJSON is one row of /admin/workers.
type workerJSON struct {
	Object      string   `json:"object"` // "worker"
	Group       string   `json:"group"`
	Models      []string `json:"models"`
	State       string   `json:"state"`
	PID         int      `json:"pid"`             // 0: no process
	StartedAt   int64    `json:"started_at"`      // Unix seconds; 0: no process
	UptimeS     float64  `json:"uptime_s"`        // seconds since started_at
	Starts      uint64   `json:"starts"`          // processes spawned
	Restarts    uint64   `json:"restarts"`        // spawns after the first
	Crashes     uint64   `json:"crashes"`         // crashes and hangs
	LastExit    string   `json:"last_exit"`       // how the last process ended
	ColdStartMs float64  `json:"cold_start_ms"`   // the last start, spawn to ready to serve
	Error       string   `json:"error,omitempty"` // failed: why
	Stderr      []string `json:"stderr_tail"`     // the last stderr lines
}

// adminWorkers answers GET /admin/workers: OpenAI's list shape, one object "worker"
// per worker group with its process (pid, uptime), state, restarts and crashes, and
// the last lines of its stderr (a crashing worker's reason).
func (s *Server) adminWorkers(ctx *fasthttp.RequestCtx) {
	rows := []workerJSON{}
	if src, ok := s.eng.(WorkerSource); ok && s.eng != nil {
		for _, w := range src.Workers() {
			r := workerJSON{Object: "worker", Group: w.Group, Models: w.Models, State: w.State, PID: w.PID,
				UptimeS: w.Uptime.Seconds(), Starts: w.Starts, Restarts: w.Restarts, Crashes: w.Crashes, LastExit: w.LastExit,
				ColdStartMs: float64(w.ColdStart) / float64(time.Millisecond), Error: w.Error, Stderr: w.Stderr}
			if !w.Started.IsZero() {
				r.StartedAt = w.Started.Unix()
			}
			if r.Models == nil {
				r.Models = []string{}
			}
			if r.Stderr == nil {
				r.Stderr = []string{}
			}
			rows = append(rows, r)
		}
	}
	writeJSON(ctx, 200, map[string]any{"object": "list", "data": rows})
}
