package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
)

func init() {
	register("bench", "measure prompt processing and generation speed (llama-bench protocol)", func(args []string) error {
		return cmdBench(args, os.Stdout)
	})
}

// benchResult is one bench run. pp_tok_s and tg_tok_s have the meaning and the keys of
// ../shared/peers/llamacpp/bench.sh, so the two can be compared line by line.
type benchResult struct {
	Model       string  `json:"model"`
	Threads     int     `json:"threads"`
	Parallel    int     `json:"parallel"`
	Prompt      int     `json:"prompt"`
	Gen         int     `json:"gen"`
	PPTokS      float64 `json:"pp_tok_s"`
	TGTokS      float64 `json:"tg_tok_s"`
	FileBytes   int64   `json:"file_bytes"`
	KVBytes     int64   `json:"kv_bytes"`
	PeakRSS     int64   `json:"peak_rss_bytes"`
	OverheadMiB float64 `json:"overhead_mib"` // peak RSS - file - KV
}

func cmdBench(args []string, stdout io.Writer) error {
	fs := newFlags("bench")
	path := fs.String("model", "", "GGUF model file (required)")
	threads := fs.Int("threads", 0, "threads; 0: all cores")
	ctxLen := fs.Int("ctx", 0, "context length; 0: prompt + gen + 16")
	nPrompt := fs.Int("prompt", 512, "random prompt tokens")
	nGen := fs.Int("gen", 128, "generated tokens")
	reps := fs.Int("reps", 3, "repetitions (the medians are reported)")
	parallel := fs.Int("parallel", 1, "concurrent sequences")
	asJSON := fs.Bool("json", false, "print one JSON line")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	membw := fs.Bool("membw", false, "measure the memory read bandwidth instead (no model needed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *threads <= 0 {
		*threads = runtime.NumCPU()
	}
	if *membw {
		bw := readBandwidth(*threads, 1<<30, max(*reps, 5))
		if *asJSON {
			return json.NewEncoder(stdout).Encode(map[string]any{"threads": *threads, "read_bytes_s": bw, "read_gib_s": bw / (1 << 30)})
		}
		fmt.Fprintf(stdout, "memory read bandwidth, %d threads: %.2f GiB/s\n", *threads, bw/(1<<30))
		return nil
	}
	if *path == "" {
		fs.Usage()
		return errUsage
	}
	if *nPrompt < 1 || *nGen < 1 || *reps < 1 {
		return fmt.Errorf("--prompt, --gen and --reps must be at least 1")
	}
	if *parallel != 1 {
		return fmt.Errorf("--parallel %d: batched decoding of several sequences comes with the batching runtime; only 1 is supported yet", *parallel)
	}
	runtime.GOMAXPROCS(*threads)
	if *ctxLen <= 0 {
		*ctxLen = *nPrompt + *nGen + 16
	}
	f, err := gguf.Open(*path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := model.Load(f)
	if err != nil {
		return err
	}
	cfg := m.Config()
	if *ctxLen < *nPrompt+*nGen {
		return fmt.Errorf("--ctx %d is less than --prompt %d + --gen %d", *ctxLen, *nPrompt, *nGen)
	}
	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	st := m.NewState(*ctxLen)
	pp := make([]float64, *reps)
	tg := make([]float64, *reps)
	seed := uint32(1234)
	prompt := make([]int32, *nPrompt)
	for r := range *reps {
		st.Truncate(0)
		// bench.c's prompt: tokens from the same LCG, in [3, vocab).
		for i := range prompt {
			seed = seed*1664525 + 1013904223
			prompt[i] = 3 + int32(seed%uint32(cfg.Vocab-3))
		}
		t0 := time.Now()
		if _, err := st.Forward(prompt, false); err != nil {
			return err
		}
		pp[r] = float64(*nPrompt) / time.Since(t0).Seconds()
		// Generation continues from the last prompt token, greedy, one token per step.
		next := prompt[len(prompt)-1]
		t0 = time.Now()
		for range *nGen {
			logits, err := st.Forward([]int32{next}, false)
			if err != nil {
				return err
			}
			next = int32(argmax(logits))
		}
		tg[r] = float64(*nGen) / time.Since(t0).Seconds()
	}
	res := benchResult{Model: filepath.Base(*path), Threads: *threads, Parallel: *parallel, Prompt: *nPrompt, Gen: *nGen,
		PPTokS: median(pp), TGTokS: median(tg), FileBytes: f.Size(),
		KVBytes: int64(2*cfg.Layers*cfg.KVHeads*cfg.HeadDim*2) * int64(*ctxLen), PeakRSS: peakRSS()}
	res.OverheadMiB = float64(res.PeakRSS-res.FileBytes-res.KVBytes) / (1 << 20)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s: threads %d, prompt %d, gen %d, reps %d\n  pp %.2f tok/s\n  tg %.2f tok/s\n  peak RSS %.1f MiB = file %.1f MiB + KV %.1f MiB + %.1f MiB\n",
		res.Model, res.Threads, res.Prompt, res.Gen, *reps, res.PPTokS, res.TGTokS,
		float64(res.PeakRSS)/(1<<20), float64(res.FileBytes)/(1<<20), float64(res.KVBytes)/(1<<20), res.OverheadMiB)
	return nil
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
