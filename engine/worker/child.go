package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/lmlite/lmlite/engine/api"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/engine/parallel"
	"github.com/lmlite/lmlite/internal/rediscli"
)

// Backend is what a worker serves: the Block API of its models. *engine.Block
// satisfies it.
type Backend interface {
	Generate(ctx context.Context, modelID string, req api.Request) (*api.Stream, error)
	GenerateN(ctx context.Context, modelID string, req api.Request, n int) ([]*api.Stream, error)
	Embed(ctx context.Context, modelID string, req api.EmbedRequest) (api.Embeddings, error)
	Load(ctx context.Context, modelID string) error
	Unload(modelID string) error
	Models() []api.ModelStatus
	Devices(ctx context.Context) ([]api.DeviceStatus, error)
	LoadAdapter(ctx context.Context, modelID, id string) error
	UnloadAdapter(modelID, id string) error
	Adapters() []api.AdapterStatus
}

// Block is a worker's Block: the Backend it serves, closed when the worker exits
// (*engine.Block, from engine.New, satisfies it).
type Block interface {
	Backend
	Close() error
}

// NewBlock builds the worker's Block from its configuration: engine.New, which the
// program (cmd) passes to Main, so this package need not import the engine.
type NewBlock func(api.Config) (Block, error)

// socketFD is the worker's end of the socket pair: the first of exec.Cmd.ExtraFiles.
const socketFD = 3

// Main is `lmlite worker`: it serves the models given in its flags from an
// engine.Block over the socket on file descriptor 3 until the parent closes it. The
// parent (Pool) writes these arguments; they are not meant to be typed.
func Main(args []string, newBlock NewBlock) error { return mainWith(args, newBlock, nil) }

