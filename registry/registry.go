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
	// Warm holds the prefix keys (a hash of the tenant's cache salt and the head of
	// the prompt, as the gateway computes it) of the prompts the node served lately
	// on this model: its prefix cache is likely warm for a prompt with one of them.
	Warm []uint64 `json:"warm,omitempty"`
	// For another process validating a batch line that names the model (it prices the
	// line's worst case for the batch's cap): the price in nano-USD per 1,000 prompt
	// and completion tokens, the length limit (prompt + output tokens; 0: not known
	// yet), and whether this process runs batch lines (the lines of a model go only
	// to processes serving it, batch.RedisQueue).
	PromptPer1K     int64 `json:"prompt_per_1k,omitempty"`
	CompletionPer1K int64 `json:"completion_per_1k,omitempty"`
	MaxLen          int   `json:"max_len,omitempty"`
	Batch           bool  `json:"batch,omitempty"`
	// Adapters are the ids of the LoRA adapters the node serves over the model (a
	// request naming one runs on the model with it applied there): a request for
	// an adapter goes only to a node announcing it (Query.Adapter).
	Adapters []string `json:"adapters,omitempty"`
	// Owners names the tenant of each private adapter in Adapters (absent: shared,
	// every tenant may use it). A node forwards a request for an adapter only when
	// the request's tenant may see it (AdapterBase): another tenant's private adapter
	// is answered 404 where the request came in, with no hop whose time would tell
	// that it exists elsewhere.
	Owners map[string]string `json:"owners,omitempty"`
}

// Node is one process's announcement.
type Node struct {
	ID       string    `json:"id"`
	Addr     string    `json:"addr"` // base URL other processes forward to, e.g. http://10.0.0.2:8080
	Models   []Model   `json:"models"`
	InFlight int64     `json:"in_flight"`
	Expires  time.Time `json:"expires"` // the announcer's clock; the store also expires it by its own
	// Draining: the process is finishing its requests before it stops (Keeper.Drain).
	// It takes no new ones, but it is alive: requests forwarded to it run to the end.
	Draining bool `json:"draining,omitempty"`
}

// AdapterBase is the model some live node serves adapter id over (the first such
// node's, in the order of nodes) when tenant may see it there (shared, or the
// tenant's own: Model.Owners), ok false when no node announces it so.
func AdapterBase(now time.Time, nodes []Node, id, tenant string) (model string, ok bool) {
	for i := range nodes {
		if !Live(&nodes[i], now) {
			continue
		}
		for _, m := range nodes[i].Models {
			if slices.Contains(m.Adapters, id) && m.visible(id, tenant) {
				return m.ID, true
			}
		}
	}
	return "", false
}

