package model

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
)

// Errors of the package, matched with errors.Is.
var (
	ErrUnsupportedArch = errors.New("model: unsupported architecture")
	ErrUnsupportedType = errors.New("model: unsupported tensor type")
	ErrBadModel        = errors.New("model: malformed model")
	ErrContextFull     = errors.New("model: context length exceeded")
	ErrBadToken        = errors.New("model: token id out of range")
)

// Architectures lists the supported values of general.architecture. llama may carry
// experts (Mixtral); qwen2moe, qwen3moe and olmoe always do.
var Architectures = []string{"llama", "qwen2", "qwen3", "phi3", "qwen2moe", "qwen3moe", "olmoe"}

// MaxExperts bounds expert_count, as llama.cpp's LLAMA_MAX_EXPERTS does.
const MaxExperts = 512

// unsupportedMoE are mixture-of-experts architectures llama.cpp runs and this package
// does not, each with what it lacks.
var unsupportedMoE = map[string]string{
	"deepseek":     "shared experts and leading dense layers",
	"deepseek2":    "multi-head latent attention",
	"deepseek32":   "multi-head latent attention",
	"dbrx":         "clamped QKV and layer norms",
	"phimoe":       "sparsemixer routing and layer norms",
	"grok":         "attention and router scaling",
	"arctic":       "a residual dense FFN beside the experts",
	"granitemoe":   "scaled embeddings, residuals and logits",
	"glm4moe":      "sigmoid routing with a selection bias",
	"qwen3next":    "gated delta-net layers",
	"gpt-oss":      "attention sinks and clamped SwiGLU experts",
	"llama4":       "chunked attention and sigmoid routing",
	"bailingmoe":   "its own routing and attention",
	"ernie4_5-moe": "leading dense layers and a selection bias",
}

// Config holds a model's hyperparameters, read from the GGUF metadata.
type Config struct {
	Arch      string
	Vocab     int // rows of token_embd
	Dim       int // embedding_length
	Layers    int // block_count
	Heads     int // attention.head_count
	KVHeads   int // attention.head_count_kv (GQA when below Heads)
	HeadDim   int // attention.key_length, default Dim/Heads
	FFN       int // feed_forward_length
	Context   int // context_length (the trained context)
	NormEps   float32
	RopeDims  int     // rope.dimension_count, default HeadDim
	RopeBase  float32 // rope.freq_base, default 10000
	RopeScale float32 // frequency scale: 1/rope.scaling.factor for linear scaling, else 1
	RopeNeox  bool    // NeoX-style rotation of (x[i], x[i+d/2]) instead of adjacent pairs
	QKVBias   bool    // qwen2
	QKNorm    bool    // qwen3
	Fused     bool    // phi3: attn_qkv and a gate|up ffn_up
	Tied      bool    // no output.weight: the output projection is token_embd

	// QKNormRow (olmoe): one RMSNorm over each token's whole Q row and whole K row
	// (attn_q_norm has Heads·HeadDim weights) instead of QKNorm's per head.
	QKNormRow bool

	// Mixture of experts (Experts > 0): every layer's FFN is ExpertsUsed of Experts
	// SwiGLU experts of width ExpertFFN, picked per token by a router (ffn_gate_inp):
	// softmax over all experts, the top ExpertsUsed, their probabilities as gate
	// weights, renormalised to sum 1 when NormTopK. SharedFFN > 0 (qwen2moe) adds a
	// shared expert of that width, scaled by sigmoid(ffn_gate_inp_shexp · x).
	Experts     int  // expert_count
	ExpertsUsed int  // expert_used_count
	ExpertFFN   int  // expert_feed_forward_length (qwen2moe, qwen3moe; default FFN/ExpertsUsed), else feed_forward_length
	SharedFFN   int  // qwen2moe: expert_shared_feed_forward_length (default feed_forward_length)
	NormTopK    bool // llama (Mixtral) and qwen3moe, as llama.cpp fixes per architecture
}

// MoE reports whether the model is a mixture of experts.
func (c Config) MoE() bool { return c.Experts > 0 }

// ffnWidth is the widest hidden layer of a layer's FFN, for the scratch.
func (c Config) ffnWidth() int {
	if c.MoE() {
		return max(c.ExpertFFN, c.SharedFFN)
	}
	return c.FFN
}

