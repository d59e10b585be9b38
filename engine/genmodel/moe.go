package genmodel

import (
	"fmt"
	"math"

	"github.com/lmlite/lmlite/engine/gguf"
)

// MoEPresets are the shapes of Options.Preset for the mixtures of experts (mixtral,
// qwen2moe, qwen3moe, olmoe). olmoe takes KVHeads = Heads (llama.cpp normalises its
// whole K row with Dim weights); qwen2moe alone has the shared expert.
//
// The 1b preset has about 0.9 billion parameters (1.0 with qwen2moe's shared expert),
// of which about 0.3 billion (0.36) are active per token: 4 of 16 experts.
var MoEPresets = map[string]Preset{
	"tiny": {Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, Context: 2048,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 256, SharedFFN: 512},
	"1b": {Dim: 1024, Layers: 16, Heads: 16, KVHeads: 4, Context: 8192, Vocab: 32000,
		Experts: 16, ExpertsUsed: 4, ExpertFFN: 1024, SharedFFN: 1024},
}

// moePreset returns the shape of a mixture-of-experts preset for opts.Arch.
func moePreset(opts Options) (Preset, error) {
	p, ok := MoEPresets[opts.Preset]
	if !ok {
		return p, fmt.Errorf("genmodel: unknown preset %q for %s (tiny, 1b)", opts.Preset, opts.Arch)
	}
	switch opts.Arch {
	case "mixtral", "olmoe":
		p.FFN = p.ExpertFFN // llama.cpp sizes their experts by feed_forward_length
	default:
		p.FFN = p.ExpertFFN * p.ExpertsUsed // as Qwen's configs: intermediate_size
	}
	if opts.Arch == "olmoe" {
		p.KVHeads = p.Heads
	}
	if opts.Arch != "qwen2moe" {
		p.SharedFFN = 0
	}
	if opts.TieExperts < 0 || opts.TieExperts > p.Experts {
		return p, fmt.Errorf("genmodel: TieExperts %d of %d experts", opts.TieExperts, p.Experts)
	}
	if opts.Tied && (opts.Arch == "qwen2moe" || opts.Arch == "olmoe") {
		return p, fmt.Errorf("genmodel: llama.cpp's %s needs output.weight (no tied output)", opts.Arch)
	}
	return p, nil
}

// addExpertKVs writes the experts' hyperparameters under the GGUF architecture's
// prefix a, as llama.cpp's converter does for arch.
func addExpertKVs(w *gguf.Writer, a, arch string, p Preset) {
	w.AddKV(a+"expert_count", gguf.Uint32(uint32(p.Experts)))
	w.AddKV(a+"expert_used_count", gguf.Uint32(uint32(p.ExpertsUsed)))
	if arch == "qwen2moe" || arch == "qwen3moe" {
		w.AddKV(a+"expert_feed_forward_length", gguf.Uint32(uint32(p.ExpertFFN)))
	}
	if arch == "qwen2moe" {
		w.AddKV(a+"expert_shared_feed_forward_length", gguf.Uint32(uint32(p.SharedFFN)))
	}
}

// experts adds layer l's router (F32), stacked experts and shared expert under the
// prefix b (blk.N.).
func (g *gen) experts(b string, l int, opts Options, p Preset) {
	router := b + "ffn_gate_inp.weight"
	if opts.TieExperts > 1 {
		g.sameRows[router] = opts.TieExperts
	}
	inDim, inFF := 1/math.Sqrt(float64(p.Dim)), 1/math.Sqrt(float64(p.ExpertFFN))
	g.matrix(router, l, p.Dim, p.Experts, inDim, nil)
	g.stacked(b+"ffn_gate_exps.weight", l, p.Dim, p.ExpertFFN, p.Experts, inDim, nil)
	g.stacked(b+"ffn_up_exps.weight", l, p.Dim, p.ExpertFFN, p.Experts, inDim, nil)
	g.stacked(b+"ffn_down_exps.weight", l, p.ExpertFFN, p.Dim, p.Experts, inFF, nil)
	if p.SharedFFN > 0 {
		g.vector(b+"ffn_gate_inp_shexp.weight", p.Dim, 0, math.Sqrt(3)*inDim)
		g.matrix(b+"ffn_gate_shexp.weight", l, p.Dim, p.SharedFFN, inDim, nil)
		g.matrix(b+"ffn_up_shexp.weight", l, p.Dim, p.SharedFFN, inDim, nil)
		g.matrix(b+"ffn_down_shexp.weight", l, p.SharedFFN, p.Dim, 1/math.Sqrt(float64(p.SharedFFN)), nil)
	}
}

// MoE reports whether arch, a value of Options.Arch, is a mixture of experts.
func MoE(arch string) bool { return archs[arch].moe }

// moeLogitStd is the standard deviation of the mixtures of experts' logits (6 for the
// dense models): more peaked distributions, so that near-ties between the two most
// likely tokens, where engines' rounding decides, are rarer.
const moeLogitStd = 8
