package worker

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/lmlite/lmlite/engine/api"
)

// Frame types. See doc.go for the protocol.
const (
	// parent → worker
	fSubmit  byte = 1 // JSON submitMsg
	fCancel  byte = 2 // empty
	fLoad    byte = 3 // JSON modelMsg
	fUnload  byte = 4 // JSON modelMsg
	fSubmitN byte = 5 // JSON submitMsg with N: n choices under ids id .. id+N-1 (Block.GenerateN)
	fEmbed   byte = 6 // JSON embedMsg (Block.Embed)
	fDevices byte = 7 // empty: report the devices (Block.Devices)
	// LoRA adapters (Block.LoadAdapter, UnloadAdapter, Adapters): fLoadAdapter and
	// fUnloadAdapter are a JSON modelMsg with Adapter, answered by an fReply;
	// fAdapters is empty, answered by an fAdapterList.
	fLoadAdapter   byte = 8
	fUnloadAdapter byte = 9
	fAdapters      byte = 10

	// worker → parent
	fHello       byte = 16 // JSON helloMsg, id 0, once
	fAccepted    byte = 17 // empty: the request is queued in the worker's Block
	fToken       byte = 18 // binary: int32 id, uint32 logit bits, UTF-8 text
	fEnd         byte = 19 // JSON endMsg: the request's usage or error; the last frame of an id
	fReply       byte = 20 // JSON endMsg (error only): the answer to fLoad or fUnload
	fBeat        byte = 21 // JSON []api.ModelStatus, id 0, every Beat
	fTokenJSON   byte = 22 // JSON api.Token: a token with logprobs (Request.Logprobs)
	fEmbedded    byte = 23 // binary api.Embeddings: the answer to fEmbed (an error is an fReply)
	fDeviceList  byte = 24 // JSON []api.DeviceStatus: the answer to fDevices (an error is an fReply)
	fAdapterList byte = 25 // JSON []api.AdapterStatus: the answer to fAdapters (an error is an fReply)
)

const (
	headerLen = 4 + 1 + 8 // payload length, type, request id
	maxFrame  = 64 << 20  // a prompt of 16M tokens; anything longer is a broken peer
)

type submitMsg struct {
	Model string      `json:"model"`
	Req   api.Request `json:"req"`
	N     int         `json:"n,omitempty"` // fSubmitN: the choices
}

type embedMsg struct {
	Model string           `json:"model"`
	Req   api.EmbedRequest `json:"req"`
}

type modelMsg struct {
	Model   string `json:"model"`
	Adapter string `json:"adapter,omitempty"` // fLoadAdapter, fUnloadAdapter: the model's adapter
}

type helloMsg struct {
	PID int `json:"pid"`
}

// endMsg ends a request (or answers a load/unload): the usage, or an error as a code
// that the parent maps back to the engine's sentinel errors and the message.
type endMsg struct {
	Usage api.Usage `json:"usage"`
	Code  string    `json:"code,omitempty"`
	Msg   string    `json:"msg,omitempty"`
}

// errCodes are the engine's errors that cross the socket as codes, so that errors.Is
// works in the parent as it does in process.
var errCodes = map[string]error{
	"unknown_model":   api.ErrUnknownModel,
	"queue_full":      api.ErrQueueFull,
	"too_long":        api.ErrTooLong,
	"no_memory":       api.ErrNoMemory,
	"closed":          api.ErrClosed,
	"restarting":      api.ErrRestarting,
	"grammar":         api.ErrGrammar,
	"grammar_budget":  api.ErrGrammarBudget,
	"no_embeddings":   api.ErrNoEmbeddings,
	"unknown_adapter": api.ErrUnknownAdapter,
	"adapter_busy":    api.ErrAdapterBusy,
}

func encodeErr(err error) (code, msg string) {
	if err == nil {
		return "", ""
	}
	for c, e := range errCodes {
		if errors.Is(err, e) {
			return c, err.Error()
		}
	}
	return "error", err.Error()
}

// remoteError is an error from the worker: its text, matching its engine sentinel.
type remoteError struct {
	msg string
	is  error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.is }

func decodeErr(code, msg string) error {
	if code == "" {
		return nil
	}
	return &remoteError{msg: msg, is: errCodes[code]}
}

// frame is one decoded frame. payload is only valid until the next read.
type frame struct {
	typ     byte
	id      uint64
	payload []byte
}

// reader reads frames from a stream.
type reader struct {
	r   *bufio.Reader
	buf []byte
}

func newReader(r io.Reader) *reader { return &reader{r: bufio.NewReaderSize(r, 64<<10)} }

