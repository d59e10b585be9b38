package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/registry"
	"github.com/lmlite/lmlite/tiers"
)

// Peers is the registry of the processes sharing a Redis, as this server needs it: the
// last snapshot of their announcements (registry.Keeper).
type Peers interface {
	Nodes() []registry.Node
}

// ForwardedHeader marks a request one gateway forwarded to another; the receiving
// gateway serves it itself or refuses it, and never forwards it again. A client that
// sends it only turns forwarding off for its request.
const ForwardedHeader = "X-LMLite-Forwarded-By"

// peering is the server's part in a registry (Options.Peers): who it is, the
// connection pools to the other nodes, and its models' states as last announced.
type peering struct {
	peers  Peers
	nodeID string

	mu      sync.Mutex                      // guards clients
	clients map[string]*fasthttp.HostClient // by node address

	states atomic.Pointer[map[string]string] // this node's models' states, as last announced

	forwarded *prometheus.CounterVec // by node and status
}

// RegistryModels is this server's part of its registry announcement: every model it
// serves, with its state (an upstream model is ready), its tiers and whether it
// embeds. It reads the engine's state once, and remembers it for routing.
func (s *Server) RegistryModels() []registry.Model {
	states, embeds := s.modelStates(), s.embedding()
	out := make([]registry.Model, 0, len(s.order))
	seen := make(map[string]string, len(s.order))
	for _, id := range s.order {
		m := s.models[id]
		st := registry.StateReady
		if m.upstream == nil {
			st = string(states[id])
		}
		rm := registry.Model{ID: id, State: st, Embed: embeds[id]}
		for t, in := range m.in {
			if in {
				rm.Tiers = append(rm.Tiers, tiers.Tier(t).String())
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

// maybeForward forwards the request to another node when the registry says so
// (registry.Pick), relaying the answer. It reports whether the request was handled
// and, if so, whether a stream writer took it over (the writer then releases the
// request's in-flight count). Batch lines and requests already forwarded are never
// forwarded.
//
// Money: the forwarding gateway has authenticated the key (a bad key costs no hop)
// and does nothing else: the receiving gateway applies the tenant's plan, quotas and
// budget, settles and ledgers the request, exactly once. The answer passes through.
func (s *Server) maybeForward(ctx *fasthttp.RequestCtx, reqID, model string, stream bool) (handled, async bool) {
	if s.peer == nil || model == "" || len(ctx.Request.Header.Peek(ForwardedHeader)) > 0 {
		return false, false
	}
	nodes := s.peer.peers.Nodes()
	if len(nodes) == 0 {
		return false, false
	}
	local := s.localState(model)
	var skip []string
	for range 3 {
		c := registry.Pick(s.now(), s.peer.nodeID, model, local, nodes, skip...)
		if c.Where != registry.Forward {
			return false, false // Nowhere: the local path answers 404 model_not_found
		}
		async, err := s.forward(ctx, reqID, c.Node, stream)
		if err == nil {
			return true, async
		}
		s.log.Warn("forward failed", "request_id", reqID, "model", model, "node", c.Node.ID, "error", err)
		s.peer.forwarded.WithLabelValues(c.Node.ID, "error").Inc()
		skip = append(skip, c.Node.ID)
	}
	if local != "" {
		return false, false
	}
	s.writeError(ctx, reqID, &apiError{status: 503, typ: "server_error", code: "model_unavailable",
		message: "the processes serving '" + model + "' cannot be reached; retry later", reason: "forward", retry: 1})
	return true, false
}

// client returns the connection pool to a node's address.
func (p *peering) client(addr string) (*fasthttp.HostClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if hc := p.clients[addr]; hc != nil {
		return hc, nil
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("bad node address " + strconv.Quote(addr))
	}
	tls := u.Scheme == "https"
	// Idle connections close after a second: a node's drain waits for the connections
	// open to it, and a peer's pool must not hold that up.
	hc := &fasthttp.HostClient{Addr: fasthttp.AddMissingPort(u.Host, tls), IsTLS: tls, Name: "lmlite",
		NoDefaultUserAgentHeader: true, MaxConns: 4096, MaxIdleConnDuration: time.Second}
	p.clients[addr] = hc
	return hc, nil
}

// errDraining is forward's error for a node that answered 503 shutting_down.
var errDraining = errors.New("gateway: the node is draining")

// forward sends the request as it came (method, path, headers, body) to node n and
// relays the answer: status, headers, and the body, an event stream chunk by chunk as
// it arrives. An error means n was not reached, did not answer, or is draining
// (errDraining): nothing has been written. async is true when a stream writer took the request over.
func (s *Server) forward(ctx *fasthttp.RequestCtx, reqID string, n registry.Node, allowStream bool) (async bool, err error) {
	hc, err := s.peer.client(n.Addr)
	if err != nil {
		return false, err
	}
	req := fasthttp.AcquireRequest()
	ctx.Request.CopyTo(req)
	req.SetRequestURI(n.Addr + string(ctx.RequestURI()))
	req.Header.Set(ForwardedHeader, s.peer.nodeID)
	req.Header.Set("X-Request-Id", reqID)
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	err = hc.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return false, err
	}
	status := resp.StatusCode()
	if status == 503 && bytes.Contains(resp.Body(), []byte(`"code":"shutting_down"`)) {
		// Draining: it has withdrawn, and this node's snapshot is older. Try another.
		fasthttp.ReleaseResponse(resp)
		return false, errDraining
	}
	s.peer.forwarded.WithLabelValues(n.ID, strconv.Itoa(status)).Inc()
	ctx.SetStatusCode(status)
	resp.Header.VisitAll(func(k, v []byte) {
		switch {
		case bytes.EqualFold(k, []byte("Content-Type")), bytes.EqualFold(k, []byte("Retry-After")),
			bytes.EqualFold(k, []byte("Cache-Control")), bytes.EqualFold(k, []byte("X-Accel-Buffering")),
			len(k) > 9 && bytes.EqualFold(k[:9], []byte("X-LMLite-")):
			ctx.Response.Header.SetBytesKV(k, v)
		}
	})
	ctx.Response.Header.Set("X-LMLite-Node", n.ID)
	if !allowStream || !bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")) {
		ctx.SetBody(resp.Body()) // reads the whole body
		fasthttp.ReleaseResponse(resp)
		return false, nil
	}
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			fasthttp.ReleaseResponse(resp)
			s.inFlight.Add(-1)
			s.wg.Done()
		}()
		relay(w, resp)
	})
	return true, nil
}

// relay copies an event stream as it arrives, flushing after every read, until it
// ends or the client goes away (which closes the stream to the other node, and so
// cancels the generation there).
func relay(w *bufio.Writer, resp *fasthttp.Response) {
	buf := make([]byte, 16<<10)
	rd := resp.BodyStream()
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil || w.Flush() != nil {
				resp.CloseBodyStream()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forwardable reports whether the request names a model by name (not "auto", a tier,
// or tier routing fields), which is all the registry knows of.
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
	for _, n := range s.peer.peers.Nodes() {
		if n.ID == s.peer.nodeID || !registry.Live(&n, now) {
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
