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
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/internal/sse"
	"github.com/lmlite/lmlite/money"
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

// AckHeader asks the receiving gateway to answer "102 Processing" as soon as its
// handler takes the request (ackForwarded), before the answer itself: the forwarding
// gateway's time to first byte (Options.ForwardFirstByte) then measures whether the
// node's handler is responsive, not how long a non-streamed generation takes.
const AckHeader = "X-LMLite-Ack"

// KeepAliveHeader tells the receiving gateway, on a forwarded request, how long its
// event stream may stay silent: it writes an SSE comment (": keep-alive") whenever
// it has written nothing for that long (keepAlive), so that the forwarding gateway's
// idle bound (Options.ForwardIdle) cuts a stalled process, not a generation that
// pauses (a queue, a long prefill, a model loading). The forwarding gateway sends a
// third of its bound, and drops the comments from what it relays.
const KeepAliveHeader = "X-LMLite-Keep-Alive"

// processing is the interim response AckHeader asks for.
var processing = []byte("HTTP/1.1 102 Processing\r\n\r\n")

// ackForwarded answers 102 Processing to a request that asks for it (AckHeader).
func ackForwarded(ctx *fasthttp.RequestCtx) {
	if string(ctx.Request.Header.Peek(AckHeader)) == "102" {
		ctx.Conn().Write(processing) // nothing of the answer is written yet; an error shows there
	}
}

// peering is the server's part in a registry (Options.Peers): who it is, the
// connection pools to the other nodes, and its models' states as last announced.
type peering struct {
	peers  Peers
	nodeID string

	firstByte time.Duration // the longest wait for a forwarded request's first byte (Options.ForwardFirstByte)
	idle      time.Duration // the longest silence of a forwarded event stream once started (Options.ForwardIdle)

	mu      sync.Mutex                        // guards clients, conns and suspect
	clients map[string]*fasthttp.HostClient   // by node address
	conns   map[string]map[*peerConn]struct{} // open connections, by node address
	suspect map[string]suspicion              // node id → why it is passed over

	states atomic.Pointer[map[string]string] // this node's models' states, as last announced
	warm   warmKeys                          // the prefix keys this node served lately

	forwarded *prometheus.CounterVec // by node and status
}

