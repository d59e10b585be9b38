// Package forward sends a request to another lmlite process (a node of the
// registry) and relays its answer, as net/http/httputil's ReverseProxy keeps
// forwarding apart from serving: the connection pools to the nodes, the bounds on a
// node that does not answer (time to first byte, idle stream), which nodes to pass
// over after a failure, and the copy loop of an event stream. Which node serves a
// request is decided by the caller (registry.Pick); how an error reads is decided
// by the client's API (the Ender a stream is relayed with, and the caller's error
// answer for a Failure before the stream).
package forward

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/lmlite/lmlite/registry"
)

// Peers is the registry of the processes sharing a Redis, as forwarding needs it:
// the last snapshot of their announcements (registry.Keeper). A Peers with a method
// Current(time.Time) bool says whether the snapshot is recent enough to say a node
// missing from it is gone.
type Peers interface {
	Nodes() []registry.Node
}

// ForwardedHeader marks a request one gateway forwarded to another; the receiving
// gateway serves it itself or refuses it, and never forwards it again. A client that
// sends it only turns forwarding off for its request.
const ForwardedHeader = "X-LMLite-Forwarded-By"

// AckHeader asks the receiving gateway to answer "102 Processing" as soon as its
// handler takes the request (Ack), before the answer itself: the forwarding
// gateway's time to first byte (Options.FirstByte) then measures whether the node's
// handler is responsive, not how long a non-streamed generation takes.
const AckHeader = "X-LMLite-Ack"

// KeepAliveHeader tells the receiving gateway, on a forwarded request, how long its
// event stream may stay silent: it writes an SSE comment (": keep-alive") whenever
// it has written nothing for that long, so that the forwarding gateway's idle bound
// (Options.Idle) cuts a stalled process, not a generation that pauses (a queue, a
// long prefill, a model loading). The forwarding gateway sends a third of its bound,
// and drops the comments from what it relays.
const KeepAliveHeader = "X-LMLite-Keep-Alive"

// processing is the interim response AckHeader asks for.
var processing = []byte("HTTP/1.1 102 Processing\r\n\r\n")

// Ack answers 102 Processing to a request that asks for it (AckHeader).
func Ack(ctx *fasthttp.RequestCtx) {
	if string(ctx.Request.Header.Peek(AckHeader)) == "102" {
		ctx.Conn().Write(processing) // nothing of the answer is written yet; an error shows there
	}
}

// Forwarding's time limits. A node is lost when its registry announcement is gone
// (it stopped renewing: dead, hung, or cut off from Redis): every connection to it is
// closed then, which ends the requests waiting on it. watchEvery is how often a
// forward checks; a hung node is noticed within its announcement's TTL, plus a
// registry refresh, plus watchEvery.
//
// A node that keeps announcing but does not answer (its handler wedged, its listener
// accepting and never reading) is caught by the time to first byte instead:
// DefaultFirstByte unless Options.FirstByte says otherwise. Past it the request ends
// with 502 node_unresponsive and the node is passed over for unresponsiveHold. One
// that stops sending in the middle of an event stream is caught by the idle bound
// (DefaultIdle unless Options.Idle): the stream ends with a node_unresponsive error
// event, and the node is passed over the same way.
const (
	dialTimeout      = 2 * time.Second
	watchEvery       = 200 * time.Millisecond
	DefaultFirstByte = 10 * time.Second
	DefaultIdle      = 30 * time.Second
	unresponsiveHold = 30 * time.Second
)

// Options configure a Forwarder; the zero value of each field says its default.
type Options struct {
	Peers     Peers         // the registry (required)
	NodeID    string        // this process's id in the registry (sent in ForwardedHeader)
	FirstByte time.Duration // the longest wait for a forwarded request's first byte; 0: DefaultFirstByte
	Idle      time.Duration // the longest silence of a forwarded event stream once started; 0: DefaultIdle
	Now       func() time.Time
	Log       *slog.Logger // nil: nothing logged
	// Forwarded, when set, counts forwarded requests by node and the status the node
	// answered ("lost": lost with the request on it; "error": not reached).
	Forwarded *prometheus.CounterVec
}

