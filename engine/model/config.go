package model

import (
	"errors"
	"fmt"
	"math"

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

// Architectures lists the supported values of general.architecture.
var Architectures = []string{"llama", "qwen2", "qwen3", "phi3"}

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
	case "":
		return c, fmt.Errorf("%w: general.architecture is missing", ErrBadModel)
	default:
		return c, fmt.Errorf("%w %q (supported: llama, qwen2, qwen3, phi3)", ErrUnsupportedArch, c.Arch)
	}
	a := c.Arch + "."
	if n, ok := f.GetUint(a + "expert_count"); ok && n > 0 {
		return c, fmt.Errorf("%w: %s with %d experts (mixture of experts is not supported yet)", ErrUnsupportedArch, c.Arch, n)
	}
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
	return c, nil
}
