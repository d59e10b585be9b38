package model

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
)

// BenchmarkFile measures the two phases of `lmlite bench` separately on the model
// file named by LMLITE_BENCH_MODEL (skipped when unset): pp512 is a 512-token
// prompt as one batch (LMLITE_BENCH_PROMPT=N: N tokens, named ppN), tg one decoded
// token after that prompt (the cache is
// truncated back after each, so every step sees the same context). Threads follow
// -cpu (GOMAXPROCS). LMLITE_BENCH_CPUPROFILE=prefix writes a CPU profile of each
// phase's timed loop alone to prefix-pp512.prof and prefix-tg.prof (-cpuprofile
// would mix in tg's prefill). Besides the time, each phase reports the process's CPU
// time (user + system) per op, cpu-ms/op: on a shared machine the wall time mostly
// measures the other jobs, the CPU time what the step costs (spinning workers
// included). LMLITE_BENCH_PACK=0 loads the Q4_K matrices plain (PackQ4K).
func BenchmarkFile(b *testing.B) {
	path := os.Getenv("LMLITE_BENCH_MODEL")
	if path == "" {
		b.Skip("LMLITE_BENCH_MODEL not set")
	}
	defer benchPack()()
	m, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	np := benchEnvInt(b, "LMLITE_BENCH_PROMPT", 512)
	prompt := make([]int32, np)
	seed := uint32(1234)
	for i := range prompt {
		seed = seed*1664525 + 1013904223
		prompt[i] = 3 + int32(seed%uint32(m.Config().Vocab-3))
	}
	st := m.NewState(len(prompt) + 16)
	profile := func(b *testing.B, phase string) func() {
		prefix := os.Getenv("LMLITE_BENCH_CPUPROFILE")
		if prefix == "" {
			return func() {}
		}
		f, err := os.Create(prefix + "-" + phase + ".prof")
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		return func() { pprof.StopCPUProfile(); f.Close() }
	}
	pp := fmt.Sprintf("pp%d", np)
	b.Run(pp, func(b *testing.B) {
		defer profile(b, pp)()
		defer cpuPerOp(b)()
		for b.Loop() {
			st.Truncate(0)
			if _, err := st.Forward(prompt, false); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(prompt)*b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run("tg", func(b *testing.B) {
		st.Truncate(0)
		if _, err := st.Forward(prompt, false); err != nil {
			b.Fatal(err)
		}
		defer profile(b, "tg")()
		defer cpuPerOp(b)()
		for b.Loop() {
			st.Truncate(len(prompt))
			if _, err := st.Forward(prompt[:1], false); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
}

// cpuPerOp starts counting the process's CPU time; the returned func reports it per
// op of b.
func cpuPerOp(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		}
	}
}

// benchEnvInt reads the positive number in the environment variable name, def when
// it is unset; anything else fails the benchmark.
func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