func (r *reader) next() (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r.r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	if n > maxFrame {
		return frame{}, fmt.Errorf("worker: frame of %d bytes", n)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	p := r.buf[:n]
	if _, err := io.ReadFull(r.r, p); err != nil {
		return frame{}, err
	}
	return frame{typ: h[4], id: binary.BigEndian.Uint64(h[5:13]), payload: p}, nil
}

// writer writes frames; it is safe for concurrent use. A frame is written at once
// (tokens are latency), without waiting for others: the caller whose frame finds no
// write in progress writes it, and goes on writing whatever frames the other callers
// added meanwhile (group commit). A queued frame (queue) is written by the writer's
// own goroutine instead, so its caller never waits for a system call: the worker's
// decode loop queues a step's tokens, one for each sequence, and they cross in one
// write, with one wake-up of that goroutine.
type writer struct {
	w io.Writer

	mu      sync.Mutex    // guards below
	buf     []byte        // frames not yet written
	spare   []byte        // the buffer being written (swapped with buf)
	writing bool          // a caller is writing: it will write buf too
	err     error         // the first write error: every later write fails with it
	kick    chan struct{} // wakes the flusher goroutine of queued frames; nil until the first queue
	flushed chan struct{} // closed when the flusher goroutine has ended
	stopped bool          // stop was called: kick is closed
}

func newWriter(w io.Writer) *writer { return &writer{w: w} }

// appendLocked adds a frame to buf.
func (w *writer) appendLocked(typ byte, id uint64, payload []byte) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(payload)))
	w.buf = append(w.buf, typ)
	w.buf = binary.BigEndian.AppendUint64(w.buf, id)
	w.buf = append(w.buf, payload...)
}

// write queues a frame and, unless another caller is writing, writes the queue. Its
// error is the connection's first write error; a frame written by another caller may
// fail after write returned nil (the reader sees the connection end then).
func (w *writer) write(typ byte, id uint64, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.appendLocked(typ, id, payload)
	if !w.writing {
		w.drainLocked()
	}
	return w.err
}

// queue adds a frame for the writer's goroutine to write (started at the first
// queue, ended by stop). It never waits for a write.
func (w *writer) queue(typ byte, id uint64, payload []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.stopped {
		return
	}
	w.appendLocked(typ, id, payload)
	if w.kick == nil {
		w.kick, w.flushed = make(chan struct{}, 1), make(chan struct{})
		go w.flusher(w.kick, w.flushed)
	}
	if !w.writing {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// flusher writes the queued frames each time it is kicked, until stop.
func (w *writer) flusher(kick, flushed chan struct{}) {
	defer close(flushed)
	for range kick {
		w.mu.Lock()
		if !w.writing {
			w.drainLocked()
		}
		w.mu.Unlock()
	}
}

// stop ends the writer's goroutine, after it has written what was queued (unless
// the connection failed); frames queued after it are dropped.
func (w *writer) stop() {
	w.mu.Lock()
	flushed := w.flushed
	if !w.stopped && w.kick != nil {
		close(w.kick)
	}
	w.stopped = true
	w.mu.Unlock()
	if flushed != nil {
		<-flushed
	}
}

// drainLocked writes buf until it is empty (other callers may add to it meanwhile;
// the lock is released during each write).
func (w *writer) drainLocked() {
	w.writing = true
	for len(w.buf) > 0 && w.err == nil {
		b := w.buf
		w.buf, w.spare = w.spare[:0], nil
		w.mu.Unlock()
		_, err := w.w.Write(b)
		w.mu.Lock()
		if cap(b) <= 64<<10 { // keep a small buffer, drop a large one (a big embedding)
			w.spare = b[:0]
		}
		if err != nil {
			w.err = err
			if c, ok := w.w.(io.Closer); ok {
				c.Close() // the reader sees the end and fails the calls
			}
		}
	}
	w.writing = false
}

func (w *writer) writeJSON(typ byte, id uint64, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return w.write(typ, id, b)
}

// appendToken encodes a token frame's payload.
func appendToken(b []byte, t api.Token) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(t.ID))
	b = binary.BigEndian.AppendUint32(b, math.Float32bits(t.Logit))
	return append(b, t.Text...)
}

func decodeToken(p []byte) (api.Token, error) {
	if len(p) < 8 {
		return api.Token{}, fmt.Errorf("worker: token frame of %d bytes", len(p))
	}
	return api.Token{ID: int32(binary.BigEndian.Uint32(p[0:4])), Logit: math.Float32frombits(binary.BigEndian.Uint32(p[4:8])),
		Text: string(p[8:])}, nil
}

// appendEmbeddings encodes an embeddings frame's payload: uint32 prompt tokens,
// uint32 vectors, then each vector as uint32 length and its float32 bits (the same
// bits as in process).
func appendEmbeddings(b []byte, e api.Embeddings) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(e.PromptTokens))
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Vectors)))
	for _, v := range e.Vectors {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		for _, x := range v {
			b = binary.BigEndian.AppendUint32(b, math.Float32bits(x))
		}
	}
	return b
}

func decodeEmbeddings(p []byte) (api.Embeddings, error) {
	bad := fmt.Errorf("worker: an embeddings frame of %d bytes is corrupt", len(p))
	u32 := func() (uint32, bool) {
		if len(p) < 4 {
			return 0, false
		}
		v := binary.BigEndian.Uint32(p)
		p = p[4:]
		return v, true
	}
	tokens, ok1 := u32()
	n, ok2 := u32()
	if !ok1 || !ok2 || uint64(n)*4 > uint64(len(p)) {
		return api.Embeddings{}, bad
	}
	e := api.Embeddings{PromptTokens: int(tokens), Vectors: make([][]float32, n)}
	for i := range e.Vectors {
		d, ok := u32()
		if !ok || uint64(d)*4 > uint64(len(p)) {
			return api.Embeddings{}, bad
		}
		v := make([]float32, d)
		for j := range v {
			v[j] = math.Float32frombits(binary.BigEndian.Uint32(p[4*j:]))
		}
		p = p[4*d:]
		e.Vectors[i] = v
	}
	if len(p) != 0 {
		return api.Embeddings{}, bad
	}
	return e, nil
}
