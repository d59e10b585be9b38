package model

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// microModel builds a very small F32 model of an architecture in memory: dim 32,
// 2 heads of 16, 1 KV head, FFN 64, a vocabulary of 16, 2 layers.
func microModel(t testing.TB, arch string, edit func(w *gguf.Writer)) []byte {
	return sizedModel(t, arch, 32, 64, 16, 2, edit)
}

// microArchs are the architectures of the micro models: Architectures and "mixtral"
// (llama with experts).
var microArchs = append([]string{"mixtral"}, Architectures...)

// microExperts is the micro models' experts: 4, of which 2 are used.
const microExperts, microUsed = 4, 2

// sizedModel is microModel with the sizes given (2 heads, 1 KV head; 2 for olmoe). The
// mixtures of experts get microExperts experts of width ffn (and a shared expert of
// width ffn for qwen2moe).
func sizedModel(t testing.TB, arch string, dim, ffn, vocab, layers int, edit func(w *gguf.Writer)) []byte {
	t.Helper()
	heads, kvHeads := 2, 1
	if arch == "olmoe" {
		kvHeads = 2
	}
	moe := arch == "mixtral" || arch == "qwen2moe" || arch == "qwen3moe" || arch == "olmoe"
	if arch == "mixtral" {
		arch = "llama"
	}
	hd := dim / heads
	w := gguf.NewWriter()
	a := arch + "."
	w.AddKV("general.architecture", gguf.String(arch))
	if moe {
		w.AddKV(a+"expert_count", gguf.Uint32(microExperts))
		w.AddKV(a+"expert_used_count", gguf.Uint32(microUsed))
		w.AddKV(a+"expert_feed_forward_length", gguf.Uint32(uint32(ffn))) // read by the qwens only
		if arch == "qwen2moe" {
			w.AddKV(a+"expert_shared_feed_forward_length", gguf.Uint32(uint32(ffn)))
		}
	}
	w.AddKV(a+"context_length", gguf.Uint32(64))
	w.AddKV(a+"embedding_length", gguf.Uint32(uint32(dim)))
	w.AddKV(a+"block_count", gguf.Uint32(uint32(layers)))
	w.AddKV(a+"feed_forward_length", gguf.Uint32(uint32(ffn)))
	w.AddKV(a+"attention.head_count", gguf.Uint32(uint32(heads)))
	w.AddKV(a+"attention.head_count_kv", gguf.Uint32(uint32(kvHeads)))
	w.AddKV(a+"attention.layer_norm_rms_epsilon", gguf.Float32(1e-5))
	r := rand.New(rand.NewPCG(1, 2))
	add := func(name string, dims ...int) {
		n := 1
		ud := make([]uint64, len(dims))
		for i, d := range dims {
			n *= d
			ud[i] = uint64(d)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.3)
		}
		data := make([]byte, 4*n)
		kernels.QuantizeRow(data, kernels.F32, v)
		if err := w.AddTensor(name, gguf.F32, ud, data); err != nil {
			t.Fatal(err)
		}
	}
	add("token_embd.weight", dim, vocab)
	add("output_norm.weight", dim)
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", dim)
		if arch == "phi3" {
			add(p+"attn_qkv.weight", dim, heads*hd+2*kvHeads*hd)
			add(p+"ffn_up.weight", dim, 2*ffn)
		} else {
			add(p+"attn_q.weight", dim, heads*hd)
			add(p+"attn_k.weight", dim, kvHeads*hd)
			add(p+"attn_v.weight", dim, kvHeads*hd)
		}
		switch {
		case moe:
			add(p+"ffn_gate_inp.weight", dim, microExperts)
			add(p+"ffn_gate_exps.weight", dim, ffn, microExperts)
			add(p+"ffn_up_exps.weight", dim, ffn, microExperts)
			add(p+"ffn_down_exps.weight", ffn, dim, microExperts)
			if arch == "qwen2moe" {
				add(p+"ffn_gate_inp_shexp.weight", dim)
				add(p+"ffn_gate_shexp.weight", dim, ffn)
				add(p+"ffn_up_shexp.weight", dim, ffn)
				add(p+"ffn_down_shexp.weight", ffn, dim)
			}
		case arch != "phi3":
			add(p+"ffn_gate.weight", dim, ffn)
			add(p+"ffn_up.weight", dim, ffn)
			add(p+"ffn_down.weight", ffn, dim)
		default:
			add(p+"ffn_down.weight", ffn, dim)
		}
		if arch == "qwen2" || arch == "qwen2moe" {
			add(p+"attn_q.bias", heads*hd)
			add(p+"attn_k.bias", kvHeads*hd)
			add(p+"attn_v.bias", kvHeads*hd)
		}
		if arch == "qwen3" || arch == "qwen3moe" {
			add(p+"attn_q_norm.weight", hd)
			add(p+"attn_k_norm.weight", hd)
		}
		if arch == "olmoe" {
			add(p+"attn_q_norm.weight", heads*hd)
			add(p+"attn_k_norm.weight", kvHeads*hd)
		}
		add(p+"attn_output.weight", heads*hd, dim)
		add(p+"ffn_norm.weight", dim)
	}
	if edit != nil {
		edit(w)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func loadMicro(t *testing.T, data []byte) (*Model, error) {
	t.Helper()
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return Load(f)
}

// TestBatchAndThreadInvariance: for every architecture, the logits of each token are
// the same bits whether the sequence runs as one batch or token by token, on one
// goroutine or several.
func TestBatchAndThreadInvariance(t *testing.T) {
	seq := []int32{1, 5, 9, 3, 3, 14, 0, 7, 2, 11}
	for _, arch := range microArchs {
		t.Run(arch, func(t *testing.T) {
			m, err := loadMicro(t, microModel(t, arch, nil))
			if err != nil {
				t.Fatal(err)
			}
			V := m.Config().Vocab
			all, err := m.NewState(0).Forward(seq, true)
			if err != nil {
				t.Fatal(err)
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			st := m.NewState(0)
			// 3 tokens, then one at a time.
			first, err := st.Forward(seq[:3], true)
			if err != nil {
				t.Fatal(err)
			}
			got := append([]float32(nil), first...)
			for _, tk := range seq[3:] {
				l, err := st.Forward([]int32{tk}, false)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, l...)
			}
			for i := range all {
				if math.Float32bits(all[i]) != math.Float32bits(got[i]) {
					t.Fatalf("token %d logit %d: batch %v, split %v", i/V, i%V, all[i], got[i])
				}
			}
			// Truncate and continue differently reproduces a fresh run.
			st.Truncate(4)
			l, err := st.Forward(seq[4:6], true)
			if err != nil {
				t.Fatal(err)
			}
			for i := range l {
				if math.Float32bits(l[i]) != math.Float32bits(all[4*V+i]) {
					t.Fatalf("after Truncate: logit %d differs", i)
				}
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		arch string
		edit func(w *gguf.Writer)
		want error
	}{
		{"unsupported arch", "gpt2", nil, ErrUnsupportedArch},
		{"experts in qwen2", "qwen2", func(w *gguf.Writer) { w.AddKV("qwen2.expert_count", gguf.Uint32(8)) }, ErrUnsupportedArch},
		{"deepseek2", "deepseek2", nil, ErrUnsupportedArch},
		{"experts without their tensors", "llama", func(w *gguf.Writer) {
			w.AddKV("llama.expert_count", gguf.Uint32(8))
			w.AddKV("llama.expert_used_count", gguf.Uint32(2))
		}, ErrBadModel},
		{"more experts used than there are", "qwen3moe", func(w *gguf.Writer) { w.AddKV("qwen3moe.expert_used_count", gguf.Uint32(5)) }, ErrBadModel},
		{"too many experts", "qwen3moe", func(w *gguf.Writer) { w.AddKV("qwen3moe.expert_count", gguf.Uint32(MaxExperts+1)) }, ErrBadModel},
		{"moe arch without experts", "olmoe", func(w *gguf.Writer) { w.AddKV("olmoe.expert_count", gguf.Uint32(0)) }, ErrBadModel},
		{"granite's shared expert", "mixtral", func(w *gguf.Writer) { w.AddKV("llama.expert_shared_feed_forward_length", gguf.Uint32(64)) }, ErrUnsupportedArch},
		{"experts as separate tensors", "mixtral", func(w *gguf.Writer) {
			w.AddTensor("blk.0.ffn_gate.0.weight", gguf.F32, []uint64{32, 64}, make([]byte, 4*32*64))
		}, ErrUnsupportedArch},
		{"experts of the wrong shape", "qwen3moe", func(w *gguf.Writer) { w.AddKV("qwen3moe.expert_feed_forward_length", gguf.Uint32(32)) }, ErrBadModel},
		{"missing metadata", "llama", func(w *gguf.Writer) { w.AddKV("llama.block_count", gguf.Uint32(0)) }, ErrBadModel},
		{"missing tensor", "qwen2", func(w *gguf.Writer) { w.AddKV("qwen2.block_count", gguf.Uint32(3)) }, ErrBadModel},
		{"unsupported type", "llama", func(w *gguf.Writer) {
			w.AddTensor("rope_freqs.weight", gguf.MXFP4, []uint64{32}, make([]byte, 17))
		}, ErrUnsupportedType},
		{"yarn", "llama", func(w *gguf.Writer) { w.AddKV("llama.rope.scaling.type", gguf.String("yarn")) }, ErrUnsupportedArch},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadMicro(t, microModel(t, c.arch, c.edit))
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if c.want == ErrUnsupportedType && !strings.Contains(err.Error(), "MXFP4") {
				t.Errorf("error %q does not name the type", err)
			}
			t.Log(err)
		})
	}
}

// FuzzModelLoad: any bytes either fail to load with an error or give a model that runs.
func FuzzModelLoad(f *testing.F) {
	for _, arch := range microArchs {
		f.Add(sizedModel(f, arch, 4, 4, 4, 1, nil)) // small inputs keep the fuzzer fast
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := gguf.Parse(data)
		if err != nil {
			return
		}
		m, err := Load(gf)
		if err != nil {
			return
		}
		if _, err := m.NewState(8).Forward([]int32{0, 1}, true); err != nil && !errors.Is(err, ErrBadToken) {
			t.Fatal(err)
		}
	})
}

// TestRopeMetadata: frequency base, linear scaling and llama3-style frequency
// factors are read and change the results.
func TestRopeMetadata(t *testing.T) {
	plain, err := loadMicro(t, microModel(t, "llama", nil))
	if err != nil {
		t.Fatal(err)
	}
	scaled, err := loadMicro(t, microModel(t, "llama", func(w *gguf.Writer) {
		w.AddKV("llama.rope.freq_base", gguf.Float32(500000))
		w.AddKV("llama.rope.scaling.type", gguf.String("linear"))
		w.AddKV("llama.rope.scaling.factor", gguf.Float32(4))
		f := []float32{1, 1, 2, 2, 4, 4, 8, 8}
		data := make([]byte, 4*len(f))
		kernels.QuantizeRow(data, kernels.F32, f)
		if err := w.AddTensor("rope_freqs.weight", gguf.F32, []uint64{8}, data); err != nil {
			t.Fatal(err)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := scaled.Config()
	if c.RopeBase != 500000 || c.RopeScale != 0.25 || len(scaled.ropeFreqs) != 8 || c.RopeNeox {
		t.Fatalf("config %+v, freqs %v", c, scaled.ropeFreqs)
	}
	seq := []int32{3, 1, 4, 1, 5}
	a, _ := plain.NewState(0).Forward(seq, false)
	b, _ := scaled.NewState(0).Forward(seq, false)
	same := true
	for i := range a {
		same = same && a[i] == b[i]
	}
	if same {
		t.Fatal("rope metadata changed nothing")
	}
}
