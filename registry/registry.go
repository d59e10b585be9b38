// Package registry says which lmlite process serves which model, so that several
// processes sharing one Redis route each request to a process holding its model.
//
// Each process announces itself (a Node: its id, the address other processes reach it
// at, its models with their state and tiers, its requests in flight) with a TTL and
// renews the announcement every TTL/3 (Keeper); a process that dies stops renewing
// and disappears within the TTL. Pick is the one routing decision, a pure function of
// the live nodes, this process's own state of the model and an explicit now.
//
// Two Stores: Memory (in-process, for one process and for tests) and Redis (redis.go).
package registry

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// Model states, as the engine names them (engine.ModelState); an upstream model is
// announced ready.
const (
	StateReady    = "ready"
	StateLoading  = "loading"
	StateUnloaded = "unloaded"
	StateFailed   = "failed"
)

// Model is one model a node serves.
type Model struct {
	ID    string   `json:"id"`
	State string   `json:"state"`           // ready, loading, unloaded (scaled to zero) or failed
	Tiers []string `json:"tiers,omitempty"` // the tiers listing it on that node
	Embed bool     `json:"embeddings,omitempty"`
}

// Node is one process's announcement.
type Node struct {
	ID       string    `json:"id"`
	Addr     string    `json:"addr"` // base URL other processes forward to, e.g. http://10.0.0.2:8080
	Models   []Model   `json:"models"`
	InFlight int64     `json:"in_flight"`
	Expires  time.Time `json:"expires"` // the announcer's clock; the store also expires it by its own
}

// Model returns the node's entry for model id.
func (n *Node) Model(id string) (Model, bool) {
	for _, m := range n.Models {
		if m.ID == id {
			return m, true
		}
	}
	return Model{}, false
}

// Store keeps the nodes' announcements.
type Store interface {
	// Announce records n (replacing its earlier announcement) until n.Expires; the
	// store forgets it at the latest ttl after the call by its own clock.
	Announce(ctx context.Context, n Node, ttl time.Duration) error
	// Withdraw forgets node id at once (a clean shutdown).
	Withdraw(ctx context.Context, id string) error
	// Nodes returns the announcements the store still holds, sorted by id. Callers
	// judge liveness with Live (the store may still hold an expired one for a moment).
	Nodes(ctx context.Context) ([]Node, error)
}

// Live reports whether n's announcement is still valid at now.
func Live(n *Node, now time.Time) bool { return n.Expires.After(now) }

// Where is Pick's answer.
type Where int

const (
	Local   Where = iota // serve here
	Forward              // forward to Choice.Node
	Nowhere              // no live process serves the model: the caller answers 404
)

// Choice is where a request for a model goes.
type Choice struct {
	Where Where
	Node  Node // when Where is Forward
}

// rank orders a remote model's states: lower is better; -1 never serves.
func rank(state string) int {
	switch state {
	case StateReady:
		return 0
	case StateLoading:
		return 1
	case StateUnloaded:
		return 2
	}
	return -1
}

// Pick decides where a request for model goes. self is this process's node id and
// local the model's state here ("" when this process does not serve it). skip lists
// nodes not to choose (one that just failed to answer). The rules:
//
//   - the model is ready or loading here: Local;
//   - it is unloaded here (scaled to zero, or its load refused for want of memory that
//     another process's lease holds): Forward to a live node where it is ready, else
//     Local (this process loads it);
//   - it failed here: Forward to a live node where it is ready, loading or unloaded,
//     else Local (which answers the failure);
//   - this process does not serve it: Forward to the best live node (ready, then
//     loading, then unloaded), else Nowhere.
//
// Among equals the node with the fewest requests in flight wins, then the smallest id.
func Pick(now time.Time, self, model, local string, nodes []Node, skip ...string) Choice {
	worst := 2 // the worst remote state acceptable
	switch local {
	case StateReady, StateLoading:
		return Choice{Where: Local}
	case StateUnloaded:
		worst = 0
	}
	best, bestRank := -1, 0
	for i := range nodes {
		n := &nodes[i]
		if n.ID == self || n.Addr == "" || !Live(n, now) || slices.Contains(skip, n.ID) {
			continue
		}
		m, ok := n.Model(model)
		if !ok {
			continue
		}
		r := rank(m.State)
		if r < 0 || r > worst {
			continue
		}
		if best < 0 || r < bestRank || r == bestRank && better(n, &nodes[best]) {
			best, bestRank = i, r
		}
	}
	switch {
	case best >= 0:
		return Choice{Where: Forward, Node: nodes[best]}
	case local != "":
		return Choice{Where: Local}
	}
	return Choice{Where: Nowhere}
}

func better(a, b *Node) bool {
	if c := cmp.Compare(a.InFlight, b.InFlight); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}
