package gateway

import (
	"bufio"
	"bytes"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/gateway/forward"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/internal/sse"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/registry"
	"github.com/lmlite/lmlite/tiers"
)

// This file is the server's part in a registry of processes (Options.Peers): what it
// announces, whether a request goes to another process, and the keep-alives of a
// stream another process forwarded here. The forwarding itself (connections,
// bounds, the relay) is package forward.

// Peers is the registry of the processes sharing a Redis, as this server needs it: the
// last snapshot of their announcements (registry.Keeper).
type Peers = forward.Peers

// The headers of a forwarded request (package forward says what each does).
const (
	ForwardedHeader = forward.ForwardedHeader
	AckHeader       = forward.AckHeader
	KeepAliveHeader = forward.KeepAliveHeader
)

// The default bounds of a forward (Options.ForwardFirstByte, Options.ForwardIdle).
const (
	DefaultForwardFirstByte = forward.DefaultFirstByte
	DefaultForwardIdle      = forward.DefaultIdle
)

// peering is the server's part in a registry (Options.Peers): who it is, its
// forwarder, and its models' states as last announced.
type peering struct {
	*forward.Forwarder
	nodeID string

	states atomic.Pointer[map[string]string] // this node's models' states, as last announced
	warm   warmKeys                          // the prefix keys this node served lately
}

// forwardError is a forward's failure as the client is told it, in its codec's shape.
func forwardError(f *forward.Failure) *apiError {
	return &apiError{status: 502, typ: "server_error", code: f.Code, message: f.Message, reason: "forward", retry: 1}
}

// streamEnder is a codec as a relayed stream needs it (forward.Ender): a broken
// stream ends with the codec's error event (brokenAppender), or OpenAI's.
type streamEnder struct{ c codec }

func (e streamEnder) AppendBroken(b []byte, events int, f *forward.Failure) []byte {
	if ba, ok := e.c.(brokenAppender); ok {
		return ba.appendBroken(b, events, forwardError(f))
	}
	return openai.AppendDone(openai.AppendErrorEvent(b, forwardError(f).wire()))
}

// RegistryModels is this server's part of its registry announcement: every model it
// serves, with its state (an upstream model is ready), its tiers, the LoRA adapters
// it serves over it, whether it embeds and the prefix keys it served lately (a model not ready forgets them: its cache is
// gone). It reads the engine's state once, and remembers it for routing.
func (s *Server) RegistryModels() []registry.Model {
	states, embeds := s.modelStates(), s.embedding()
	now := s.now()
	out := make([]registry.Model, 0, len(s.order))
	seen := make(map[string]string, len(s.order))
	for _, id := range s.order {
		m := s.models[id]
		st := registry.StateReady
		if m.upstream == nil {
			st = string(states[id])
		}
		rm := registry.Model{ID: id, State: st, Embed: embeds[id], PromptPer1K: int64(m.price.PromptPer1K),
			CompletionPer1K: int64(m.price.CompletionPer1K), MaxLen: s.limit(m), Batch: s.batches != nil}
		for t, in := range m.in {
			if in {
				rm.Tiers = append(rm.Tiers, tiers.Tier(t).String())
			}
		}
		for _, aid := range s.adapterIDs {
			if s.adapters[aid].base == m {
				rm.Adapters = append(rm.Adapters, aid)
				if t := s.adapters[aid].tenant; t != "" {
					if rm.Owners == nil {
						rm.Owners = map[string]string{}
					}
					rm.Owners[aid] = t
				}
			}
		}
		if s.peer != nil && m.upstream == nil {
			if st == registry.StateReady {
				rm.Warm = s.peer.warm.list(id, now)
			} else {
				s.peer.warm.drop(id)
			}
		}
		seen[id] = st
		out = append(out, rm)
	}
	if s.peer != nil {
		s.peer.states.Store(&seen)
	}
	return out
}

// InFlight is the number of requests this server is serving (its announced load).
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// localState is model id's state here as last announced ("" when this server does
// not serve it). Before the first announcement every model counts as ready.
func (s *Server) localState(id string) string {
	if _, ok := s.models[id]; !ok {
		return ""
	}
	if p := s.peer.states.Load(); p != nil {
		if st, ok := (*p)[id]; ok && st != "" {
			return st
		}
	}
	return registry.StateReady
}

