// Package genmodel writes GGUF models with seeded random weights at real shapes: test
// and benchmark models for every supported architecture and tensor type, without
// downloading any. The files are written with the project's own GGUF writer and
// quantizers (engine/gguf, engine/kernels) and load in llama.cpp.
//
// Random weights would give flat next-token distributions whose argmax flips with any
// rounding; the output projection is scaled so that distributions are peaked enough
// to compare engines, and the rows of end-of-generation and other control tokens are
// damped so that generation rarely stops early.
package genmodel

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// Options says what model to generate. Arch, Preset and Type are required.
type Options struct {
	Arch   string // llama, qwen2, qwen3, phi3, or the mixtures of experts mixtral, qwen2moe, qwen3moe, olmoe
	Preset string // tiny, 125m or 1b
	Type   string // a key of Types: f32, f16, bf16, q8_0, q4_0, q4_k_m, q6_k, …
	Seed   uint64 // the same options give the same file
	Vocab  string // a GGUF whose tokenizer.* keys to copy; "": the built-in vocabulary
	Tied   bool   // no output.weight: the output projection is token_embd

	// ChatTemplate replaces the vocabulary's tokenizer.chat_template (a Jinja chat
	// template, such as a model family's with tools); "": the vocabulary's, or ChatML.
	ChatTemplate string

	// TieExperts > 1 (mixtures of experts): the first TieExperts experts of every layer
	// have identical router rows, so their router scores tie exactly on every token.
	// With TieExperts = ExpertsUsed+1, deterministic routing never picks the last of
	// them (the lower index wins a tie).
	TieExperts int

	// Context, when > 0, replaces the preset's context length (the GGUF's
	// context_length), e.g. a tiny model that takes an agent's 30k-token prompt.
	Context int
}

// Preset is a model shape. Vocab is the size the built-in vocabulary is padded to
// when no vocabulary file is given (0: its own size, about 1,500 tokens).
type Preset struct {
	Dim, Layers, Heads, KVHeads, FFN, Context, Vocab int

	// Mixtures of experts (MoEPresets): experts per layer, used per token, each
	// expert's hidden width, and the shared expert's (qwen2moe).
	Experts, ExpertsUsed, ExpertFFN, SharedFFN int
}

// Presets are the shapes of Options.Preset.
var Presets = map[string]Preset{
	"tiny": {Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 768, Context: 2048},
	"125m": {Dim: 768, Layers: 12, Heads: 12, KVHeads: 4, FFN: 2048, Context: 8192, Vocab: 32000},
	"1b":   {Dim: 2048, Layers: 16, Heads: 32, KVHeads: 8, FFN: 8192, Context: 8192, Vocab: 128256}, // Llama-3.2-1B
}

// Types are the values of Options.Type with llama.cpp's general.file_type for each.
// A name of one tensor type (q4_1, q5_k, iq4_xs, …) gives a file of that type but
// for the norms; q3_k_m, q4_k_m and q5_k_m mix types as llama.cpp's files of those
// names do (tensorType).
var Types = map[string]uint32{
	"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9,
	"q2_k": 10, "q3_k": 11, "q3_k_m": 12, "q4_k_m": 15, "q5_k": 16, "q5_k_m": 17, "q6_k": 18,
	"iq4_nl": 25, "iq4_xs": 30, "tq1_0": 36, "tq2_0": 37,
}

