package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/api"
	"github.com/lmlite/lmlite/engine/genmodel"
)

// The tests run real worker processes: the test binary re-executed as `worker`
// (TestMain below), serving generated tiny models.

const (
	envWorker        = "LMLITE_TEST_WORKER"        // "1": run as a worker
	envCrashAtLoad   = "LMLITE_TEST_CRASH_AT_LOAD" // "1": the worker dies before serving, with a line on stderr
	envSlow          = "LMLITE_TEST_SLOW_TOKENS"   // a duration: the worker delays every token by it
	envParent        = "LMLITE_TEST_PARENT"        // a model path: run as a parent that prints its worker's pid, then waits
	envParentDataDir = "LMLITE_TEST_PARENT_DATADIR"
	envCUDAOut       = "LMLITE_TEST_CUDA_OUT" // a file: the worker writes its CUDA_VISIBLE_DEVICES there first
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) == "1" && len(os.Args) > 1 && os.Args[1] == "worker" {
		if f := os.Getenv(envCUDAOut); f != "" {
			v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES")
			os.WriteFile(f, []byte(fmt.Sprintf("%v %s", ok, v)), 0o644)
		}
		if os.Getenv(envCrashAtLoad) == "1" {
			fmt.Fprintln(os.Stderr, "test worker: simulated crash at load")
			os.Exit(3)
		}
		var wrap func(Backend) Backend
		if d, err := time.ParseDuration(os.Getenv(envSlow)); err == nil {
			wrap = func(b Backend) Backend { return slowBackend{b, d} }
		}
		if err := mainWith(os.Args[2:], newEngineBlock, wrap); err != nil {
			fmt.Fprintln(os.Stderr, "test worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv(envParent); path != "" {
		runTestParent(path)
		return
	}
	os.Exit(m.Run())
}

// runTestParent is the parent process of TestKillParentLeavesNoWorker: it starts a
// Pool, prints its worker's pid when the model is ready, and waits to be killed.
func runTestParent(path string) {
	p, err := New(Config{OpenPrep: openEnginePrep, Models: []engine.ModelConfig{{ID: "a", Path: path, MaxModelLen: 256}},
		Command: testCommand(), DataDir: os.Getenv(envParentDataDir), Logger: quiet()})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for !p.Ready() || p.Models()[0].State != engine.StateReady {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("worker", p.Workers()[0].PID)
	select {}
}

// slowBackend delays every token of its streams.
type slowBackend struct {
	Backend
	d time.Duration
}

func (s slowBackend) Generate(ctx context.Context, id string, req engine.Request) (*engine.Stream, error) {
	st, err := s.Backend.Generate(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return s.slow(st), nil
}

func (s slowBackend) GenerateN(ctx context.Context, id string, req engine.Request, n int) ([]*engine.Stream, error) {
	sts, err := s.Backend.GenerateN(ctx, id, req, n)
	if err != nil {
		return nil, err
	}
	for i, st := range sts {
		sts[i] = s.slow(st)
	}
	return sts, nil
}

func (s slowBackend) slow(st *engine.Stream) *engine.Stream {
	out := engine.NewStream()
	go func() {
		for t := range st.Tokens {
			time.Sleep(s.d)
			out.Send(t)
		}
		out.Finish(st.Wait(context.Background()))
	}()
	return out
}

// testCommand runs the test binary as a worker, with extra environment.
func testCommand(env ...string) func(args []string) *exec.Cmd {
	return func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], append([]string{"worker"}, args...)...)
		cmd.Env = append(append(os.Environ(), envWorker+"=1"), env...)
		return cmd
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var modelDir string

// tinyModel generates (once per test binary) a tiny seeded model.
func tinyModel(t *testing.T, name string, opts genmodel.Options) string {
	t.Helper()
	if modelDir == "" {
		d, err := os.MkdirTemp("", "lmlite-worker-test")
		if err != nil {
			t.Fatal(err)
		}
		modelDir = d
	}
	path := filepath.Join(modelDir, name+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if opts.Preset == "" {
		opts.Preset = "tiny"
	}
	if err := genmodel.Generate(opts, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func llamaModel(t *testing.T) string {
	return tinyModel(t, "llama", genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 7})
}

func qwenModel(t *testing.T) string {
	return tinyModel(t, "qwen3", genmodel.Options{Arch: "qwen3", Type: "q4_k_m", Seed: 8})
}

// newEngineBlock and openEnginePrep are engine.New and engine.OpenPrep as the
// package takes them (cmd/lmlite passes the same).
func newEngineBlock(cfg api.Config) (Block, error) {
	b, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func openEnginePrep(mc api.ModelConfig) (Prep, error) {
	p, err := engine.OpenPrep(mc)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newPool starts a Pool and waits (bounded) until every model is ready.
func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	if cfg.OpenPrep == nil {
		cfg.OpenPrep = openEnginePrep
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	waitFor(t, 20*time.Second, "every model ready", func() bool { return allReady(p) })
	return p
}

func allReady(p *Pool) bool {
	for _, st := range p.Models() {
		if st.State != engine.StateReady {
			return false
		}
	}
	return true
}

func state(p *Pool, id string) engine.ModelStatus {
	for _, st := range p.Models() {
		if st.ID == id {
			return st
		}
	}
	return engine.ModelStatus{}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > d {
			t.Fatalf("not %s after %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func workerPID(t *testing.T, p *Pool, group string) int {
	t.Helper()
	for _, w := range p.Workers() {
		if w.Group == group && w.PID > 0 {
			return w.PID
		}
	}
	t.Fatalf("group %s has no worker", group)
	return 0
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