// A Forwarder forwards requests to the nodes of a registry: one per server. Its
// methods are safe for concurrent use.
type Forwarder struct {
	peers     Peers
	nodeID    string
	firstByte time.Duration
	idle      time.Duration
	now       func() time.Time
	log       *slog.Logger
	forwarded *prometheus.CounterVec

	mu      sync.Mutex                        // guards clients, conns and suspect
	clients map[string]*fasthttp.HostClient   // by node address
	conns   map[string]map[*peerConn]struct{} // open connections, by node address
	suspect map[string]suspicion              // node id → why it is passed over
}

// New returns a Forwarder for o.
func New(o Options) *Forwarder {
	f := &Forwarder{peers: o.Peers, nodeID: o.NodeID, firstByte: o.FirstByte, idle: o.Idle, now: o.Now, log: o.Log, forwarded: o.Forwarded,
		clients: map[string]*fasthttp.HostClient{}}
	if f.firstByte <= 0 {
		f.firstByte = DefaultFirstByte
	}
	if f.idle <= 0 {
		f.idle = DefaultIdle
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	return f
}

// Nodes is the registry's last snapshot.
func (p *Forwarder) Nodes() []registry.Node { return p.peers.Nodes() }

// Count counts a request forwarded to node, by status (Options.Forwarded).
func (p *Forwarder) Count(node, status string) {
	if p.forwarded != nil {
		p.forwarded.WithLabelValues(node, status).Inc()
	}
}

// A Failure is what the client is told of a forward that failed: 502, a code
// (node_lost, node_unresponsive) and a message naming the node. The caller renders
// it in the client's API, as a server_error that may be retried (Retry-After: 1);
// the request is not sent again, since it may have run there.
type Failure struct {
	Code    string
	Message string
}

// NodeLost is the failure of a forwarded request whose node stopped answering with
// the request on it (announcementGone: its registry announcement is gone; else its
// connection broke).
func NodeLost(node string, announcementGone bool) *Failure {
	why := "its connection broke"
	if announcementGone {
		why = "its registry announcement expired"
	}
	return &Failure{Code: "node_lost",
		Message: "the process '" + node + "' serving this request stopped answering (" + why + "; it may have run there); retry"}
}

// Unresponsive is the failure of a request whose node sent nothing within the time
// to first byte.
func (p *Forwarder) Unresponsive(node string) *Failure {
	return &Failure{Code: "node_unresponsive",
		Message: "the process '" + node + "' serving this request sent nothing within " + p.firstByte.String() + " (it may run there); retry"}
}

// Stalled is the failure ending a forwarded event stream whose node sent nothing for
// the idle bound: node_unresponsive, as for a first byte that never came.
func (p *Forwarder) Stalled(node string) *Failure {
	return &Failure{Code: "node_unresponsive",
		Message: "the process '" + node + "' serving this request sent nothing for " + p.idle.String() +
			" in the middle of its answer (it may still run there); retry"}
}

// An Ender is the client's API as a relayed stream needs it: how a stream that
// broke ends (the forwarding gateway's codec for the request).
type Ender interface {
	// AppendBroken appends the events that end a stream that broke with f after
	// events whole events were relayed (an error event in the API's shape, and
	// whatever the API ends a stream with).
	AppendBroken(b []byte, events int, f *Failure) []byte
}

// Request is one request to forward.
type Request struct {
	ID     string        // the server's request id (for the log)
	Echo   string        // the X-Request-Id sent to the node (it keeps it as a client's id)
	Node   registry.Node // where to
	Stream bool          // an event stream answer is relayed as it comes (else read whole)
	End    Ender         // ends a relayed stream that breaks
	Done   func()        // called when the stream writer that took the request over ends
}

// watch checks every watchEvery, until stop is called, that node n is still
// present in a current snapshot; once it is not, it sets lost and cuts the
// connections to n.
func (p *Forwarder) watch(n registry.Node, lost *atomic.Bool) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if now := p.now(); !p.present(n.ID, now) && p.current(now) {
					lost.Store(true)
					p.cut(n.Addr)
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// ErrDraining is Forward's error for a node that answered 503 shutting_down; ErrLost
// for a node lost (its announcement gone) while the request was on it;
// ErrUnresponsive for a node that sent nothing within the time to first byte.
var (
	ErrDraining     = errors.New("forward: the node is draining")
	ErrLost         = errors.New("forward: the node was lost (its registry announcement expired) while the request was on it")
	ErrUnresponsive = errors.New("forward: the node sent nothing within the time to first byte")
)

// Forward sends the request as it came (method, path, headers, body) to r.Node and
// relays the answer: status, headers, and the body, an event stream chunk by chunk as
// it arrives. An error means the node was not reached, did not answer
// (ErrUnresponsive), is draining (ErrDraining), or was lost before it answered
// (ErrLost): nothing has been written. async is true when a stream writer took the
// request over (r.Done is called when it ends). A node lost during an event stream
// ends the stream with r.End's error event (relay).
func (p *Forwarder) Forward(ctx *fasthttp.RequestCtx, r Request) (async bool, err error) {
	n := r.Node
	hc, err := p.client(n.Addr)
	if err != nil {
		return false, err
	}
	req := fasthttp.AcquireRequest()
	ctx.Request.CopyTo(req)
	req.SetRequestURI(n.Addr + string(ctx.RequestURI()))
	req.Header.Set(ForwardedHeader, p.nodeID)
	req.Header.Set("X-Request-Id", r.Echo)
	req.Header.Set(AckHeader, "102")
	req.Header.Set(KeepAliveHeader, (p.idle / 3).String())
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	var lost atomic.Bool
	stop := p.watch(n, &lost)
	err = hc.DoTimeout(req, resp, p.firstByte)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		stop()
		fasthttp.ReleaseResponse(resp)
		switch {
		case lost.Load():
			return false, fmt.Errorf("%w: %v", ErrLost, err)
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout):
			return false, fmt.Errorf("%w (%s): %v", ErrUnresponsive, p.firstByte, err)
		}
		return false, fmt.Errorf("forward: %w", err)
	}
	status := resp.StatusCode()
	stream := r.Stream && bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
	var body []byte
	if !stream {
		body, err = io.ReadAll(resp.BodyStream())
		stop()
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			if lost.Load() {
				return false, fmt.Errorf("%w: %v", ErrLost, err)
			}
			return false, fmt.Errorf("forward: %w", err)
		}
	}
	if status == 503 && bytes.Contains(body, []byte(`"code":"shutting_down"`)) {
		// Draining: it has withdrawn, and this node's snapshot is older. Try another.
		fasthttp.ReleaseResponse(resp)
		return false, ErrDraining
	}
	p.Count(n.ID, strconv.Itoa(status))
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
	// The stream's body: at most p.idle between bytes (the node sends keep-alives).
	pc := p.conn(n.Addr, resp.LocalAddr())
	if pc != nil {
		pc.setIdle(p.idle)
	}
	stalled := func() bool { return pc != nil && pc.stall.Load() }
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			stop()
			if pc != nil {
				pc.setIdle(0)
			}
			fasthttp.ReleaseResponse(resp)
			if r.Done != nil {
				r.Done()
			}
		}()
		broke := relay(w, resp, r.End, func() *Failure {
			if stalled() && !lost.Load() {
				return p.Stalled(n.ID)
			}
			return NodeLost(n.ID, lost.Load())
		})
		if broke {
			k := Lost
			if stalled() && !lost.Load() {
				k = Unresponsive
			}
			p.log.Warn("forwarded stream lost", "request_id", r.ID, "node", n.ID, "announcement_gone", lost.Load(),
				"stalled", k == Unresponsive)
			p.Count(n.ID, "lost")
			p.Fail(n, k, p.now())
		}
	})
	return true, nil
}

