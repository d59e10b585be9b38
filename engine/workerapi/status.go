// Package workerapi holds the types of the engine's workers mode that its users
// share without importing the worker command (engine/worker, which runs a Block in
// each child): a worker process's Status, which the Pool reports, the engine's Stats
// carry, and the gateway's admin API and enginemetrics present.
package workerapi

import "time"

// Status is one worker process of the workers mode (engine/worker's Pool runs each
// model, or each worker_group of models, in a child process).
type Status struct {
	Group  string   // the worker group (a model's id when it has none)
	Models []string // the group's models
	// State is the group's: stopped (no process: not started yet, idle, or closed),
	// starting, running, late (running without a heartbeat for HangAfter: not
	// ready until it beats again), stopping (idle, asked to exit), down (crashed or
	// hung, not reaped yet), backoff (waiting to restart), failed (the circuit is open).
	State     string
	PID       int           // 0 when no process
	Started   time.Time     // when the current process was spawned; zero when none
	Uptime    time.Duration // since Started; 0 when no process
	Starts    uint64        // processes spawned
	Restarts  uint64        // spawns after the first one (crash restarts and starts after an idle stop)
	Crashes   uint64        // crashes and hangs
	LastExit  string        // how the last process ended, if one did
	ColdStart time.Duration // the last start: spawn to the worker's hello
	Error     string        // when failed: why, with the last stderr lines
	Stderr    []string      // the last lines the group's processes wrote on stderr
}
