package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/lmlite/lmlite/engine/genmodel"
)

func init() {
	register("gen-model", "write a GGUF model with seeded random weights", func(args []string) error {
		fs := newFlags("gen-model")
		var o genmodel.Options
		var out, chatTemplate string
		fs.StringVar(&o.Arch, "arch", "llama", "architecture: llama, qwen2, qwen3, phi3, or a mixture of experts: mixtral, qwen2moe, qwen3moe, olmoe")
		fs.StringVar(&o.Preset, "preset", "tiny", "shape: tiny (dim 256, 2 layers), 125m (dim 768, 12 layers) or 1b (Llama-3.2-1B shape; for a mixture of experts, 16 experts of which 4 are used, about 0.9B parameters of which 0.3B are active)")
		fs.StringVar(&o.Type, "type", "q8_0", "tensor type or llama.cpp mix: "+strings.Join(genmodel.TypeNames(), ", "))
		fs.Uint64Var(&o.Seed, "seed", 1, "random seed (the same flags give the same file)")
		fs.StringVar(&o.Vocab, "vocab", "", "GGUF whose tokenizer to copy (default: a small built-in vocabulary)")
		fs.BoolVar(&o.Tied, "tied", false, "tie the output projection to the token embedding")
		fs.IntVar(&o.TieExperts, "tie-experts", 0, "mixture of experts: give the first N experts of every layer identical router rows (exact ties)")
		fs.StringVar(&chatTemplate, "chat-template", "", "file holding a Jinja chat template to store as tokenizer.chat_template (default: the vocabulary's, or ChatML)")
		fs.IntVar(&o.Context, "context", 0, "context length the file declares (default: the preset's: tiny 2048, 125m and 1b 8192), e.g. --context 65536 for an agent's long prompts")
		fs.StringVar(&out, "out", "", "output file (required)")
		var lo genmodel.LoRAOptions
		var targets string
		lora := fs.Bool("lora", false, "write a LoRA adapter (llama.cpp's GGUF adapter format, random weights) for the model --base instead of a model; --type is the pairs' type (f16 default, f32, bf16, q8_0), --seed its seed")
		fs.StringVar(&lo.Base, "base", "", "with --lora: the base model's GGUF (required)")
		fs.IntVar(&lo.Rank, "rank", 16, "with --lora: the adapter's rank")
		alpha := fs.Float64("alpha", 0, "with --lora: adapter.lora.alpha (the scale is SCALE × alpha / rank; 0: SCALE)")
		fs.StringVar(&targets, "targets", "", "with --lora: comma-separated projections to adapt in every layer (attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_gate, ffn_up, ffn_down, output); default: all attention and dense FFN ones")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if out == "" {
			return fmt.Errorf("--out is required")
		}
		if *lora {
			if lo.Base == "" {
				return fmt.Errorf("--lora needs --base (the base model's GGUF)")
			}
			lo.Alpha, lo.Seed, lo.Type = float32(*alpha), o.Seed, "f16"
			fs.Visit(func(f *flag.Flag) {
				if f.Name == "type" {
					lo.Type = o.Type
				}
			})
			if targets != "" {
				lo.Targets = strings.Split(targets, ",")
			}
			return genmodel.GenerateLoRA(lo, out)
		}
		if chatTemplate != "" {
			b, err := os.ReadFile(chatTemplate)
			if err != nil {
				return err
			}
			if len(b) == 0 {
				return fmt.Errorf("--chat-template %s is empty", chatTemplate)
			}
			o.ChatTemplate = string(b)
		}
		if err := genmodel.Generate(o, out); err != nil {
			return err
		}
		// Out of the page cache, so that the first load reads it in in 2 MiB folios
		// (as the writes cached it, every reload would fault it in a few pages at a time).
		return settleOutOfCache(out)
	})
}
