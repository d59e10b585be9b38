package engine

import "github.com/lmlite/lmlite/engine/workerapi"

// Stats is a snapshot of an engine's counters and gauges: plain values, cheap to
// take (a lock and a few atomic loads per model), read when an edge presents them.
// The engine knows no presentation: the enginemetrics package turns a Stats into
// Prometheus series (the gateway registers it for an engine with a Stats method),
// and the gateway's admin API writes its own JSON (tailscale's clientmetric is the
// model: counters in the core, presentation at the edge).
type Stats struct {
	Models []ModelStatus
	// Workers are the worker processes of the workers mode (engine/worker's Pool);
	// nil in process.
	Workers []workerapi.Status
}

// Stats returns the Block's snapshot: its models (Models).
func (b *Block) Stats() Stats { return Stats{Models: b.Models()} }
