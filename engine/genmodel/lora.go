package genmodel

import (
	"fmt"
	"math"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
)

// LoRAOptions says what LoRA adapter to generate for a base model file.
type LoRAOptions struct {
	Base  string  // the base model's GGUF (required): its architecture and tensor shapes
	Rank  int     // the adapter's rank (0: 16)
	Alpha float32 // adapter.lora.alpha (0: written as 0, so the scale is the user's)
	Type  string  // the pairs' tensor type: f32, f16 (""), bf16 or q8_0 (rank and widths multiples of 32)
	Seed  uint64  // the same options give the same file

	// Targets are the projections adapted in every layer, by tensor name after
	// "blk.N." without ".weight" (attn_q, attn_k, attn_v, attn_qkv, attn_output,
	// ffn_gate, ffn_up, ffn_down), plus "output" for the output projection; none:
	// every attention projection and dense FFN matrix the base has.
	Targets []string

	// Strength is the size of the update relative to a generated base projection's
	// output at scale 1 (0: 0.5): A and B are uniform with standard deviations 1/√in
	// and Strength/√rank·(rank/alpha), as a trained adapter's update is a fraction
	// of its projection's.
	Strength float64
}

// DefaultLoRATargets are the projections a generated adapter adapts by default.
var DefaultLoRATargets = []string{"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}

// GenerateLoRA writes the adapter that opts describe to out (atomically), in
// llama.cpp's GGUF adapter format: general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, and for each adapted base matrix W of ggml shape [in, out] the
// pair W.lora_a [in, rank] and W.lora_b [rank, out] (convert_lora_to_gguf.py's
// layout). Its weights are random (general.name says so).
func GenerateLoRA(opts LoRAOptions, out string) error {
	w, err := BuildLoRA(opts)
	if err != nil {
		return err
	}
	if err := w.WriteFile(out); err != nil {
		return fmt.Errorf("genmodel: %w", err)
	}
	return nil
}

// BuildLoRA returns a Writer holding the adapter that opts describe.
func BuildLoRA(opts LoRAOptions) (*gguf.Writer, error) {
	if opts.Rank == 0 {
		opts.Rank = 16
	}
	if opts.Type == "" {
		opts.Type = "f16"
	}
	if opts.Strength == 0 {
		opts.Strength = 0.5
	}
	switch opts.Type {
	case "f32", "f16", "bf16", "q8_0":
	default:
		return nil, fmt.Errorf("genmodel: LoRA type %q (f32, f16, bf16, q8_0)", opts.Type)
	}
	if opts.Rank < 1 || opts.Rank > 4096 {
		return nil, fmt.Errorf("genmodel: LoRA rank %d out of 1..4096", opts.Rank)
	}
	targets := opts.Targets
	if len(targets) == 0 {
		targets = DefaultLoRATargets
	}
	want := map[string]bool{}
	for _, t := range targets {
		want[strings.TrimSuffix(t, ".weight")] = true
	}
	base, err := gguf.Open(opts.Base)
	if err != nil {
		return nil, fmt.Errorf("genmodel: %w", err)
	}
	defer base.Close()
	arch := base.Architecture()
	if arch == "" {
		return nil, fmt.Errorf("genmodel: %s has no general.architecture", opts.Base)
	}
	w := gguf.NewWriter()
	w.AddKV("general.architecture", gguf.String(arch))
	w.AddKV("general.type", gguf.String("adapter"))
	w.AddKV("general.name", gguf.String(fmt.Sprintf("lmlite-random-lora-r%d-%s-seed%d", opts.Rank, opts.Type, opts.Seed)))
	w.AddKV("adapter.type", gguf.String("lora"))
	w.AddKV("adapter.lora.alpha", gguf.Float32(opts.Alpha))
	g := gen{w: w, seed: opts.Seed ^ 0x10a4, ftype: opts.Type, sameRows: map[string]int{}}
	// At scale 1 the update is multiplied by alpha/rank (1 when alpha is 0).
	factor := 1.0
	if opts.Alpha != 0 {
		factor = float64(opts.Rank) / float64(opts.Alpha)
	}
	n := 0
	for i := range base.Tensors {
		t := &base.Tensors[i]
		name, ok := strings.CutSuffix(t.Name, ".weight")
		if !ok || len(t.Dims) != 2 {
			continue
		}
		short := name
		if strings.HasPrefix(name, "blk.") {
			if _, rest, ok := strings.Cut(name[4:], "."); ok {
				short = rest
			}
		}
		if !want[short] || short == "token_embd" {
			continue
		}
		in, outDim := int(t.Dims[0]), int(t.Dims[1])
		if opts.Type == "q8_0" && (in%32 != 0 || opts.Rank%32 != 0) {
			return nil, fmt.Errorf("genmodel: q8_0 LoRA pairs need rank and widths in multiples of 32 (rank %d, %s of width %d)", opts.Rank, t.Name, in)
		}
		r := float64(opts.Rank)
		g.matrix(t.Name+".lora_a", -1, in, opts.Rank, 1/math.Sqrt(float64(in)), nil)
		g.matrix(t.Name+".lora_b", -1, opts.Rank, outDim, opts.Strength/math.Sqrt(r)*factor, nil)
		n++
	}
	if g.err != nil {
		return nil, g.err
	}
	if n == 0 {
		return nil, fmt.Errorf("genmodel: %s has none of the target tensors %v", opts.Base, targets)
	}
	return w, nil
}