// servedWarm notes that an embedded model of this node served a prompt with prefix
// key k (announced with the model, registry.Model.Warm).
func (s *Server) servedWarm(model string, k uint64) {
	if s.peer != nil && k != 0 {
		s.peer.warm.add(model, k, s.now())
	}
}

// maybeForward forwards a request for a model (or a LoRA adapter) by name to another
// node when the registry says so (registry.Pick, forwardQuery), relaying the answer. prefix is the request's
// prefix key (0: none). It reports whether the request was handled and, if so,
// whether a stream writer took it over (the writer then releases the request's
// in-flight count). Batch lines and requests already forwarded are never forwarded.
//
// Money: the forwarding gateway has authenticated the key (a bad key costs no hop)
// and checked that the tenant may see the adapter the request names, if any
// (forwardQuery: another tenant's private adapter costs no hop either), and does
// nothing else: the receiving gateway applies the tenant's plan, quotas and
// budget, settles and ledgers the request, exactly once. The answer passes through;
// an error of the forwarding is answered in c's shape.
func (s *Server) maybeForward(ctx *fasthttp.RequestCtx, reqID string, c codec, tenant, model string, prefix uint64, stream bool) (handled, async bool) {
	if s.peer == nil || model == "" || len(ctx.Request.Header.Peek(ForwardedHeader)) > 0 {
		return false, false
	}
	q, ok := s.forwardQuery(tenant, model)
	if !ok {
		return false, false // another tenant's private adapter: the local path's 404, no hop
	}
	local := q.Local
	q.Prefix, q.LocalInFlight = prefix, s.inFlight.Load()-1
	if local == registry.StateReady && prefix != 0 {
		q.LocalWarm = s.peer.warm.has(q.Model, prefix, s.now())
	}
	handled, async, tried := s.forwardBy(ctx, reqID, c, stream, func(now time.Time, nodes []registry.Node, skip []string) registry.Choice {
		q.Skip = skip
		return registry.Pick(now, s.peer.nodeID, q, nodes)
	})
	if handled || local != "" {
		return handled, async
	}
	if tried {
		s.writeErrorIn(ctx, reqID, c, &apiError{status: 503, typ: "server_error", code: "model_unavailable",
			message: "the processes serving '" + model + "' cannot be reached; retry later", reason: "forward", retry: 1})
		return true, false
	}
	return false, false // Nowhere: the local path answers 404 model_not_found
}

// forwardQuery is Pick's query for a request of tenant naming name as its model: a
// model (name itself), or a LoRA adapter, which runs on its base model (this
// process's configuration says which, else the announcements of the nodes serving
// it); Local is the model's state here, "" when this process serves neither the
// model nor the adapter. ok is false for an adapter the tenant may not see (another
// tenant's private one, here or as announced): it is not forwarded, so that its 404
// comes from here, as fast as for a name nobody serves.
func (s *Server) forwardQuery(tenant, name string) (q registry.Query, ok bool) {
	if a := s.adapters[name]; a != nil {
		if !a.visible(tenant) {
			return registry.Query{}, false
		}
		return registry.Query{Model: a.base.id, Adapter: name, Local: s.localState(a.base.id)}, true
	}
	if s.models[name] != nil {
		return registry.Query{Model: name, Local: s.localState(name)}, true
	}
	if base, ok := registry.AdapterBase(s.now(), s.peer.Nodes(), name, tenant); ok {
		return registry.Query{Model: base, Adapter: name}, true
	}
	return registry.Query{Model: name}, true
}

// maybeForwardTier forwards a request routed by tier (model "auto", "tier:…", the
// tier fields) to another node when this one has no model of the best tier the
// request may use and another has (registry.PickTier); the receiving node's tier
// router chooses among its own models. Before admission, so that the request is
// counted once, by the node that serves it.
func (j *job) maybeForwardTier(ctx *fasthttp.RequestCtx) (handled, async bool) {
	s := j.s
	if s.peer == nil || j.line != nil || j.rt.named != nil || len(ctx.Request.Header.Peek(ForwardedHeader)) > 0 {
		return false, false
	}
	top, bottom := j.rt.mode.Top(), tiers.Fast
	if j.rt.mode == tiers.ModeFixed {
		top, bottom = j.rt.tier, j.rt.tier
	}
	allowed := j.pol.AllowedTiers()
	var q registry.TierQuery
	for t := top; t >= bottom; t-- {
		if !allowed[t] {
			continue
		}
		here := false
		for _, c := range s.set.Tiers[t] {
			here = here || s.allowsCandidate(j.pol, c.Model)
		}
		q.Tiers, q.Local = append(q.Tiers, t.String()), append(q.Local, here)
	}
	if len(q.Tiers) == 0 || q.Local[0] {
		return false, false // the best tier is here (the common case: no hop)
	}
	q.Allow, q.Prefix = j.pol.AllowsModel, j.prefix
	handled, async, _ = s.forwardBy(ctx, j.reqID, j.codec, j.in.stream, func(now time.Time, nodes []registry.Node, skip []string) registry.Choice {
		q.Skip = skip
		return registry.PickTier(now, s.peer.nodeID, q, nodes)
	})
	return handled, async // not handled: this node's router answers (a lower tier, or why none fits)
}

