package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/internal/testenv"
)

// memoryReport is what the child process of TestThreeModelsMemory measured.
type memoryReport struct {
	Files, KV     int64 // bytes of the model files and of their KV pools
	PeakRSS       int64 // VmHWM after serving the three models at once
	LoadedRSS     int64 // VmRSS then
	UnloadedRSS   int64 // VmRSS after the idle unload
	ColdStartMs   float64
	TokensAfter   int
	StatesUnload  []ModelState
	StatesAfter   []ModelState
	MemoryAfterUn int64 // MemoryBytes summed after the unload
}

// TestThreeModelsMemory: three models served at once (two generated 125m files and
// stories260K) take no more memory than their files, their KV pools and 64 MiB; the
// idle unload gives the memory back; the next request reloads its model and reports
// the cold start. It measures a child process (this test binary, re-run), so that
// nothing else of the test run is in its RSS. The race detector's shadow memory
// inflates RSS several times, so under it the test skips: make test runs it in a
// second pass without the race detector.
func TestThreeModelsMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if raceEnabled {
		t.Skip("RSS under the race detector means nothing; make test runs this test without it")
	}
	stories := testenv.SharedFile(t, "models/stories260K.gguf")
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf"), stories}
	for i, p := range paths[:2] {
		if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "125m", Type: "q4_0", Seed: uint64(i + 1)}, p); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$", "-test.v")
	cmd.Env = append(os.Environ(), "LMLITE_MEMORY_CHILD="+strings.Join(paths, string(os.PathListSeparator)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var rep memoryReport
	for _, line := range strings.Split(string(out), "\n") {
		if after, ok := strings.CutPrefix(strings.TrimSpace(line), "REPORT "); ok {
			if err := json.Unmarshal([]byte(after), &rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rep.Files == 0 {
		t.Fatalf("no report from the child:\n%s", out)
	}
	const mib = 1 << 20
	over := float64(rep.PeakRSS-rep.Files-rep.KV) / mib
	t.Logf("files %.1f MiB, KV pools %.1f MiB, peak RSS %.1f MiB (%.1f MiB over files + KV), RSS loaded %.1f MiB, after idle unload %.1f MiB, cold start %.1f ms",
		float64(rep.Files)/mib, float64(rep.KV)/mib, float64(rep.PeakRSS)/mib, over, float64(rep.LoadedRSS)/mib, float64(rep.UnloadedRSS)/mib, rep.ColdStartMs)
	if over > 64 {
		t.Errorf("peak RSS is %.1f MiB over the files and KV pools, want at most 64", over)
	}
	for _, s := range rep.StatesUnload {
		if s != StateUnloaded {
			t.Errorf("states after the idle unload %v", rep.StatesUnload)
		}
	}
	if rep.MemoryAfterUn != 0 {
		t.Errorf("models report %d bytes after unloading", rep.MemoryAfterUn)
	}
	// The two 125m files were read whole while loaded; their pages must be gone.
	if drop := rep.LoadedRSS - rep.UnloadedRSS; drop < rep.Files*3/4 {
		t.Errorf("the idle unload gave back %.1f MiB of RSS, want at least 3/4 of the files' %.1f MiB", float64(drop)/mib, float64(rep.Files)/mib)
	}
	if rep.TokensAfter != 8 || rep.ColdStartMs <= 0 {
		t.Errorf("after the unload: %d tokens, cold start %.2f ms", rep.TokensAfter, rep.ColdStartMs)
	}
}

// TestMemoryChild is TestThreeModelsMemory's measured process.
func TestMemoryChild(t *testing.T) {
	env := os.Getenv("LMLITE_MEMORY_CHILD")
	if env == "" {
		t.Skip("run by TestThreeModelsMemory")
	}
	paths := strings.Split(env, string(os.PathListSeparator))
	var mcs []ModelConfig
	var rep memoryReport
	for i, p := range paths {
		mcs = append(mcs, ModelConfig{ID: fmt.Sprint("m", i), Path: p, MaxModelLen: 256, MaxModelConcurrency: 4, IdleTimeout: time.Hour})
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		rep.Files += fi.Size()
	}
	clk := newTestClock()
	b, err := New(Config{Models: mcs, Logger: quietLog(), Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	run := func(id string, seed int, n int) (int, Usage) {
		prompt := make([]int32, 64)
		for i := range prompt {
			prompt[i] = int32(1 + (seed*37+i*11)%200)
		}
		s, err := b.Generate(ctx, id, Request{Prompt: prompt, MaxTokens: n})
		if err != nil {
			t.Error(err)
			return 0, Usage{}
		}
		got := 0
		for tok := range s.Tokens {
			if tok.ID >= 0 {
				got++
			}
		}
		u, err := s.Wait(ctx)
		if err != nil {
			t.Error(err)
		}
		return got, u
	}
	// Every model serves 4 requests at once (a full batch), all three at the same time.
	var wg sync.WaitGroup
	for _, mc := range mcs {
		for k := range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); run(mc.ID, k, 32) }()
		}
	}
	wg.Wait()
	for _, st := range b.Models() {
		rep.KV += st.MemoryBytes
	}
	rep.KV -= rep.Files
	rep.PeakRSS, rep.LoadedRSS = procStatus(t, "VmHWM"), procStatus(t, "VmRSS")

	clk.Add(2 * time.Hour)
	b.sweep()
	runtime.GC()
	debug.FreeOSMemory()
	rep.UnloadedRSS = procStatus(t, "VmRSS")
	for _, st := range b.Models() {
		rep.StatesUnload = append(rep.StatesUnload, st.State)
		rep.MemoryAfterUn += st.MemoryBytes
	}
	n, u := run("m0", 99, 8)
	rep.TokensAfter, rep.ColdStartMs = n, float64(u.ColdStart)/float64(time.Millisecond)
	out, _ := json.Marshal(rep)
	fmt.Printf("REPORT %s\n", out)
}

// procStatus reads a "kB" field of /proc/self/status in bytes.
func procStatus(t *testing.T, field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
