package main

import (
	"bufio"
	"context"
	"io"

	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func init() {
	register("run", "generate a continuation of a prompt with a GGUF model", func(args []string) error { return cmdRun(args, os.Stdout) })
}

// cmdRun streams the continuation to stdout as it is generated.
func cmdRun(args []string, stdout io.Writer) error {
	fs := newFlags("run")
	path := fs.String("model", "", "GGUF model file (required)")
	prompt := fs.String("prompt", "", "prompt text, taken literally (empty: start from BOS)")
	chatMode := fs.Bool("chat", false, "wrap the prompt as a user message in the model's chat template")
	maxTokens := fs.Int("max-tokens", 128, "tokens to generate at most")
	ctxLen := fs.Int("ctx", 0, "context length (prompt + output); 0: the model's")
	temp := fs.Float64("temperature", 0.8, "sampling temperature; 0: greedy")
	topK := fs.Int("top-k", 40, "top-k; 0: off")
	topP := fs.Float64("top-p", 0.95, "top-p; 1: off")
	minP := fs.Float64("min-p", 0.05, "min-p; 0: off")
	repeat := fs.Float64("repeat-penalty", 1.0, "repetition penalty; 1: off")
	seed := fs.Int64("seed", -1, "random seed; -1: from the clock")
	threads := fs.Int("threads", 0, "threads; 0: all cores")
	ids := fs.Bool("ids", false, "print the generated token ids instead of text")
	var stops stringList
	fs.Var(&stops, "stop", "stop string (repeatable); the output ends before it")
	var loras loraFlag
	fs.Var(&loras, "lora", loraUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		fs.Usage()
		return errUsage
	}
	if *threads > 0 {
		runtime.GOMAXPROCS(*threads)
	}
	if *seed < 0 {
		*seed = time.Now().UnixNano() & (1<<62 - 1)
	}
	adapters, adapterIDs := loras.engine()
	block, err := engine.New(engine.Config{Models: []engine.ModelConfig{{
		ID: "m", Path: *path, MaxModelLen: *ctxLen, Replicas: 1, IdleTimeout: -1, Adapters: adapters,
	}}, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer block.Close()
	tok, _ := block.Tokenizer("m")
	var toks []int32
	if *chatMode { // the prompt is plain text inside the template's markup
		if toks, err = block.ChatTokens("m", []engine.Message{{Role: "user", Content: *prompt}}); err != nil {
			return err
		}
	} else {
		toks = tok.Encode(*prompt, tok.AddBOS(), false)
	}
	if len(toks) == 0 {
		toks = []int32{tok.BOS()}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	st, err := block.Generate(ctx, "m", engine.Request{
		Prompt: toks, MaxTokens: *maxTokens, Stop: stops, Adapters: adapterIDs,
		Sampling: engine.Sampling{Temperature: float32(*temp), TopK: *topK, TopP: float32(*topP), MinP: float32(*minP),
			RepeatPenalty: float32(*repeat), Seed: uint64(*seed)},
	})
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	n := 0
	for t := range st.Tokens {
		if *ids {
			if t.ID >= 0 {
				if n > 0 {
					out.WriteByte(' ')
				}
				out.WriteString(strconv.Itoa(int(t.ID)))
				n++
			}
			continue
		}
		out.WriteString(t.Text)
		out.Flush()
	}
	out.WriteByte('\n')
	out.Flush()
	if _, err := st.Wait(context.Background()); err != nil {
		return err
	}
	return nil
}
