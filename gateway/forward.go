package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
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

	mu      sync.Mutex                        // guards clients, conns and suspect
	clients map[string]*fasthttp.HostClient   // by node address
	conns   map[string]map[*peerConn]struct{} // open connections, by node address
	suspect map[string]time.Time              // node id → the expiry of its announcement when a forward to it failed

	states atomic.Pointer[map[string]string] // this node's models' states, as last announced
	warm   warmKeys                          // the prefix keys this node served lately

	forwarded *prometheus.CounterVec // by node and status
}

// Forwarding's time limits. A node is lost when its registry announcement is gone
// (it stopped renewing: dead, hung, or cut off from Redis): every connection to it is
// closed then, which ends the requests waiting on it. watchEvery is how often a
// forward checks; a hung node is noticed within its announcement's TTL, plus a
// registry refresh, plus watchEvery.
const (
	dialTimeout = 2 * time.Second
	watchEvery  = 200 * time.Millisecond
)

// RegistryModels is this server's part of its registry announcement: every model it
// serves, with its state (an upstream model is ready), its tiers, whether it embeds
// and the prefix keys it served lately (a model not ready forgets them: its cache is
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
		rm := registry.Model{ID: id, State: st, Embed: embeds[id]}
		for t, in := range m.in {
			if in {
				rm.Tiers = append(rm.Tiers, tiers.Tier(t).String())
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

// maybeForward forwards a request for a model by name to another node when the
// registry says so (registry.Pick), relaying the answer. prefix is the request's
// prefix key (0: none). It reports whether the request was handled and, if so,
// whether a stream writer took it over (the writer then releases the request's
// in-flight count). Batch lines and requests already forwarded are never forwarded.
//
// Money: the forwarding gateway has authenticated the key (a bad key costs no hop)
// and does nothing else: the receiving gateway applies the tenant's plan, quotas and
// budget, settles and ledgers the request, exactly once. The answer passes through.
func (s *Server) maybeForward(ctx *fasthttp.RequestCtx, reqID, model string, prefix uint64, stream bool) (handled, async bool) {
	if s.peer == nil || model == "" || len(ctx.Request.Header.Peek(ForwardedHeader)) > 0 {
		return false, false
	}
	local := s.localState(model)
	q := registry.Query{Model: model, Local: local, Prefix: prefix, LocalInFlight: s.inFlight.Load() - 1}
	if local == registry.StateReady && prefix != 0 {
		q.LocalWarm = s.peer.warm.has(model, prefix, s.now())
	}
	handled, async, tried := s.forwardBy(ctx, reqID, stream, func(now time.Time, nodes []registry.Node, skip []string) registry.Choice {
		q.Skip = skip
		return registry.Pick(now, s.peer.nodeID, q, nodes)
	})
	if handled || local != "" {
		return handled, async
	}
	if tried {
		s.writeError(ctx, reqID, &apiError{status: 503, typ: "server_error", code: "model_unavailable",
			message: "the processes serving '" + model + "' cannot be reached; retry later", reason: "forward", retry: 1})
		return true, false
	}
	return false, false // Nowhere: the local path answers 404 model_not_found
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
			here = here || j.pol.AllowsModel(c.Model)
		}
		q.Tiers, q.Local = append(q.Tiers, t.String()), append(q.Local, here)
	}
	if len(q.Tiers) == 0 || q.Local[0] {
		return false, false // the best tier is here (the common case: no hop)
	}
	q.Allow, q.Prefix = j.pol.AllowsModel, j.prefix
	handled, async, _ = s.forwardBy(ctx, j.reqID, j.in.stream, func(now time.Time, nodes []registry.Node, skip []string) registry.Choice {
		q.Skip = skip
		return registry.PickTier(now, s.peer.nodeID, q, nodes)
	})
	return handled, async // not handled: this node's router answers (a lower tier, or why none fits)
}

// forwardBy forwards the request to the node pick chooses, trying the next one (3 at
// most) when a node cannot be reached or is draining. A node lost while the request
// was on it (its announcement gone) ends the request with 502 node_lost: it may have
// run there, so it is not sent again. Nodes that failed are passed over by the next
// requests too until they announce themselves again. tried reports that a node was
// tried and failed when the request was not handled.
func (s *Server) forwardBy(ctx *fasthttp.RequestCtx, reqID string, stream bool, pick func(time.Time, []registry.Node, []string) registry.Choice) (handled, async, tried bool) {
	nodes := s.peer.peers.Nodes()
	if len(nodes) == 0 {
		return false, false, false
	}
	skip := s.peer.suspects(nodes)
	for range 3 {
		c := pick(s.now(), nodes, skip)
		if c.Where != registry.Forward {
			return false, false, tried
		}
		async, err := s.forward(ctx, reqID, c.Node, stream)
		if err == nil {
			return true, async, false
		}
		s.peer.fail(c.Node)
		if errors.Is(err, errLost) {
			s.log.Warn("forwarded request lost", "request_id", reqID, "node", c.Node.ID, "error", err)
			s.peer.forwarded.WithLabelValues(c.Node.ID, "lost").Inc()
			s.writeError(ctx, reqID, &apiError{status: 502, typ: "server_error", code: "node_lost",
				message: "the process '" + c.Node.ID + "' serving this request stopped answering (it may have run there); retry",
				reason:  "forward", retry: 1})
			return true, false, true
		}
		s.log.Warn("forward failed", "request_id", reqID, "node", c.Node.ID, "error", err)
		s.peer.forwarded.WithLabelValues(c.Node.ID, "error").Inc()
		skip = append(skip, c.Node.ID)
		tried = true
	}
	return false, false, tried
}

