package worker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lmlite/lmlite/engine/api"
)

// process is one running worker: the child, its socket, and the calls in flight on it.
type process struct {
	g     *group
	cmd   *exec.Cmd
	conn  net.Conn
	w     *writer
	start time.Time

	lastBeat atomic.Int64                               // unix nanoseconds of the last heartbeat
	status   atomic.Pointer[map[string]api.ModelStatus] // from the last heartbeat
	stopping atomic.Bool                                // the parent asked it to exit: its end is no crash
	hung     atomic.Pointer[string]                     // why the janitor killed it, if it did
	late     atomic.Bool                                // no heartbeat for HangAfter (the janitor's actLate), none since

	mu    sync.Mutex // guards calls, next, dead
	calls map[uint64]*call
	next  uint64
	dead  error // set when the connection ended: new calls fail with it
}

// call is one request (or load/unload) on a worker.
type call struct {
	accepted bool                // guarded by process.mu
	answer   chan error          // buffered 1: the submit's acceptance (nil) or its error; a load's reply
	box      mailbox             // the request's end
	emb      api.Embeddings      // an embed's answer, set before answer gets nil
	devs     []api.DeviceStatus  // a devices call's answer, set before answer gets nil
	adapters []api.AdapterStatus // an adapters call's answer, set before answer gets nil
	// out receives a submit's tokens straight from the reader (Stream.Send never
	// blocks, so a slow client never stalls the reader), until muted: its context
	// was cancelled, and the tokens the worker still sends are dropped.
	out   *api.Stream
	muted atomic.Bool
}

// spawn starts a worker for g with the socket pair on its fd 3 and its stderr read
// into g's ring. The process's reader, exit waiter and stderr reader run until it ends;
// onHello and onExit report to g.
func spawn(g *group, args []string) (*process, error) {
	fds, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("worker: socketpair: %w", err)
	}
	parent, child := os.NewFile(uintptr(fds[0]), "worker-parent"), os.NewFile(uintptr(fds[1]), "worker-child")
	conn, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		child.Close()
		return nil, fmt.Errorf("worker: socket: %w", err)
	}
	cmd := g.p.command(args)
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	if cmd.Env, err = cudaEnv(env, g.cfgs, g.p.cfg.Devices); err != nil { // New checked the devices
		child.Close()
		conn.Close()
		return nil, err
	}
	if r := g.p.cfg.Redis; r != nil {
		cmd.Env = append(cmd.Env, envRedisURL+"="+r.URL)
	}
	cmd.ExtraFiles = []*os.File{child}
	setDeathSignal(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		child.Close()
		conn.Close()
		return nil, fmt.Errorf("worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		child.Close()
		conn.Close()
		return nil, fmt.Errorf("worker: start: %w", err)
	}
	child.Close()
	p := &process{g: g, cmd: cmd, conn: conn, w: newWriter(conn), start: time.Now(), calls: map[uint64]*call{}}
	p.lastBeat.Store(p.start.UnixNano())
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 4096), 1<<20)
		for sc.Scan() {
			g.stderr.add(sc.Text())
			g.log.Warn("worker stderr", "pid", cmd.Process.Pid, "line", sc.Text())
		}
		io.Copy(io.Discard, stderr)
	}()
	go p.read()
	go func() {
		<-stderrDone
		err := cmd.Wait()
		p.conn.Close()
		g.onExit(p, err) // the state first, as in read
		p.failCalls(fmt.Errorf("%w: worker of %s ended (%s)", api.ErrRestarting, g.name, exitText(err)))
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exitText says how a worker ended.
func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit status 0"
}