// Forwarding's time limits. A node is lost when its registry announcement is gone
// (it stopped renewing: dead, hung, or cut off from Redis): every connection to it is
// closed then, which ends the requests waiting on it. watchEvery is how often a
// forward checks; a hung node is noticed within its announcement's TTL, plus a
// registry refresh, plus watchEvery.
//
// A node that keeps announcing but does not answer (its handler wedged, its listener
// accepting and never reading) is caught by the time to first byte instead:
// DefaultForwardFirstByte unless Options.ForwardFirstByte says otherwise. Past it the
// request ends with 502 node_unresponsive and the node is passed over for
// unresponsiveHold. One that stops sending in the middle of an event stream is
// caught by the idle bound (DefaultForwardIdle unless Options.ForwardIdle): the
// stream ends with a node_unresponsive error event, and the node is passed over the
// same way.
const (
	dialTimeout             = 2 * time.Second
	watchEvery              = 200 * time.Millisecond
	DefaultForwardFirstByte = 10 * time.Second
	DefaultForwardIdle      = 30 * time.Second
	unresponsiveHold        = 30 * time.Second
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
		rm := registry.Model{ID: id, State: st, Embed: embeds[id], PromptPer1K: int64(m.price.PromptPer1K),
			CompletionPer1K: int64(m.price.CompletionPer1K), MaxLen: s.limit(m), Batch: s.batches != nil}
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
// budget, settles and ledgers the request, exactly once. The answer passes through;
// an error of the forwarding is answered in c's shape.
func (s *Server) maybeForward(ctx *fasthttp.RequestCtx, reqID string, c codec, model string, prefix uint64, stream bool) (handled, async bool) {
	if s.peer == nil || model == "" || len(ctx.Request.Header.Peek(ForwardedHeader)) > 0 {
		return false, false
	}
	local := s.localState(model)
	q := registry.Query{Model: model, Local: local, Prefix: prefix, LocalInFlight: s.inFlight.Load() - 1}
	if local == registry.StateReady && prefix != 0 {
		q.LocalWarm = s.peer.warm.has(model, prefix, s.now())
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
	nodes := s.peer.peers.Nodes()
	if len(nodes) == 0 {
		return false, false, false
	}
	skip := s.peer.suspects(nodes, s.now())
	for i := range 3 {
		c := pick(s.now(), nodes, skip)
		if c.Where != registry.Forward {
			if i == 0 && len(skip) > 0 {
				tried = pick(s.now(), nodes, nil).Where == registry.Forward // only suspects serve it
			}
			return false, false, tried
		}
		async, err := s.forward(ctx, reqID, c.Node, stream)
		if err == nil {
			return true, async, false
		}
		f := classify(err)
		s.peer.fail(c.Node, f, s.now())
		switch f {
		case failLost, failUnresponsive:
			s.log.Warn("forwarded request lost", "request_id", reqID, "node", c.Node.ID, "error", err)
			s.peer.forwarded.WithLabelValues(c.Node.ID, "lost").Inc()
			e := nodeLost(c.Node.ID, true)
			if f == failUnresponsive {
				e = &apiError{status: 502, typ: "server_error", code: "node_unresponsive", reason: "forward", retry: 1,
					message: "the process '" + c.Node.ID + "' serving this request sent nothing within " + s.peer.firstByte.String() +
						" (it may run there); retry"}
			}
			s.writeErrorIn(ctx, reqID, cd, e)
			return true, false, true
		}
		s.log.Warn("forward failed", "request_id", reqID, "node", c.Node.ID, "error", err)
		s.peer.forwarded.WithLabelValues(c.Node.ID, "error").Inc()
		skip = append(skip, c.Node.ID)
		tried = true
	}
	return false, false, tried
}

// failure is how a forward failed, as classify sorts forward's errors.
type failure int

const (
	failUnreached    failure = iota // not connected, or the connection refused or broke before the request was sent: try another node
	failDraining                    // answered 503 shutting_down: try another node
	failLost                        // lost with the request on it: 502 node_lost
	failUnresponsive                // nothing within the time to first byte: 502 node_unresponsive
)

// classify sorts an error of forward.
func classify(err error) failure {
	switch {
	case errors.Is(err, errLost):
		return failLost
	case errors.Is(err, errDraining):
		return failDraining
	case errors.Is(err, errUnresponsive):
		return failUnresponsive
	}
	return failUnreached
}

// suspicion is why a node that failed a forward is passed over.
type suspicion struct {
	expires time.Time // the expiry of its announcement when it failed
	until   time.Time // passed over until then whatever it announces (zero: no hold)
}

// skip decides, at now, for a node that failed a forward (s) and whose
// announcement now expires at announced, whether it is still passed over, and if not
// whether its suspicion may be forgotten. A node that was unreachable or lost is
// passed over until it announces itself again (a restarted process, a healed
// network): no skip then, and the suspicion is forgotten. One that did not answer in
// time keeps announcing while it hangs, so it is passed over for a hold as well;
// after the hold it gets the next request again.
func (s suspicion) skip(announced, now time.Time) bool {
	return now.Before(s.until) || !announced.After(s.expires)
}

// suspects is the nodes of the snapshot passed over at now (suspicion.skip); it
// forgets the suspicions of nodes no longer passed over or no longer announced.
func (p *peering) suspects(nodes []registry.Node, now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.suspect) == 0 {
		return nil
	}
	var out []string
	seen := 0
	for i := range nodes {
		n := &nodes[i]
		if sp, ok := p.suspect[n.ID]; ok {
			seen++
			if sp.skip(n.Expires, now) {
				out = append(out, n.ID)
			} else {
				delete(p.suspect, n.ID)
			}
		}
	}
	if seen < len(p.suspect) { // some are gone from the registry
		for id := range p.suspect {
			if !slices.ContainsFunc(nodes, func(n registry.Node) bool { return n.ID == id }) {
				delete(p.suspect, id)
			}
		}
	}
	return out
}

// fail notes at now that a forward to n failed with f.
func (p *peering) fail(n registry.Node, f failure, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.suspect == nil {
		p.suspect = map[string]suspicion{}
	}
	sp := suspicion{expires: n.Expires}
	if f == failUnresponsive {
		sp.until = now.Add(unresponsiveHold)
	}
	p.suspect[n.ID] = sp
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

// peerConn is a connection to a node, tracked until it closes. A read deadline set
// on it bounds the wait for the first byte read after it is set, not for the rest:
// fasthttp sets the request's deadline (HostClient.DoTimeout) just before it reads
// the answer, so it bounds the time to the answer's first byte (102 Processing, or
// the headers), never an event stream's body. An event stream's body is bounded by
// its idle bound instead (setIdle): every read that returns bytes moves the deadline
// to that much later.
type peerConn struct {
	net.Conn
	p     *peering
	addr  string
	once  sync.Once
	armed atomic.Bool  // a read deadline is set and no byte was read since
	idle  atomic.Int64 // while relaying an event stream: its idle bound (ns); 0: none
	stall atomic.Bool  // a read failed on the idle bound
}

// setIdle bounds the silence between the bytes read from now on by d (0: no bound,
// the connection going back to its pool).
func (c *peerConn) setIdle(d time.Duration) {
	c.idle.Store(int64(d))
	c.stall.Store(false)
	if d > 0 {
		c.Conn.SetReadDeadline(time.Now().Add(d))
	} else {
		c.Conn.SetReadDeadline(time.Time{})
	}
}

func (c *peerConn) SetReadDeadline(t time.Time) error {
	c.armed.Store(!t.IsZero())
	return c.Conn.SetReadDeadline(t)
}

func (c *peerConn) SetDeadline(t time.Time) error {
	c.armed.Store(!t.IsZero())
	return c.Conn.SetDeadline(t)
}

func (c *peerConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.armed.Load() {
		c.armed.Store(false)
		c.Conn.SetReadDeadline(time.Time{})
	}
	if idle := time.Duration(c.idle.Load()); idle > 0 {
		if n > 0 {
			c.Conn.SetReadDeadline(time.Now().Add(idle))
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			c.stall.Store(true)
		}
	}
	return n, err
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

// conn is the tracked connection to addr whose local address is local (nil if none).
func (p *peering) conn(addr string, local net.Addr) *peerConn {
	if local == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns[addr] {
		if la := c.LocalAddr(); la != nil && la.Network() == local.Network() && la.String() == local.String() {
			return c
		}
	}
	return nil
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
// for a node lost (its announcement gone) while the request was on it;
// errUnresponsive for a node that sent nothing within the time to first byte.
var (
	errDraining     = errors.New("gateway: the node is draining")
	errLost         = errors.New("gateway: the node was lost (its registry announcement expired) while the request was on it")
	errUnresponsive = errors.New("gateway: the node sent nothing within the time to first byte")
)

// forward sends the request as it came (method, path, headers, body) to node n and
// relays the answer: status, headers, and the body, an event stream chunk by chunk as
// it arrives. An error means n was not reached, did not answer, is draining
// (errDraining), or was lost before it answered (errLost): nothing has been written.
// async is true when a stream writer took the request over. A node lost during an
// event stream ends the stream with an SSE error event (relay).
func (s *Server) forward(ctx *fasthttp.RequestCtx, reqID string, n registry.Node, allowStream bool) (async bool, err error) {
	hc, err := s.peer.client(n.Addr)
	if err != nil {
		return false, err
	}
	req := fasthttp.AcquireRequest()
	ctx.Request.CopyTo(req)
	req.SetRequestURI(n.Addr + string(ctx.RequestURI()))
	req.Header.Set(ForwardedHeader, s.peer.nodeID)
	req.Header.Set("X-Request-Id", echoedID(ctx, reqID)) // the receiver keeps it as a client's id
	req.Header.Set(AckHeader, "102")
	req.Header.Set(KeepAliveHeader, (s.peer.idle / 3).String())
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	var lost atomic.Bool
	stop := s.watch(n, &lost)
	err = hc.DoTimeout(req, resp, s.peer.firstByte)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		stop()
		fasthttp.ReleaseResponse(resp)
		switch {
		case lost.Load():
			return false, fmt.Errorf("%w: %v", errLost, err)
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout):
			return false, fmt.Errorf("%w (%s): %v", errUnresponsive, s.peer.firstByte, err)
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
	// The stream's body: at most s.peer.idle between bytes (the node sends keep-alives).
	pc := s.peer.conn(n.Addr, resp.LocalAddr())
	if pc != nil {
		pc.setIdle(s.peer.idle)
	}
	stalled := func() bool { return pc != nil && pc.stall.Load() }
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			stop()
			if pc != nil {
				pc.setIdle(0)
			}
			fasthttp.ReleaseResponse(resp)
			s.inFlight.Add(-1)
			s.wg.Done()
		}()
		broke := relay(w, resp, func() *apiError {
			if stalled() && !lost.Load() {
				return s.peer.stalled(n.ID)
			}
			return nodeLost(n.ID, lost.Load())
		})
		if broke {
			f := failLost
			if stalled() && !lost.Load() {
				f = failUnresponsive
			}
			s.log.Warn("forwarded stream lost", "request_id", reqID, "node", n.ID, "announcement_gone", lost.Load(),
				"stalled", f == failUnresponsive)
			s.peer.forwarded.WithLabelValues(n.ID, "lost").Inc()
			s.peer.fail(n, f, s.now())
		}
	})
	return true, nil
}

// stalled is the error event ending a forwarded event stream whose node sent
// nothing for the idle bound: node_unresponsive, as for a first byte that never came.
func (p *peering) stalled(node string) *apiError {
	return &apiError{status: 502, typ: "server_error", code: "node_unresponsive", reason: "forward", retry: 1,
		message: "the process '" + node + "' serving this request sent nothing for " + p.idle.String() +
			" in the middle of its answer (it may still run there); retry"}
}

// relay copies an event stream as it arrives, whole events only (the other node's
// keep-alive comments dropped), flushing after each read, until it ends or the
// client goes away (which closes the stream to the other node, and so cancels the
// generation there). A stream that breaks before its "data: [DONE]" (the node was
// lost, killed, stalled past the idle bound, or the connection cut) ends as an engine
// failure ends an embedded stream: an SSE error event (why's), then [DONE]. It
// reports whether the stream broke.
func relay(bw *bufio.Writer, resp *fasthttp.Response, why func() *apiError) (broke bool) {
	w := sse.NewWriter(bw)
	buf := make([]byte, 0, 16<<10)
	rd := resp.BodyStream()
	done := false // the last whole event was "data: [DONE]"
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf)) // an event longer than the buffer
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if end := bytes.LastIndex(buf, []byte("\n\n")); end >= 0 {
			events := dropComments(buf[:end+2])
			if len(events) > 0 {
				done = bytes.HasSuffix(events, []byte("data: [DONE]\n\n"))
				if !w.Write(events) {
					resp.CloseBodyStream()
					return false
				}
			}
			buf = buf[:copy(buf, buf[end+2:])]
		}
		if err != nil {
			if done && errors.Is(err, io.EOF) {
				return false
			}
			w.Write(appendDone(appendOpenAIErrorEvent(buf[:0], why())))
			return true
		}
	}
}