// relay copies an event stream as it arrives, whole events only (the other node's
// keep-alive comments dropped), flushing after each read, until it ends or the
// client goes away (which closes the stream to the other node, and so cancels the
// generation there). A stream that breaks before its end (the node was lost,
// killed, stalled past the idle bound, or the connection cut) ends as an engine
// failure ends an embedded stream: end renders why's failure in the client's API.
// A stream ends when its last whole event is OpenAI's "data: [DONE]" or
// Anthropic's message_stop, or the Responses API's response.completed,
// response.incomplete or response.failed (which end it without [DONE]). It reports
// whether the stream broke.
func relay(bw *bufio.Writer, resp *fasthttp.Response, end Ender, why func() *Failure) (broke bool) {
	w := sse.NewWriter(bw)
	buf := make([]byte, 0, 16<<10)
	rd := resp.BodyStream()
	done := false // the last whole event ends the stream
	events := 0   // whole events relayed
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf)) // an event longer than the buffer
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if last := bytes.LastIndex(buf, []byte("\n\n")); last >= 0 {
			evs := dropComments(buf[:last+2])
			if len(evs) > 0 {
				done = ends(evs)
				events += bytes.Count(evs, []byte("\n\n"))
				if !w.Write(evs) {
					resp.CloseBodyStream()
					return false
				}
			}
			buf = buf[:copy(buf, buf[last+2:])]
		}
		if err != nil {
			if done && errors.Is(err, io.EOF) {
				return false
			}
			w.Write(end.AppendBroken(buf[:0], events, why()))
			return true
		}
	}
}