// forwardBy forwards the request to the node pick chooses, trying the next one (3 at
// most) when a node cannot be reached or is draining. A node lost while the request
// was on it (its announcement gone) ends the request with 502 node_lost, and one that
// sent nothing within the time to first byte with 502 node_unresponsive: it may have
// run there, so it is not sent again. Nodes that failed are passed over by the next
// requests too (suspicion). tried reports, when the request was not handled, that a
// node serving it was tried and failed, or is passed over for failing lately.
func (s *Server) forwardBy(ctx *fasthttp.RequestCtx, reqID string, cd codec, stream bool, pick func(time.Time, []registry.Node, []string) registry.Choice) (handled, async, tried bool) {
	nodes := s.peer.Nodes()
	if len(nodes) == 0 {
		return false, false, false
	}
	skip := s.peer.Suspects(nodes, s.now())
	for i := range 3 {
		c := pick(s.now(), nodes, skip)
		if c.Where != registry.Forward {
			if i == 0 && len(skip) > 0 {
				tried = pick(s.now(), nodes, nil).Where == registry.Forward // only suspects serve it
			}
			return false, false, tried
		}
		async, err := s.peer.Forward(ctx, forward.Request{ID: reqID, Echo: echoedID(ctx, reqID), Node: c.Node, Stream: stream,
			End: streamEnder{cd}, Done: func() {
				s.inFlight.Add(-1)
				s.wg.Done()
			}})
		if err == nil {
			return true, async, false
		}
		f := forward.Classify(err)
		s.peer.Fail(c.Node, f, s.now())
		switch f {
		case forward.Lost, forward.Unresponsive:
			s.log.Warn("forwarded request lost", "request_id", reqID, "node", c.Node.ID, "error", err)
			s.peer.Count(c.Node.ID, "lost")
			e := forward.NodeLost(c.Node.ID, true)
			if f == forward.Unresponsive {
				e = s.peer.Unresponsive(c.Node.ID)
			}
			s.writeErrorIn(ctx, reqID, cd, forwardError(e))
			return true, false, true
		}
		s.log.Warn("forward failed", "request_id", reqID, "node", c.Node.ID, "error", err)
		s.peer.Count(c.Node.ID, "error")
		skip = append(skip, c.Node.ID)
		tried = true
	}
	return false, false, tried
}

// forwardable reports whether the request names a model by name (not "auto", a tier,
// or tier routing fields); those go through routeOf and maybeForwardTier.
func forwardable(h *fasthttp.RequestHeader, in *input) bool {
	name := in.p.Model
	if name == "" || name == "auto" || name == "default" || bytes.HasPrefix([]byte(name), []byte("tier:")) {
		return false
	}
	if f := in.p.LMLite; f != nil && (f.Tier != "" || f.TierMode != "") {
		return false
	}
	return len(h.Peek("X-LMLite-Tier")) == 0 && len(h.Peek("X-LMLite-Tier-Mode")) == 0
}

// remoteModel is a model as the other live nodes announce it.
type remoteModel struct {
	state  string               // the best state among the nodes (ready, loading, unloaded, failed)
	embeds bool                 // some node embeds with it
	in     [tiers.NumTiers]bool // the tiers listing it on some node
	nodes  []string             // the live nodes serving it, by id
	// For a batch line naming it (Server.Check): the highest price and length limit
	// the nodes announce, and the nodes that run batch lines.
	price  money.Price
	maxLen int
	batch  []string
}

// nodesWith is the nodes serving a local model: this one and the others (nil without
// a registry).
func (r remoteModel) nodesWith(p *peering) []string {
	if p == nil {
		return nil
	}
	return slices.Sorted(slices.Values(append([]string{p.nodeID}, r.nodes...)))
}