// TypeNames lists the keys of Types, sorted.
func TypeNames() []string {
	names := make([]string, 0, len(Types))
	for n := range Types {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// singleTypes are the Types that name one tensor type.
var singleTypes = map[string]kernels.Type{
	"f32": kernels.F32, "f16": kernels.F16, "bf16": kernels.BF16, "q8_0": kernels.Q8_0,
	"q4_0": kernels.Q4_0, "q4_1": kernels.Q4_1, "q5_0": kernels.Q5_0, "q5_1": kernels.Q5_1,
	"q2_k": kernels.Q2_K, "q3_k": kernels.Q3_K, "q5_k": kernels.Q5_K, "q6_k": kernels.Q6_K,
	"iq4_nl": kernels.IQ4_NL, "iq4_xs": kernels.IQ4_XS, "tq1_0": kernels.TQ1_0, "tq2_0": kernels.TQ2_0,
}

var archs = map[string]struct {
	ropeBase float32
	eps      float32
	moe      bool
}{
	"llama":    {10000, 1e-5, false},
	"qwen2":    {1000000, 1e-6, false},
	"qwen3":    {1000000, 1e-6, false},
	"phi3":     {10000, 1e-5, false},
	"mixtral":  {1000000, 1e-5, true},
	"qwen2moe": {1000000, 1e-6, true},
	"qwen3moe": {1000000, 1e-6, true},
	"olmoe":    {10000, 1e-5, true},
}

// tensorType picks the type of a weight matrix of cols columns for the file type:
// the type itself, or llama.cpp's mix (llama_tensor_get_type, dense models) for
// q3_k_m, q4_k_m and q5_k_m: Q6_K for the output projection; attn_v and ffn_down
// with more bits in the layers use_more_bits picks (Q6_K in q4_k_m and q5_k_m), in
// q3_k_m attn_v Q5_K in the first two layers and Q4_K after, ffn_down Q5_K in the
// first sixteenth and Q4_K after, attn_output and attn_qkv Q4_K; attn_qkv Q6_K in
// q4_k_m (Q5_K in llama.cpp: kept from before Q5_K existed here, so that benchmark
// files stay the same) and q5_k_m. Routers (ffn_gate_inp) are F32 in every file
// type, as llama.cpp keeps them; the stacked experts' ffn_down_exps (and qwen2moe's
// ffn_down_shexp) follow ffn_down's rule by layer (llama.cpp's own mix has further
// cases for models with experts, such as 8-expert models' attn_k and attn_v; this
// follows none of them).
func tensorType(ftype, name string, layer, layers int, cols int, tiedOutput bool) kernels.Type {
	if strings.HasSuffix(name, "ffn_gate_inp.weight") {
		return kernels.F32 // routers: llama.cpp's converter and quantizer keep them in F32
	}
	t, single := singleTypes[ftype]
	if !single {
		moreBits := layer >= 0 && (layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2)
		output := name == "output.weight" || name == "token_embd.weight" && tiedOutput
		has := func(suffix string) bool { return strings.HasSuffix(name, suffix) }
		down := has("ffn_down.weight") || has("ffn_down_exps.weight") || has("ffn_down_shexp.weight")
		switch ftype {
		case "q4_k_m", "q5_k_m":
			t = kernels.Q4_K
			if ftype == "q5_k_m" {
				t = kernels.Q5_K
			}
			switch {
			case output, has("attn_qkv.weight"):
				t = kernels.Q6_K
			case has("attn_v.weight") && moreBits, down && moreBits:
				t = kernels.Q6_K
			}
		case "q3_k_m":
			t = kernels.Q3_K
			switch {
			case output:
				t = kernels.Q6_K
			case has("attn_v.weight"):
				t = kernels.Q4_K
				if layer < 2 {
					t = kernels.Q5_K
				}
			case down:
				t = kernels.Q4_K
				if layer < layers/16 {
					t = kernels.Q5_K
				}
			case has("attn_output.weight"), has("attn_qkv.weight"):
				t = kernels.Q4_K
			}
		}
	}
	if !kernels.ValidRow(t, cols) { // as llama.cpp, fall back when rows do not fill blocks
		t = kernels.Q8_0
		if !kernels.ValidRow(t, cols) {
			t = kernels.F16
		}
	}
	return t
}

// Generate writes the model that opts describe to out (atomically).
func Generate(opts Options, out string) error {
	w, err := Build(opts)
	if err != nil {
		return err
	}
	if err := w.WriteFile(out); err != nil {
		return fmt.Errorf("genmodel: %w", err)
	}
	return nil
}

// Build returns a Writer holding the model that opts describe.
func Build(opts Options) (*gguf.Writer, error) {
	p, ok := Presets[opts.Preset]
	var err error
	if !ok {
		return nil, fmt.Errorf("genmodel: unknown preset %q (tiny, 125m, 1b)", opts.Preset)
	}
	ftype, ok := Types[opts.Type]
	if !ok {
		return nil, fmt.Errorf("genmodel: unknown type %q (%s)", opts.Type, strings.Join(TypeNames(), ", "))
	}
	ar, ok := archs[opts.Arch]
	if !ok {
		return nil, fmt.Errorf("genmodel: unknown architecture %q (llama, qwen2, qwen3, phi3, mixtral, qwen2moe, qwen3moe, olmoe)", opts.Arch)
	}
	ggufArch := opts.Arch
	if ar.moe {
		if p, err = moePreset(opts); err != nil {
			return nil, err
		}
		if opts.Arch == "mixtral" {
			ggufArch = "llama"
		}
	} else if opts.TieExperts != 0 {
		return nil, fmt.Errorf("genmodel: TieExperts without experts (%s)", opts.Arch)
	}
	if opts.Context < 0 {
		return nil, fmt.Errorf("genmodel: negative context length %d", opts.Context)
	}
	if opts.Context > 0 {
		p.Context = opts.Context
	}
	vocab := builtinVocab(p.Vocab)
	if opts.Vocab != "" {
		if vocab, err = vocabFrom(opts.Vocab); err != nil {
			return nil, err
		}
	}
	if opts.ChatTemplate != "" {
		vocab = withChatTemplate(vocab, opts.ChatTemplate)
	}
	nVocab, rare, err := vocabInfo(vocab)
	if err != nil {
		return nil, err
	}

	w := gguf.NewWriter()
	a := ggufArch + "."
	hd := p.Dim / p.Heads
	w.AddKV("general.architecture", gguf.String(ggufArch))
	// No architecture in the name: llama.cpp patches tokens of a vocabulary by model
	// name ("phi3" expects <|endoftext|>).
	w.AddKV("general.name", gguf.String(fmt.Sprintf("lmlite-random-%s-%s-seed%d", opts.Preset, opts.Type, opts.Seed)))
	w.AddKV("general.file_type", gguf.Uint32(ftype))
	w.AddKV("general.quantization_version", gguf.Uint32(2))
	w.AddKV(a+"vocab_size", gguf.Uint32(uint32(nVocab)))
	w.AddKV(a+"context_length", gguf.Uint32(uint32(p.Context)))
	w.AddKV(a+"embedding_length", gguf.Uint32(uint32(p.Dim)))
	w.AddKV(a+"block_count", gguf.Uint32(uint32(p.Layers)))
	w.AddKV(a+"feed_forward_length", gguf.Uint32(uint32(p.FFN)))
	w.AddKV(a+"attention.head_count", gguf.Uint32(uint32(p.Heads)))
	w.AddKV(a+"attention.head_count_kv", gguf.Uint32(uint32(p.KVHeads)))
	w.AddKV(a+"attention.key_length", gguf.Uint32(uint32(hd)))
	w.AddKV(a+"attention.value_length", gguf.Uint32(uint32(hd)))
	w.AddKV(a+"attention.layer_norm_rms_epsilon", gguf.Float32(ar.eps))
	w.AddKV(a+"rope.freq_base", gguf.Float32(ar.ropeBase))
	w.AddKV(a+"rope.dimension_count", gguf.Uint32(uint32(hd)))
	if ar.moe {
		addExpertKVs(w, a, opts.Arch, p)
	}
	for _, kv := range vocab {
		w.AddKV(kv.Key, kv.Value)
	}

	g := gen{w: w, seed: opts.Seed, ftype: opts.Type, layers: p.Layers, tied: opts.Tied, sameRows: map[string]int{}}
	qd, kvd := p.Heads*hd, p.KVHeads*hd
	outScale := 6 / math.Sqrt(float64(p.Dim)) // logits with a standard deviation of about 6
	if ar.moe {
		outScale = moeLogitStd / math.Sqrt(float64(p.Dim))
	}
	if opts.Tied {
		g.matrix("token_embd.weight", -1, p.Dim, nVocab, outScale, rare)
	} else {
		g.matrix("token_embd.weight", -1, p.Dim, nVocab, 1, nil)
	}
	for l := 0; l < p.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		g.vector(b+"attn_norm.weight", p.Dim, 1, 0.1)
		if opts.Arch == "phi3" {
			g.matrix(b+"attn_qkv.weight", l, p.Dim, qd+2*kvd, 1/math.Sqrt(float64(p.Dim)), nil)
		} else {
			g.matrix(b+"attn_q.weight", l, p.Dim, qd, 1/math.Sqrt(float64(p.Dim)), nil)
			g.matrix(b+"attn_k.weight", l, p.Dim, kvd, 1/math.Sqrt(float64(p.Dim)), nil)
			g.matrix(b+"attn_v.weight", l, p.Dim, kvd, 1/math.Sqrt(float64(p.Dim)), nil)
		}
		if opts.Arch == "qwen2" || opts.Arch == "qwen2moe" {
			g.vector(b+"attn_q.bias", qd, 0, 0.2)
			g.vector(b+"attn_k.bias", kvd, 0, 0.2)
			g.vector(b+"attn_v.bias", kvd, 0, 0.2)
		}
		if opts.Arch == "qwen3" || opts.Arch == "qwen3moe" {
			g.vector(b+"attn_q_norm.weight", hd, 1, 0.2)
			g.vector(b+"attn_k_norm.weight", hd, 1, 0.2)
		}
		if opts.Arch == "olmoe" { // one norm over the whole Q and K rows
			g.vector(b+"attn_q_norm.weight", qd, 1, 0.2)
			g.vector(b+"attn_k_norm.weight", kvd, 1, 0.2)
		}
		g.matrix(b+"attn_output.weight", l, qd, p.Dim, 1/math.Sqrt(float64(qd)), nil)
		g.vector(b+"ffn_norm.weight", p.Dim, 1, 0.1)
		if ar.moe {
			g.experts(b, l, opts, p)
			continue
		}
		if opts.Arch == "phi3" {
			g.matrix(b+"ffn_up.weight", l, p.Dim, 2*p.FFN, 1/math.Sqrt(float64(p.Dim)), nil)
		} else {
			g.matrix(b+"ffn_gate.weight", l, p.Dim, p.FFN, 1/math.Sqrt(float64(p.Dim)), nil)
			g.matrix(b+"ffn_up.weight", l, p.Dim, p.FFN, 1/math.Sqrt(float64(p.Dim)), nil)
		}
		g.matrix(b+"ffn_down.weight", l, p.FFN, p.Dim, 1/math.Sqrt(float64(p.FFN)), nil)
	}
	g.vector("output_norm.weight", p.Dim, 1, 0.1)
	if !opts.Tied {
		g.matrix("output.weight", -1, p.Dim, nVocab, outScale, rare)
	}
	if g.err != nil {
		return nil, g.err
	}
	return w, nil
}

// gen adds seeded random tensors to a Writer and keeps the first error.
type gen struct {
	w      *gguf.Writer
	seed   uint64
	ftype  string
	layers int
	tied   bool
	err    error

	sameRows map[string]int // tensor name → its first N rows are all row 0
}

// rareScale damps the rows of tokens that should rarely be generated: their logits
// stay near 0 while the likely tokens' are several standard deviations above.
const rareScale = 0.02

// matrix adds a rows×cols weight matrix of uniform values with standard deviation
// std, rows in damped by rareScale, in the type the file type gives it. Each row's
// values come from its own generator seeded by (seed, name, row), so rows are made
// and quantized in parallel and the file is the same whatever the thread count.
func (g *gen) matrix(name string, layer, cols, rows int, std float64, damped []int) {
	g.stacked(name, layer, cols, rows, 1, std, damped)
}

// stacked adds n matrices of rows×cols as one tensor of shape {cols, rows, n} (a
// matrix when n is 1), made as matrix makes one of n·rows rows.
func (g *gen) stacked(name string, layer, cols, rows, n int, std float64, damped []int) {
	if g.err != nil {
		return
	}
	dims := []uint64{uint64(cols), uint64(rows)}
	if n > 1 {
		dims = append(dims, uint64(n))
	}
	rows *= n
	typ := tensorType(g.ftype, name, layer, g.layers, cols, g.tied)
	rb := typ.RowBytes(cols)
	data := make([]byte, rows*rb)
	isDamped := map[int]bool{}
	for _, r := range damped {
		isDamped[r] = true
	}
	amp := float32(std * math.Sqrt(3))
	nameSeed := hashString(name)
	same := g.sameRows[name]
	kernels.Parallel(rows, cols*64, func(lo, hi int) {
		buf := make([]float32, cols)
		for r := lo; r < hi; r++ {
			src := r
			if r < same {
				src = 0
			}
			rng := wyrand{g.seed ^ nameSeed ^ uint64(src)*0x9e3779b97f4a7c15}
			a := amp
			if isDamped[r] {
				a *= rareScale
			}
			for i := range buf {
				buf[i] = a * rng.sym()
			}
			kernels.QuantizeRow(data[r*rb:(r+1)*rb], typ, buf)
		}
	})
	g.err = g.w.AddTensor(name, gguf.GGMLType(typ), dims, data)
}

// vector adds an F32 vector of n values uniform in center ± spread.
func (g *gen) vector(name string, n int, center, spread float64) {
	if g.err != nil {
		return
	}
	rng := wyrand{g.seed ^ hashString(name)}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(center) + float32(spread)*rng.sym()
	}
	data := make([]byte, 4*n)
	kernels.QuantizeRow(data, kernels.F32, v)
	g.err = g.w.AddTensor(name, gguf.F32, []uint64{uint64(n)}, data)
}

// wyrand is a small fast PRNG (Wang Yi's wyrand): one multiply per 64 bits.
type wyrand struct{ s uint64 }

func (r *wyrand) next() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// sym returns a uniform value in [-1, 1).
func (r *wyrand) sym() float32 {
	return float32(int32(uint32(r.next()>>32))) / (1 << 31)
}

// hashString is FNV-1a, to give each tensor its own stream.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