// streamEnds are the last events of a complete stream, in each API lmlite serves.
var streamEnds = [][]byte{
	[]byte("data: [DONE]\n\n"),
	[]byte("event: message_stop\n"),
	[]byte("event: response.completed\n"),
	[]byte("event: response.incomplete\n"),
	[]byte("event: response.failed\n"),
	[]byte("event: error\n"), // Anthropic's and Responses' error events end their streams
}

// ends reports whether the last of whole events evs ends a stream (streamEnds).
func ends(evs []byte) bool {
	last := evs[:len(evs)-2]
	if i := bytes.LastIndex(last, []byte("\n\n")); i >= 0 {
		last = evs[i+2:]
	} else {
		last = evs
	}
	for _, e := range streamEnds {
		if bytes.HasPrefix(last, e) {
			return true
		}
	}
	return false
}

// Kind is how a forward failed, as Classify sorts forward's errors.
type Kind int

const (
	Unreached    Kind = iota // not connected, or the connection refused or broke before the request was sent: try another node
	Draining                 // answered 503 shutting_down: try another node
	Lost                     // lost with the request on it: 502 node_lost
	Unresponsive             // nothing within the time to first byte: 502 node_unresponsive
)

// Classify sorts an error of forward.
func Classify(err error) Kind {
	switch {
	case errors.Is(err, ErrLost):
		return Lost
	case errors.Is(err, ErrDraining):
		return Draining
	case errors.Is(err, ErrUnresponsive):
		return Unresponsive
	}
	return Unreached
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

// Suspects is the nodes of the snapshot passed over at now (suspicion.skip); it
// forgets the suspicions of nodes no longer passed over or no longer announced.
func (p *Forwarder) Suspects(nodes []registry.Node, now time.Time) []string {
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

// Fail notes at now that a forward to n failed with f.
func (p *Forwarder) Fail(n registry.Node, f Kind, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.suspect == nil {
		p.suspect = map[string]suspicion{}
	}
	sp := suspicion{expires: n.Expires}
	if f == Unresponsive {
		sp.until = now.Add(unresponsiveHold)
	}
	p.suspect[n.ID] = sp
}

// client returns the connection pool to a node's address.
func (p *Forwarder) client(addr string) (*fasthttp.HostClient, error) {
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
	p     *Forwarder
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

func (p *Forwarder) track(addr string, c net.Conn) net.Conn {
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
func (p *Forwarder) conn(addr string, local net.Addr) *peerConn {
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
func (p *Forwarder) cut(addr string) {
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
func (p *Forwarder) current(now time.Time) bool {
	if c, ok := p.peers.(interface{ Current(time.Time) bool }); ok {
		return c.Current(now)
	}
	return true
}

// present reports whether node id's announcement is in the registry's snapshot and
// live (draining counts: it finishes what it has).
func (p *Forwarder) present(id string, now time.Time) bool {
	for _, n := range p.peers.Nodes() {
		if n.ID == id {
			return registry.Live(&n, now)
		}
	}
	return false
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