// read dispatches the worker's frames until the connection ends.
func (p *process) read() {
	r := newReader(p.conn)
	for {
		fr, err := r.next()
		if err != nil {
			p.conn.Close()
			// Not ready first, then the calls fail: a caller that sees its request end
			// with ErrRestarting also sees the model not ready.
			p.g.onLost(p)
			p.failCalls(fmt.Errorf("%w: lost the worker of %s: %v", api.ErrRestarting, p.g.name, err))
			return
		}
		switch fr.typ {
		case fHello:
			p.lastBeat.Store(time.Now().UnixNano())
			p.g.onHello(p)
		case fBeat:
			// An empty beat: alive, and the status has not changed since the last.
			var sts []api.ModelStatus
			if len(fr.payload) > 0 && json.Unmarshal(fr.payload, &sts) == nil {
				m := make(map[string]api.ModelStatus, len(sts))
				for _, s := range sts {
					m[s.ID] = s
				}
				p.status.Store(&m)
			}
			p.lastBeat.Store(time.Now().UnixNano())
			if p.late.Load() {
				p.g.p.wake() // ready again: the janitor looks now (actBack)
			}
		case fAccepted:
			p.mu.Lock()
			if c := p.calls[fr.id]; c != nil {
				c.accepted = true
				c.answer <- nil
			}
			p.mu.Unlock()
		case fToken, fTokenJSON:
			var t api.Token
			var err error
			if fr.typ == fToken {
				t, err = decodeToken(fr.payload)
			} else {
				err = json.Unmarshal(fr.payload, &t)
			}
			if err != nil {
				p.conn.Close()
				continue
			}
			p.mu.Lock()
			c := p.calls[fr.id]
			p.mu.Unlock()
			if c != nil && c.out != nil && !c.muted.Load() {
				c.out.Send(t)
			}
		case fEmbedded:
			e, err := decodeEmbeddings(fr.payload)
			if err != nil {
				p.conn.Close()
				continue
			}
			p.reply(fr.id, func(c *call) { c.emb = e })
		case fDeviceList:
			var ds []api.DeviceStatus
			if err := json.Unmarshal(fr.payload, &ds); err != nil {
				p.conn.Close()
				continue
			}
			p.reply(fr.id, func(c *call) { c.devs = ds })
		case fAdapterList:
			var as []api.AdapterStatus
			if err := json.Unmarshal(fr.payload, &as); err != nil {
				p.conn.Close()
				continue
			}
			p.reply(fr.id, func(c *call) { c.adapters = as })
		case fEnd, fReply:
			var m endMsg
			if err := json.Unmarshal(fr.payload, &m); err != nil {
				p.conn.Close()
				continue
			}
			err := decodeErr(m.Code, m.Msg)
			p.mu.Lock()
			c := p.calls[fr.id]
			delete(p.calls, fr.id)
			if c != nil && c.accepted {
				c.box.finish(m.Usage, err)
			} else if c != nil {
				c.answer <- err
			}
			p.mu.Unlock()
		}
	}
}

// reply ends call id with a one-frame answer: set fills it in, unless the call is
// gone or was accepted as a stream.
func (p *process) reply(id uint64, set func(*call)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[id]
	delete(p.calls, id)
	if c != nil && !c.accepted {
		set(c)
		c.answer <- nil
	}
}

// failCalls ends every call in flight with err and refuses new ones.
func (p *process) failCalls(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead == nil {
		p.dead = err
	}
	for id, c := range p.calls {
		if c.accepted {
			c.box.finish(api.Usage{}, err)
		} else {
			c.answer <- err
		}
		delete(p.calls, id)
	}
}

// begin registers a call and sends its frame; a submit's tokens go to out.
func (p *process) begin(typ byte, v any, out *api.Stream) (*call, uint64, error) {
	c := &call{answer: make(chan error, 1), box: newMailbox(), out: out}
	p.mu.Lock()
	if p.dead != nil {
		p.mu.Unlock()
		return nil, 0, p.dead
	}
	p.next++
	id := p.next
	p.calls[id] = c
	p.mu.Unlock()
	if err := p.w.writeJSON(typ, id, v); err != nil {
		p.conn.Close() // the reader fails the calls
	}
	return c, id, nil
}

// beginN registers n calls under consecutive ids and sends one frame under the first;
// call i's tokens go to outs[i].
func (p *process) beginN(typ byte, v any, outs []*api.Stream) ([]*call, []uint64, error) {
	n := len(outs)
	cs, ids := make([]*call, n), make([]uint64, n)
	p.mu.Lock()
	if p.dead != nil {
		p.mu.Unlock()
		return nil, nil, p.dead
	}
	for i := range n {
		p.next++
		cs[i], ids[i] = &call{answer: make(chan error, 1), box: newMailbox(), out: outs[i]}, p.next
		p.calls[p.next] = cs[i]
	}
	p.mu.Unlock()
	if err := p.w.writeJSON(typ, ids[0], v); err != nil {
		p.conn.Close() // the reader fails the calls
	}
	return cs, ids, nil
}

// drop forgets calls that the worker will not answer (the choices of a refused submit-n).
func (p *process) drop(ids []uint64) {
	p.mu.Lock()
	for _, id := range ids {
		delete(p.calls, id)
	}
	p.mu.Unlock()
}

func (p *process) cancel(id uint64) { p.w.write(fCancel, id, nil) }

// kill ends the worker at once (SIGKILL also ends a stopped process).
func (p *process) kill() { p.cmd.Process.Signal(syscall.SIGKILL) }

// mailbox holds a call's end until its forwarder takes it.
type mailbox struct {
	mu   sync.Mutex // guards below
	done bool
	u    api.Usage
	err  error
	wake chan struct{} // closed by finish
}

func newMailbox() mailbox { return mailbox{wake: make(chan struct{})} }

// finish records the end (the first one wins).
func (m *mailbox) finish(u api.Usage, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done {
		m.done, m.u, m.err = true, u, err
		close(m.wake)
	}
}

func (m *mailbox) end() (api.Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.u, m.err
}

// ring keeps the last lines of a worker group's stderr.
type ring struct {
	mu  sync.Mutex // guards buf
	buf []string
	max int
}

func (r *ring) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	r.buf = append(r.buf, s)
	if len(r.buf) > r.max {
		r.buf = append(r.buf[:0], r.buf[len(r.buf)-r.max:]...)
	}
}

func (r *ring) tail() string { return strings.Join(r.lines(), "\n") }

// lines returns a copy of the lines kept.
func (r *ring) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.buf)
}