func (c Config) qDim() int  { return c.Heads * c.HeadDim }
func (c Config) kvDim() int { return c.KVHeads * c.HeadDim }

// readConfig reads and checks the hyperparameters (not yet Vocab and Tied).
func readConfig(f *gguf.File) (Config, error) {
	c := Config{Arch: f.Architecture()}
	switch c.Arch {
	case "llama":
	case "qwen2":
		c.RopeNeox, c.QKVBias = true, true
	case "qwen3":
		c.RopeNeox, c.QKNorm = true, true
	case "phi3":
		c.RopeNeox, c.Fused = true, true
	case "qwen2moe":
		c.RopeNeox = true
	case "qwen3moe":
		c.RopeNeox, c.QKNorm = true, true
	case "olmoe":
		c.RopeNeox, c.QKNormRow = true, true
	case "":
		return c, fmt.Errorf("%w: general.architecture is missing", ErrBadModel)
	default:
		if what, ok := unsupportedMoE[c.Arch]; ok {
			return c, fmt.Errorf("%w %q: a mixture of experts with %s (supported: %s)", ErrUnsupportedArch, c.Arch, what, strings.Join(Architectures, ", "))
		}
		return c, fmt.Errorf("%w %q (supported: %s)", ErrUnsupportedArch, c.Arch, strings.Join(Architectures, ", "))
	}
	a := c.Arch + "."
	var err error
	num := func(key string, def int) int {
		v, ok := f.GetUint(a + key)
		if !ok {
			if def < 0 && err == nil {
				err = fmt.Errorf("%w: metadata %s%s is missing", ErrBadModel, a, key)
			}
			return def
		}
		if v == 0 || v > 1<<24 {
			if err == nil {
				err = fmt.Errorf("%w: metadata %s%s = %d", ErrBadModel, a, key, v)
			}
			return def
		}
		return int(v)
	}
	c.Dim = num("embedding_length", -1)
	c.Layers = num("block_count", -1)
	c.Heads = num("attention.head_count", -1)
	c.FFN = num("feed_forward_length", -1)
	c.Context = num("context_length", -1)
	if err != nil {
		return c, err
	}
	// Each layer has at least 6 tensors, each head at least one row of the embedding:
	// checked before anything is sized by these counts.
	if c.Layers > len(f.Tensors)/6 || c.Heads > c.Dim {
		return c, fmt.Errorf("%w: %d layers of %d heads for %d tensors and dimension %d", ErrBadModel, c.Layers, c.Heads, len(f.Tensors), c.Dim)
	}
	c.KVHeads = num("attention.head_count_kv", c.Heads)
	c.HeadDim = num("attention.key_length", c.Dim/c.Heads)
	vdim := num("attention.value_length", c.HeadDim)
	c.RopeDims = num("rope.dimension_count", c.HeadDim)
	if err != nil {
		return c, err
	}
	if vdim != c.HeadDim {
		return c, fmt.Errorf("%w: value length %d differs from key length %d", ErrUnsupportedArch, vdim, c.HeadDim)
	}
	if c.Heads%c.KVHeads != 0 || c.HeadDim%2 != 0 || c.RopeDims > c.HeadDim || c.RopeDims%2 != 0 || c.HeadDim > 512 {
		return c, fmt.Errorf("%w: %d heads, %d KV heads, head dim %d, rope dims %d", ErrBadModel, c.Heads, c.KVHeads, c.HeadDim, c.RopeDims)
	}
	flt := func(key string, def float64) float32 {
		v, ok := f.GetFloat(a + key)
		if !ok {
			return float32(def)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			if err == nil {
				err = fmt.Errorf("%w: metadata %s%s = %v", ErrBadModel, a, key, v)
			}
			return float32(def)
		}
		return float32(v)
	}
	c.NormEps = flt("attention.layer_norm_rms_epsilon", 1e-5)
	c.RopeBase = flt("rope.freq_base", 10000)
	factor := flt("rope.scaling.factor", 0)
	if factor == 0 {
		factor = flt("rope.scale_linear", 0)
	}
	if err != nil {
		return c, err
	}
	c.RopeScale = 1
	if factor != 0 {
		c.RopeScale = 1 / factor
	}
	if typ, ok := f.GetString(a + "rope.scaling.type"); ok && typ != "none" && typ != "linear" {
		return c, fmt.Errorf("%w: rope scaling %q", ErrUnsupportedArch, typ)
	}
	if c.RopeBase <= 0 {
		return c, fmt.Errorf("%w: rope.freq_base %v", ErrBadModel, c.RopeBase)
	}
	return c, readExperts(f, &c)
}

