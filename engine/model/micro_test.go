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

// sizedModel is microModel with the sizes given (2 heads, 1 KV head).
func sizedModel(t testing.TB, arch string, dim, ffn, vocab, layers int, edit func(w *gguf.Writer)) []byte {
	t.Helper()
	const heads, kvHeads = 2, 1
	hd := dim / heads
	w := gguf.NewWriter()
	a := arch + "."
	w.AddKV("general.architecture", gguf.String(arch))
	w.AddKV(a+"context_length", gguf.Uint32(64))
	w.AddKV(a+"embedding_length", gguf.Uint32(uint32(dim)))
	w.AddKV(a+"block_count", gguf.Uint32(uint32(layers)))
	w.AddKV(a+"feed_forward_length", gguf.Uint32(uint32(ffn)))
	w.AddKV(a+"attention.head_count", gguf.Uint32(heads))
	w.AddKV(a+"attention.head_count_kv", gguf.Uint32(kvHeads))
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
			add(p+"ffn_gate.weight", dim, ffn)
			add(p+"ffn_up.weight", dim, ffn)
		}
		if arch == "qwen2" {
			add(p+"attn_q.bias", heads*hd)
			add(p+"attn_k.bias", kvHeads*hd)
			add(p+"attn_v.bias", kvHeads*hd)
		}
		if arch == "qwen3" {
			add(p+"attn_q_norm.weight", hd)
			add(p+"attn_k_norm.weight", hd)
		}
		add(p+"attn_output.weight", heads*hd, dim)
		add(p+"ffn_norm.weight", dim)
		add(p+"ffn_down.weight", ffn, dim)
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
	for _, arch := range Architectures {
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
		{"moe", "llama", func(w *gguf.Writer) { w.AddKV("llama.expert_count", gguf.Uint32(8)) }, ErrUnsupportedArch},
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
	for _, arch := range Architectures {
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
