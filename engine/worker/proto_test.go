package worker

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// FuzzFrames: frames written are read back the same, and any bytes read as frames
// end in an error or frames, never a panic; a token frame round-trips its id, text
// and the logit's bits.
func FuzzFrames(f *testing.F) {
	f.Add(byte(fToken), uint64(7), []byte("hello"), int32(42), uint32(0x3f800000))
	f.Add(byte(fEnd), uint64(0), []byte(`{"usage":{}}`), int32(-1), uint32(0x7fc00001))
	f.Fuzz(func(t *testing.T, typ byte, id uint64, payload []byte, tid int32, bits uint32) {
		var buf bytes.Buffer
		w := newWriter(&buf)
		tok := engine.Token{ID: tid, Text: string(payload), Logit: math.Float32frombits(bits)}
		if err := w.write(typ, id, payload); err != nil {
			t.Fatal(err)
		}
		if err := w.write(fToken, id+1, appendToken(nil, tok)); err != nil {
			t.Fatal(err)
		}
		raw := bytes.Clone(buf.Bytes())
		r := newReader(&buf)
		fr, err := r.next()
		if err != nil || fr.typ != typ || fr.id != id || !bytes.Equal(fr.payload, payload) {
			t.Fatalf("frame: %+v %v", fr, err)
		}
		fr, err = r.next()
		if err != nil || fr.typ != fToken || fr.id != id+1 {
			t.Fatalf("token frame: %+v %v", fr, err)
		}
		got, err := decodeToken(fr.payload)
		if err != nil || got.ID != tok.ID || got.Text != tok.Text || math.Float32bits(got.Logit) != bits {
			t.Fatalf("token %+v %v, want %+v", got, err, tok)
		}
		// Any prefix or corruption of the stream reads as frames or an error.
		r = newReader(bytes.NewReader(append(payload, raw...)))
		for range 4 {
			fr, err := r.next()
			if err != nil {
				break
			}
			if fr.typ == fToken {
				decodeToken(fr.payload)
			}
		}
	})
}

// TestErrorsCrossTheSocket: the engine's sentinel errors survive the encoding, so
// errors.Is works in the parent as in process; others keep their text.
func TestErrorsCrossTheSocket(t *testing.T) {
	for _, e := range []error{engine.ErrUnknownModel, engine.ErrQueueFull, engine.ErrTooLong, engine.ErrNoMemory, engine.ErrClosed, engine.ErrRestarting} {
		wrapped := errors.Join(errors.New("context"), e)
		got := decodeErr(encodeErr(wrapped))
		if !errors.Is(got, e) || got.Error() != wrapped.Error() {
			t.Errorf("%v: got %v", e, got)
		}
	}
	got := decodeErr(encodeErr(errors.New("engine: model m: broken")))
	if got == nil || got.Error() != "engine: model m: broken" || errors.Is(got, engine.ErrRestarting) {
		t.Errorf("other error: %v", got)
	}
	if decodeErr(encodeErr(nil)) != nil {
		t.Error("nil error crossed as non-nil")
	}
}

// TestEmbeddingsFrameRoundTrip: an embeddings frame gives back every float's bits
// (NaN and -0 included), and a truncated or padded frame is an error, not a panic.
func TestEmbeddingsFrameRoundTrip(t *testing.T) {
	e := engine.Embeddings{PromptTokens: 7, Vectors: [][]float32{{1, -0, float32(math.NaN()), 3.5e-30}, {}, {0.25}}}
	p := appendEmbeddings(nil, e)
	got, err := decodeEmbeddings(p)
	if err != nil || got.PromptTokens != 7 || len(got.Vectors) != 3 {
		t.Fatalf("decode: %+v %v", got, err)
	}
	for i, v := range e.Vectors {
		if len(got.Vectors[i]) != len(v) {
			t.Fatalf("vector %d: %d floats, want %d", i, len(got.Vectors[i]), len(v))
		}
		for j := range v {
			if math.Float32bits(got.Vectors[i][j]) != math.Float32bits(v[j]) {
				t.Errorf("vector %d float %d: %#x, want %#x", i, j, math.Float32bits(got.Vectors[i][j]), math.Float32bits(v[j]))
			}
		}
	}
	for n := range len(p) {
		if _, err := decodeEmbeddings(p[:n]); err == nil {
			t.Errorf("truncated to %d bytes: no error", n)
		}
	}
	if _, err := decodeEmbeddings(append(p, 0)); err == nil {
		t.Errorf("padded: no error")
	}
}