// visible reports whether tenant may see adapter id on the model: shared, or its own.
func (m *Model) visible(id, tenant string) bool {
	owner, private := m.Owners[id]
	return !private || owner == tenant
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

// Serving reports whether n takes new requests at now: live and not draining.
func Serving(n *Node, now time.Time) bool { return Live(n, now) && !n.Draining }

// serves reports whether the model's announcement lists adapter id ("" always is).
func (m *Model) serves(adapter string) bool {
	return adapter == "" || slices.Contains(m.Adapters, adapter)
}

// WarmFor reports whether the model's announcement lists prefix key k (0 never is).
func (m *Model) WarmFor(k uint64) bool { return k != 0 && slices.Contains(m.Warm, k) }

// WarmSlack is how many more requests in flight a warm node may have than the least
// loaded one (or than this process, when it serves the model cold) and still be
// preferred: a prefill saved is worth a short wait, a long queue is not.
const WarmSlack = 4

// Where is Pick's answer.
type Where int

const (
	Local   Where = iota // serve here
	Forward              // forward to Choice.Node
	Nowhere              // no live process serves the model: the caller answers 404
)

// Choice is where a request goes.
type Choice struct {
	Where Where
	Node  Node   // when Where is Forward
	Model string // when Where is Forward: the model there (PickTier's choice)
	Warm  bool   // when Where is Forward: Node is warm for the request's prefix
}

// Query is a request for a model by name, as Pick needs it.
type Query struct {
	Model string
	// Adapter is the LoRA adapter the request names over Model ("": none): only
	// nodes announcing it on Model (registry.Model.Adapters) are chosen, and Local
	// is the model's state here only when this process serves the adapter too.
	Adapter string
	Local   string // the model's state here ("" when this process does not serve it)
	// Prefix is the request's prefix key (0: none: the prompt is too short to matter);
	// LocalWarm says this process served a prompt with the same key lately, and
	// LocalInFlight is this process's requests in flight.
	Prefix        uint64
	LocalWarm     bool
	LocalInFlight int64
	Skip          []string // nodes not to choose (ones that just failed to answer)
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

// Pick decides where a request for a model by name goes. self is this process's
// node id. The rules:
//
//   - the model is ready here: Local, unless this process is cold for the request's
//     prefix and a node where the model is ready is warm for it, with at most
//     WarmSlack more requests in flight than here: Forward there;
//   - it is loading here: Local;
//   - it is unloaded here (scaled to zero, or its load refused for want of memory that
//     another process's lease holds): Forward to a live node where it is ready, else
//     Local (this process loads it);
//   - it failed here: Forward to a live node where it is ready, loading or unloaded,
//     else Local (which answers the failure);
//   - this process does not serve it: Forward to the best live node (ready, then
//     loading, then unloaded), else Nowhere.
//
// Draining nodes, skipped nodes and nodes without an address are never chosen. Among
// nodes of the best state, one warm for the prefix wins when it has at most WarmSlack
// more requests in flight than the least loaded; then the fewest requests in flight,
// then the smallest id.
func Pick(now time.Time, self string, q Query, nodes []Node) Choice {
	worst := 2 // the worst remote state acceptable
	switch q.Local {
	case StateReady:
		if q.Prefix != 0 && !q.LocalWarm {
			w := pickNode(now, self, q.Skip, nodes, q.Prefix, func(n *Node) (string, bool) {
				m, ok := n.Model(q.Model)
				return m.ID, ok && m.State == StateReady && m.WarmFor(q.Prefix) && m.serves(q.Adapter)
			}, 0)
			if w.Where == Forward && w.Node.InFlight <= q.LocalInFlight+WarmSlack {
				return w
			}
		}
		return Choice{Where: Local}
	case StateLoading:
		return Choice{Where: Local}
	case StateUnloaded:
		worst = 0
	}
	c := pickNode(now, self, q.Skip, nodes, q.Prefix, func(n *Node) (string, bool) {
		m, ok := n.Model(q.Model)
		if !ok || !m.serves(q.Adapter) {
			return "", false
		}
		r := rank(m.State)
		return m.ID, r >= 0 && r <= worst
	}, worst)
	switch {
	case c.Where == Forward:
		return c
	case q.Local != "":
		return Choice{Where: Local}
	}
	return Choice{Where: Nowhere}
}

// TierQuery is a request for a tier (model "auto", "tier:…" or the tier fields), as
// PickTier needs it.
type TierQuery struct {
	Tiers []string // the tiers the request may be served by, best first
	Local []bool   // Local[i]: this process has a model of Tiers[i] the request may use
	// Allow reports whether the tenant's plan allows a model (nil: every model).
	Allow  func(model string) bool
	Prefix uint64   // as in Query
	Skip   []string // as in Query
}

// PickTier decides where a request for a tier goes: down the tiers, best first, the
// first one this process has serves here (Local; this process's tier router then
// chooses, and may step down further); the first one only other live nodes have
// (ready, loading or unloaded, a model the plan allows) goes to the best of them, as
// Pick ranks nodes (Forward, with the model there; that node's router chooses
// again among its own models). No tier anywhere: Nowhere (the caller's router answers).
func PickTier(now time.Time, self string, q TierQuery, nodes []Node) Choice {
	for i, t := range q.Tiers {
		if i < len(q.Local) && q.Local[i] {
			return Choice{Where: Local}
		}
		c := pickNode(now, self, q.Skip, nodes, q.Prefix, func(n *Node) (string, bool) {
			best, bestRank := "", -1
			for _, m := range n.Models {
				r := rank(m.State)
				if r < 0 || !slices.Contains(m.Tiers, t) || q.Allow != nil && !q.Allow(m.ID) {
					continue
				}
				if bestRank < 0 || r < bestRank || r == bestRank && q.Prefix != 0 && m.WarmFor(q.Prefix) {
					best, bestRank = m.ID, r
				}
			}
			return best, bestRank >= 0
		}, 2)
		if c.Where == Forward {
			return c
		}
	}
	return Choice{Where: Nowhere}
}

// pickNode returns Forward to the best node serving what match accepts, or Nowhere.
// match returns the model chosen on a node; its state ranks the node. prefix (0:
// none) prefers a warm node of the best rank within WarmSlack.
func pickNode(now time.Time, self string, skip []string, nodes []Node, prefix uint64, match func(*Node) (string, bool), worst int) Choice {
	type cand struct {
		n     *Node
		model string
		rank  int
		warm  bool
	}
	var best, warm *cand
	for i := range nodes {
		n := &nodes[i]
		if n.ID == self || n.Addr == "" || !Serving(n, now) || slices.Contains(skip, n.ID) {
			continue
		}
		id, ok := match(n)
		if !ok {
			continue
		}
		m, _ := n.Model(id)
		r := rank(m.State)
		if r < 0 || r > worst {
			continue
		}
		c := &cand{n: n, model: id, rank: r, warm: m.State == StateReady && m.WarmFor(prefix)}
		if best == nil || r < best.rank || r == best.rank && better(n, best.n) {
			best = c
		}
		if c.warm && (warm == nil || better(n, warm.n)) {
			warm = c
		}
	}
	if best == nil {
		return Choice{Where: Nowhere}
	}
	// A warm node is ready (rank 0), so never worse in state than best.
	if warm != nil && warm.n.InFlight <= best.n.InFlight+WarmSlack {
		best = warm
	}
	return Choice{Where: Forward, Node: *best.n, Model: best.model, Warm: best.warm}
}

func better(a, b *Node) bool {
	if c := cmp.Compare(a.InFlight, b.InFlight); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}