// suspects is the nodes of the snapshot that failed a forward and have not announced
// themselves since (their announcement expires no later than when they failed).
func (p *peering) suspects(nodes []registry.Node) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.suspect) == 0 {
		return nil
	}
	var out []string
	for i := range nodes {
		n := &nodes[i]
		if e, ok := p.suspect[n.ID]; ok {
			if n.Expires.After(e) {
				delete(p.suspect, n.ID) // announced again since
			} else {
				out = append(out, n.ID)
			}
		}
	}
	if len(out) == 0 {
		clear(p.suspect) // the rest are gone from the registry
	}
	return out
}

// fail notes that a forward to n failed.
func (p *peering) fail(n registry.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.suspect == nil {
		p.suspect = map[string]time.Time{}
	}
	p.suspect[n.ID] = n.Expires
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
	// open to it, and a peer's pool must not hold that up. Every connection is tracked
	// by the node's address, for cutting them when the node is lost.
	hc := &fasthttp.HostClient{Addr: fasthttp.AddMissingPort(u.Host, tls), IsTLS: tls, Name: "lmlite",
		NoDefaultUserAgentHeader: true, MaxConns: 4096, MaxIdleConnDuration: time.Second,
		Dial: func(a string) (net.Conn, error) {
			c, err := fasthttp.DialTimeout(a, dialTimeout)
			if err != nil {
				return nil, err
			}
			return p.track(addr, c), nil
		}}
	p.clients[addr] = hc
	return hc, nil
}

// peerConn is a connection to a node, tracked until it closes.
type peerConn struct {
	net.Conn
	p    *peering
	addr string
	once sync.Once
}

func (c *peerConn) Close() error {
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.conns[c.addr], c)
		c.p.mu.Unlock()
	})
	return c.Conn.Close()
}

func (p *peering) track(addr string, c net.Conn) net.Conn {
	pc := &peerConn{Conn: c, p: p, addr: addr}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[string]map[*peerConn]struct{}{}
	}
	if p.conns[addr] == nil {
		p.conns[addr] = map[*peerConn]struct{}{}
	}
	p.conns[addr][pc] = struct{}{}
	return pc
}

// cut closes every connection to a node's address: the requests waiting on them end
// with an error.
func (p *peering) cut(addr string) {
	p.mu.Lock()
	cs := make([]*peerConn, 0, len(p.conns[addr]))
	for c := range p.conns[addr] {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// current reports whether the registry's snapshot is recent enough to say a node
// missing from it is gone (registry.Keeper.Current; a Peers without it always is).
// While Redis is unreachable the snapshot ages, and no node counts as lost.
func (p *peering) current(now time.Time) bool {
	if c, ok := p.peers.(interface{ Current(time.Time) bool }); ok {
		return c.Current(now)
	}
	return true
}

// present reports whether node id's announcement is in the registry's snapshot and
// live (draining counts: it finishes what it has).
func (p *peering) present(id string, now time.Time) bool {
	for _, n := range p.peers.Nodes() {
		if n.ID == id {
			return registry.Live(&n, now)
		}
	}
	return false
}

// watch checks every watchEvery, until stop is called, that node n is still
// present in a current snapshot; once it is not, it sets lost and cuts the
// connections to n.
func (s *Server) watch(n registry.Node, lost *atomic.Bool) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if now := s.now(); !s.peer.present(n.ID, now) && s.peer.current(now) {
					lost.Store(true)
					s.peer.cut(n.Addr)
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// errDraining is forward's error for a node that answered 503 shutting_down; errLost
// for a node lost (its announcement gone) while the request was on it.
var (
	errDraining = errors.New("gateway: the node is draining")
	errLost     = errors.New("gateway: the node was lost (its registry announcement expired) while the request was on it")
)

// forward sends the request as it came (method, path, headers, body) to node n and
// relays the answer: status, headers, and the body, an event stream chunk by chunk as
// it arrives. An error means n was not reached, did not answer, is draining
// (errDraining), or was lost before it answered (errLost): nothing has been written.
// async is true when a stream writer took the request over. A node lost during an
// event stream ends the stream where it was.
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
	var lost atomic.Bool
	stop := s.watch(n, &lost)
	err = hc.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		stop()
		fasthttp.ReleaseResponse(resp)
		if lost.Load() {
			return false, fmt.Errorf("%w: %v", errLost, err)
		}
		return false, err
	}
	status := resp.StatusCode()
	stream := allowStream && bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
	var body []byte
	if !stream {
		body, err = io.ReadAll(resp.BodyStream())
		stop()
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			if lost.Load() {
				return false, fmt.Errorf("%w: %v", errLost, err)
			}
			return false, err
		}
	}
	if status == 503 && bytes.Contains(body, []byte(`"code":"shutting_down"`)) {
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
	if !stream {
		ctx.SetBody(body)
		fasthttp.ReleaseResponse(resp)
		return false, nil
	}
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			stop()
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