// readExperts reads the mixture-of-experts hyperparameters as llama.cpp does for
// the architecture: expert_count and expert_used_count for all; the experts' width
// from expert_feed_forward_length for qwen2moe and qwen3moe (else
// feed_forward_length / expert_used_count) and feed_forward_length for llama and
// olmoe; the shared expert's from expert_shared_feed_forward_length (qwen2moe).
// llama.cpp fixes the gating per architecture (softmax before the top-k for all four,
// renormalised top-k weights for llama and qwen3moe, no scaling) and reads no
// expert_gating_func, expert_weights_norm or expert_weights_scale for them; neither
// does this.
func readExperts(f *gguf.File, c *Config) error {
	a := c.Arch + "."
	get := func(key string) (int, bool, error) {
		v, ok := f.GetUint(a + key)
		if !ok {
			if _, present := f.Get(a + key); present {
				return 0, false, fmt.Errorf("%w: metadata %s%s is not an unsigned integer", ErrBadModel, a, key)
			}
			return 0, false, nil
		}
		if v > 1<<24 {
			return 0, false, fmt.Errorf("%w: metadata %s%s = %d", ErrBadModel, a, key, v)
		}
		return int(v), true, nil
	}
	n, _, err := get("expert_count")
	if err != nil {
		return err
	}
	moeArch := c.Arch == "qwen2moe" || c.Arch == "qwen3moe" || c.Arch == "olmoe"
	switch {
	case n == 0 && moeArch:
		return fmt.Errorf("%w: %s without %sexpert_count", ErrBadModel, c.Arch, a)
	case n == 0:
		return nil
	case !moeArch && c.Arch != "llama":
		return fmt.Errorf("%w: %s with %d experts (experts are supported in llama, qwen2moe, qwen3moe and olmoe)", ErrUnsupportedArch, c.Arch, n)
	case n > MaxExperts:
		return fmt.Errorf("%w: %d experts (at most %d)", ErrBadModel, n, MaxExperts)
	}
	used, _, err := get("expert_used_count")
	if err != nil {
		return err
	}
	if used < 1 || used > n {
		return fmt.Errorf("%w: %d of %d experts used per token", ErrBadModel, used, n)
	}
	c.Experts, c.ExpertsUsed = n, used
	c.ExpertFFN = c.FFN
	if c.Arch == "qwen2moe" || c.Arch == "qwen3moe" {
		c.ExpertFFN = c.FFN / used
		if v, ok, err := get("expert_feed_forward_length"); err != nil {
			return err
		} else if ok && v > 0 {
			c.ExpertFFN = v
		}
	}
	shared, hasShared, err := get("expert_shared_feed_forward_length")
	if err != nil {
		return err
	}
	switch c.Arch {
	case "qwen2moe":
		c.SharedFFN = c.FFN
		if hasShared && shared > 0 {
			c.SharedFFN = shared
		}
	default:
		if shared > 0 {
			return fmt.Errorf("%w: %s with a shared expert (%sexpert_shared_feed_forward_length)", ErrUnsupportedArch, c.Arch, a)
		}
	}
	c.NormTopK = c.Arch == "llama" || c.Arch == "qwen3moe"
	if c.ExpertFFN < 1 {
		return fmt.Errorf("%w: expert width %d", ErrBadModel, c.ExpertFFN)
	}
	if c.QKNormRow && c.KVHeads != c.Heads {
		// llama.cpp's olmoe normalises K with a vector of Heads·HeadDim weights.
		return fmt.Errorf("%w: olmoe with %d KV heads of %d (QK-norm over the whole row needs as many)", ErrUnsupportedArch, c.KVHeads, c.Heads)
	}
	return nil
}