// mainWith is Main with the Backend wrapped (tests slow it down).
func mainWith(args []string, newBlock NewBlock, wrap func(Backend) Backend) error {
	fs := flag.NewFlagSet("lmlite worker", flag.ContinueOnError)
	models := fs.String("models", "", "the group's api.ModelConfig list, as JSON")
	budget := fs.Int64("memory-budget", 0, "bytes for the models (0: host memory)")
	beat := fs.Duration("beat", DefaultBeat, "heartbeat interval")
	leaseTTL := fs.Duration("lease-ttl", 0, "the memory leases' TTL (0: the engine's default)")
	redisPrefix := fs.String("redis-key-prefix", "", "with --redis-node: the lease store's key prefix")
	redisNode := fs.String("redis-node", "", "lease memory in Redis (URL in "+envRedisURL+") as this node")
	fs.String("group", "", "the worker group (for ps and the pid file)")
	fs.String("run-id", "", "the parent's run (GC matches stale workers by it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cfgs []api.ModelConfig
	if err := json.Unmarshal([]byte(*models), &cfgs); err != nil {
		return fmt.Errorf("worker: --models: %w", err)
	}
	f := os.NewFile(socketFD, "socket")
	if f == nil {
		return errors.New("worker: no socket on fd 3")
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("worker: fd 3: %w", err)
	}
	// The parent shares the cores: the matrix pool's waiting thread lets its threads
	// run in the wait rather than be preempted by them.
	parallel.SetYieldWaiting(true)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ecfg := api.Config{Models: cfgs, MemoryBudget: *budget, LeaseTTL: *leaseTTL, Logger: log}
	if *redisNode != "" {
		rc, err := rediscli.New(rediscli.Options{URL: os.Getenv(envRedisURL), Name: *redisNode})
		if err != nil {
			return fmt.Errorf("worker: redis: %w", err)
		}
		defer rc.Close()
		ecfg.Leases = lease.NewRedis(rc, *redisPrefix, *redisNode)
	}
	b, err := newBlock(ecfg)
	if err != nil {
		return err
	}
	var be Backend = b
	if wrap != nil {
		be = wrap(b)
	}
	// When Serve returns the parent is gone or asked us to stop: the process exits
	// without waiting for the Block, unless its leases are shared: then it gives them
	// back at once (another process may be waiting for the memory) rather than let
	// them expire, for a second at most.
	err = Serve(conn, be, *beat)
	if ecfg.Leases != nil {
		closed := make(chan struct{})
		go func() {
			b.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(time.Second):
		}
	}
	return err
}

// Serve serves b over conn: it says hello, then answers frames and beats every beat
// (the beat carries b.Models()) until conn closes or fails. It returns nil when the
// parent closed the connection.
func Serve(conn net.Conn, b Backend, beat time.Duration) error {
	defer conn.Close()
	w := newWriter(conn)
	defer w.stop()
	if err := w.writeJSON(fHello, 0, helloMsg{PID: os.Getpid()}); err != nil {
		return fmt.Errorf("worker: hello: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex // guards reqs
	reqs := map[uint64]context.CancelFunc{}

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { // the heartbeat, which also carries the models' status
		defer wg.Done()
		t := time.NewTicker(beat)
		defer t.Stop()
		var last []byte
		for {
			// Models() on every beat, so that a Block whose locks are stuck stops
			// beating; its status only when it changed (an idle worker's beats are
			// empty, and its parent has nothing to decode).
			st, err := json.Marshal(b.Models())
			if err != nil {
				conn.Close()
				return
			}
			payload := st
			if bytes.Equal(st, last) {
				payload = nil
			}
			last = st
			if w.write(fBeat, 0, payload) != nil {
				conn.Close()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	r := newReader(conn)
	for {
		fr, err := r.next()
		if err != nil {
			cancel()
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("worker: read: %w", err)
		}
		switch fr.typ {
		case fSubmit, fSubmitN:
			var m submitMsg
			if err := json.Unmarshal(fr.payload, &m); err != nil {
				return fmt.Errorf("worker: submit: %w", err)
			}
			rctx, rcancel := context.WithCancel(ctx)
			var sts []*api.Stream
			var err error
			if fr.typ == fSubmitN {
				sts, err = b.GenerateN(rctx, m.Model, m.Req, m.N)
			} else {
				var st *api.Stream
				st, err = b.Generate(rctx, m.Model, m.Req)
				sts = []*api.Stream{st}
			}
			if err != nil {
				rcancel()
				code, msg := encodeErr(err)
				w.writeJSON(fEnd, fr.id, endMsg{Code: code, Msg: msg})
				continue
			}
			mu.Lock()
			for i := range sts {
				reqs[fr.id+uint64(i)] = rcancel // the choices share their context, as in process
			}
			mu.Unlock()
			var left sync.WaitGroup
			for i, st := range sts {
				id := fr.id + uint64(i)
				w.write(fAccepted, id, nil)
				// The tokens are queued on the socket from the decode loop's
				// goroutine (no goroutine here is woken for each); the end follows
				// them on the same queue.
				var buf []byte
				st.Forward(func(t api.Token) {
					if t.Piece != "" || t.Logprob != 0 || t.TopLogprobs != nil || t.Prompt {
						if b, err := json.Marshal(t); err == nil {
							w.queue(fTokenJSON, id, b)
						}
						return
					}
					buf = appendToken(buf[:0], t)
					w.queue(fToken, id, buf)
				})
				left.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer left.Done()
					u, err := st.Wait(context.Background())
					mu.Lock()
					delete(reqs, id)
					mu.Unlock()
					code, msg := encodeErr(err)
					w.writeJSON(fEnd, id, endMsg{Usage: u, Code: code, Msg: msg})
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				left.Wait()
				rcancel()
			}()
		case fEmbed:
			var m embedMsg
			if err := json.Unmarshal(fr.payload, &m); err != nil {
				return fmt.Errorf("worker: embed: %w", err)
			}
			rctx, rcancel := context.WithCancel(ctx)
			mu.Lock()
			reqs[fr.id] = rcancel
			mu.Unlock()
			wg.Add(1)
			go func(id uint64) {
				defer wg.Done()
				e, err := b.Embed(rctx, m.Model, m.Req)
				mu.Lock()
				delete(reqs, id)
				mu.Unlock()
				rcancel()
				if err != nil {
					code, msg := encodeErr(err)
					w.writeJSON(fReply, id, endMsg{Code: code, Msg: msg})
					return
				}
				w.write(fEmbedded, id, appendEmbeddings(nil, e))
			}(fr.id)
		case fDevices:
			wg.Add(1)
			go func(id uint64) {
				defer wg.Done()
				ds, err := b.Devices(ctx)
				if err != nil {
					code, msg := encodeErr(err)
					w.writeJSON(fReply, id, endMsg{Code: code, Msg: msg})
					return
				}
				w.writeJSON(fDeviceList, id, ds)
			}(fr.id)
		case fCancel:
			mu.Lock()
			if c := reqs[fr.id]; c != nil {
				c()
			}
			mu.Unlock()
		case fLoad, fUnload:
			var m modelMsg
			if err := json.Unmarshal(fr.payload, &m); err != nil {
				return fmt.Errorf("worker: load: %w", err)
			}
			wg.Add(1)
			go func(typ byte, id uint64) {
				defer wg.Done()
				var err error
				if typ == fLoad {
					err = b.Load(ctx, m.Model)
				} else {
					err = b.Unload(m.Model)
				}
				code, msg := encodeErr(err)
				w.writeJSON(fReply, id, endMsg{Code: code, Msg: msg})
			}(fr.typ, fr.id)
		case fLoadAdapter, fUnloadAdapter:
			var m modelMsg
			if err := json.Unmarshal(fr.payload, &m); err != nil {
				return fmt.Errorf("worker: adapter: %w", err)
			}
			wg.Add(1)
			go func(typ byte, id uint64) {
				defer wg.Done()
				var err error
				if typ == fLoadAdapter {
					err = b.LoadAdapter(ctx, m.Model, m.Adapter)
				} else {
					err = b.UnloadAdapter(m.Model, m.Adapter)
				}
				code, msg := encodeErr(err)
				w.writeJSON(fReply, id, endMsg{Code: code, Msg: msg})
			}(fr.typ, fr.id)
		case fAdapters:
			w.writeJSON(fAdapterList, fr.id, b.Adapters())
		default:
			return fmt.Errorf("worker: unknown frame type %d", fr.typ)
		}
	}
}