// gateWriter blocks its first Write until open is closed, and counts the Writes.
type gateWriter struct {
	open   chan struct{}
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	first := g.writes == 0
	g.writes++
	g.mu.Unlock()
	if first {
		<-g.open
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// TestWriterGroupCommit: frames written while another write is in progress cross in
// one later write (not one each), every frame intact and in each writer's order, and
// a write error fails every later write.
func TestWriterGroupCommit(t *testing.T) {
	g := &gateWriter{open: make(chan struct{})}
	w := newWriter(g)
	first := make(chan error)
	go func() { first <- w.write(fToken, 0, []byte("first")) }()
	for { // the first frame is being written (blocked in Write)
		g.mu.Lock()
		n := g.writes
		g.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	const writers, each = 8, 3
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if err := w.write(fToken, uint64(1+i*each+j), []byte{byte(i), byte(j)}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait() // each returned at once: the first writer will write their frames
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if g.writes != 2 {
		t.Errorf("%d writes for %d frames, want 2", g.writes, 1+writers*each)
	}
	r := newReader(&g.buf)
	next := make([]int, writers)
	for range 1 + writers*each {
		fr, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		if fr.id == 0 {
			continue
		}
		i, j := int(fr.payload[0]), int(fr.payload[1])
		if fr.id != uint64(1+i*each+j) || j != next[i] {
			t.Fatalf("frame %d: payload %v, want writer %d's frame %d", fr.id, fr.payload, i, next[i])
		}
		next[i]++
	}
	if _, err := r.next(); err == nil {
		t.Fatal("more frames than written")
	}

	bad := newWriter(failWriter{})
	if err := bad.write(fBeat, 0, nil); err == nil {
		t.Fatal("a failed write returned nil")
	}
	if err := bad.write(fBeat, 0, nil); err == nil {
		t.Fatal("a write after a failure returned nil")
	}
}

type failWriter struct{}

func (failWriter) Write(p []byte) (int, error) { return 0, errors.New("broken pipe") }

// syncBuffer is a bytes.Buffer safe for the writer's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestWriterQueue: frames queued (written by the writer's goroutine) and a frame
// written after them arrive in that order; after stop, queued frames are dropped.
func TestWriterQueue(t *testing.T) {
	var out syncBuffer
	w := newWriter(&out)
	for i := range 100 {
		w.queue(fToken, uint64(i), []byte{byte(i)})
	}
	if err := w.write(fEnd, 100, []byte("end")); err != nil {
		t.Fatal(err)
	}
	w.stop()
	w.queue(fToken, 101, nil) // dropped
	out.mu.Lock()
	r := newReader(bytes.NewReader(out.b.Bytes()))
	out.mu.Unlock()
	for i := range 101 {
		fr, err := r.next()
		if err != nil || fr.id != uint64(i) {
			t.Fatalf("frame %d: %+v %v", i, fr, err)
		}
	}
	if fr, err := r.next(); err == nil {
		t.Fatalf("a frame after the end: %+v", fr)
	}
}

// TestGrammarBudgetErrorCrossesTheSocket: a request a worker ended for its grammar
// budget is ErrGrammarBudget in the parent too (the gateway answers it 400), with
// the worker's message.
func TestGrammarBudgetErrorCrossesTheSocket(t *testing.T) {
	err := fmt.Errorf("%w: one token's mask takes more than 50 steps", engine.ErrGrammarBudget)
	back := decodeErr(encodeErr(err))
	if !errors.Is(back, engine.ErrGrammarBudget) || back.Error() != err.Error() {
		t.Errorf("decoded %v (%T), want ErrGrammarBudget with its message", back, back)
	}
}