// remoteModels is every model the other live nodes serve, by id (nil without a
// registry). Nothing is asked of Redis: it reads the keeper's snapshot.
func (s *Server) remoteModels() map[string]remoteModel {
	if s.peer == nil {
		return nil
	}
	now := s.now()
	out := map[string]remoteModel{}
	for _, n := range s.peer.Nodes() {
		if n.ID == s.peer.nodeID || !registry.Serving(&n, now) {
			continue
		}
		for _, m := range n.Models {
			r := out[m.ID]
			if r.state == "" || stateRank(m.State) < stateRank(r.state) {
				r.state = m.State
			}
			r.embeds = r.embeds || m.Embed
			for _, t := range m.Tiers {
				if tr, err := tiers.ParseTier(t); err == nil {
					r.in[tr] = true
				}
			}
			r.nodes = append(r.nodes, n.ID)
			r.price.PromptPer1K = max(r.price.PromptPer1K, money.Money(m.PromptPer1K))
			r.price.CompletionPer1K = max(r.price.CompletionPer1K, money.Money(m.CompletionPer1K))
			r.maxLen = max(r.maxLen, m.MaxLen)
			if m.Batch {
				r.batch = append(r.batch, n.ID)
			}
			out[m.ID] = r
		}
	}
	return out
}

func stateRank(s string) int {
	switch s {
	case registry.StateReady:
		return 0
	case registry.StateLoading:
		return 1
	case registry.StateUnloaded:
		return 2
	case registry.StateFailed:
		return 3
	}
	return 4
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// keepAlive wraps the stream writer of a request that another gateway forwarded and
// that asks for keep-alives (KeepAliveHeader: how long the stream may stay silent;
// at least 10 ms, else no keep-alives): whenever fn has written nothing for that
// long, between two events, an SSE comment ": keep-alive" is written and flushed,
// or ping when it is not nil (the output's own keep-alive event, pinger). A stream
// with a ping gets it every pingEvery of silence also when it was not forwarded.
// Other requests get fn as it is.
func keepAlive(ctx *fasthttp.RequestCtx, ping []byte, fn func(*bufio.Writer)) func(*bufio.Writer) {
	every := pingEvery
	if len(ctx.Request.Header.Peek(ForwardedHeader)) > 0 {
		d, err := time.ParseDuration(string(ctx.Request.Header.Peek(KeepAliveHeader)))
		switch {
		case err == nil && d >= 10*time.Millisecond:
			every = d
		case ping == nil:
			return fn
		}
	} else if ping == nil {
		return fn
	}
	return func(w *bufio.Writer) {
		k := &keepAliveWriter{w: w, boundary: true, ping: ping}
		inner := bufio.NewWriterSize(k, w.Size())
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					k.tick()
				}
			}
		}()
		defer func() {
			close(done)
			wg.Wait()
		}()
		fn(inner)
		inner.Flush()
	}
}

// keepAliveWriter passes a stream's bytes to w, flushing each write, and writes a
// keep-alive comment on a tick when nothing was written since the last one and the
// bytes so far end an event.
type keepAliveWriter struct {
	mu       sync.Mutex
	w        *bufio.Writer
	wrote    bool    // since the last tick
	boundary bool    // the bytes so far end with a blank line (or there are none)
	tail     [2]byte // the last two bytes written
	gone     bool    // a write failed: the client went away
	ping     []byte  // the keep-alive event written (nil: keepAliveComment)
}

var keepAliveComment = sse.AppendComment(nil, "keep-alive")

// pingEvery is how long a stream whose output has its own keep-alive event (pinger)
// stays silent before it is sent, when the client did not ask (KeepAliveHeader).
var pingEvery = 10 * time.Second

func (k *keepAliveWriter) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, err := k.w.Write(p)
	if n > 0 {
		k.wrote = true
		if n >= 2 {
			k.tail = [2]byte{p[n-2], p[n-1]}
		} else {
			k.tail = [2]byte{k.tail[1], p[0]}
		}
		k.boundary = k.tail == [2]byte{'\n', '\n'}
	}
	if err == nil {
		err = k.w.Flush()
	}
	k.gone = k.gone || err != nil
	return n, err
}

func (k *keepAliveWriter) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.wrote && k.boundary && !k.gone {
		if k.ping != nil {
			k.w.Write(k.ping)
		} else {
			k.w.Write(keepAliveComment)
		}
		k.gone = k.w.Flush() != nil
	}
	k.wrote = false
}