// dropComments removes, in place, the events of whole events that hold only comment
// lines (": keep-alive", the other node's, for the hop alone) and returns the rest.
func dropComments(events []byte) []byte {
	if !bytes.Contains(events, []byte("\n:")) && (len(events) == 0 || events[0] != ':') {
		return events // the common case: no comment
	}
	out := events[:0]
	for rest := events; len(rest) > 0; {
		i := bytes.Index(rest, []byte("\n\n"))
		ev := rest[:i+2]
		rest = rest[i+2:]
		comment := true
		for line := range bytes.SplitSeq(bytes.TrimSuffix(ev, []byte("\n\n")), []byte("\n")) {
			comment = comment && len(line) > 0 && line[0] == ':'
		}
		if !comment {
			out = append(out, ev...)
		}
	}
	return out
}

// nodeLost is the answer to a forwarded request whose node stopped answering with
// the request on it (lost: its registry announcement is gone; else its connection
// broke): 502 node_lost with Retry-After. It is not sent again: it may have run.
func nodeLost(node string, lost bool) *apiError {
	why := "its connection broke"
	if lost {
		why = "its registry announcement expired"
	}
	return &apiError{status: 502, typ: "server_error", code: "node_lost", reason: "forward", retry: 1,
		message: "the process '" + node + "' serving this request stopped answering (" + why + "; it may have run there); retry"}
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
