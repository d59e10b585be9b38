package genmodel_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/internal/testenv"
)

// TestGenerateLoadsAndRuns writes tiny models of every architecture (in q4_k_m) and
// every type (as llama), loads them with engine/model and runs a prompt through them.
// (engine/model's parity test runs every combination against llama.cpp.)
func TestGenerateLoadsAndRuns(t *testing.T) {
	if testenv.Race {
		t.Skip("pure numerics: make test runs it without the race detector")
	}
	dir := t.TempDir()
	for _, arch := range []string{"llama", "qwen2", "qwen3", "phi3"} {
		for _, typ := range genmodel.TypeNames() {
			if arch != "llama" && typ != "q4_k_m" {
				continue
			}
			t.Run(arch+"/"+typ, func(t *testing.T) {
				path := filepath.Join(dir, arch+"-"+typ+".gguf")
				if err := genmodel.Generate(genmodel.Options{Arch: arch, Preset: "tiny", Type: typ, Seed: 3}, path); err != nil {
					t.Fatal(err)
				}
				m, err := model.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				c := m.Config()
				if c.Arch != arch || c.Dim != 256 || c.Layers != 2 || c.Heads != 4 || c.KVHeads != 2 || c.FFN != 768 {
					t.Fatalf("config %+v", c)
				}
				logits, err := m.NewState(0).Forward([]int32{1, 300, 301, 302}, false)
				if err != nil {
					t.Fatal(err)
				}
				top := model.TopProbs(logits, 2)
				if top[0].P < 0.05 {
					t.Errorf("flat distribution: top %v", top)
				}
				for _, tp := range model.TopProbs(logits, 20) {
					if tp.ID == 2 || tp.ID < 259 {
						t.Errorf("control or byte token %d among the 20 most likely", tp.ID)
					}
				}
			})
		}
	}
}

// TestQ4KMMix checks the tensor types of a q4_k_m file against llama.cpp's mix.
func TestQ4KMMix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q4_k_m", Seed: 1}, path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]gguf.GGMLType{
		"token_embd.weight":      gguf.Q4_K,
		"output.weight":          gguf.Q6_K,
		"output_norm.weight":     gguf.F32,
		"blk.0.attn_q.weight":    gguf.Q4_K,
		"blk.0.attn_v.weight":    gguf.Q4_K, // use_more_bits(0, 2) is false
		"blk.1.attn_v.weight":    gguf.Q6_K, // use_more_bits(1, 2): 1 >= 7·2/8
		"blk.0.ffn_down.weight":  gguf.Q4_K,
		"blk.1.ffn_down.weight":  gguf.Q6_K,
		"blk.0.ffn_gate.weight":  gguf.Q4_K,
		"blk.1.attn_norm.weight": gguf.F32,
	}
	for name, typ := range want {
		ti, ok := f.Tensor(name)
		if !ok || ti.Type != typ {
			t.Errorf("%s: %v, want %v", name, ti, typ)
		}
	}
	if ft, _ := f.GetUint("general.file_type"); ft != 15 {
		t.Errorf("file_type %d", ft)
	}
}

// TestKQuantMixes checks the tensor types of q3_k_m and q5_k_m files against
// llama.cpp's mixes (the 16-layer 1b shape has use_more_bits layers 0, 1, 4, 7,
// 10, 13, 14, 15 and n_layer/16 = 1), and that every single-type name gives its
// type to the layers' matrices.
func TestKQuantMixes(t *testing.T) {
	for _, c := range []struct {
		typ   string
		ftype uint64
		want  map[string]gguf.GGMLType
	}{
		{"q5_k_m", 17, map[string]gguf.GGMLType{
			"token_embd.weight": gguf.Q5_K, "output.weight": gguf.Q6_K, "blk.0.attn_q.weight": gguf.Q5_K,
			"blk.1.attn_v.weight": gguf.Q6_K, "blk.2.attn_v.weight": gguf.Q5_K, "blk.4.ffn_down.weight": gguf.Q6_K,
			"blk.5.ffn_down.weight": gguf.Q5_K, "blk.5.ffn_up.weight": gguf.Q5_K, "blk.5.attn_output.weight": gguf.Q5_K,
		}},
		{"q3_k_m", 12, map[string]gguf.GGMLType{
			"token_embd.weight": gguf.Q3_K, "output.weight": gguf.Q6_K, "blk.0.attn_q.weight": gguf.Q3_K,
			"blk.1.attn_v.weight": gguf.Q5_K, "blk.2.attn_v.weight": gguf.Q4_K, "blk.0.ffn_down.weight": gguf.Q5_K,
			"blk.1.ffn_down.weight": gguf.Q4_K, "blk.3.ffn_gate.weight": gguf.Q3_K, "blk.3.attn_output.weight": gguf.Q4_K,
			"blk.3.attn_k.weight": gguf.Q3_K,
		}},
	} {
		t.Run(c.typ, func(t *testing.T) {
			for name, want := range c.want {
				layer := -1
				if strings.HasPrefix(name, "blk.") {
					layer, _ = strconv.Atoi(strings.Split(name, ".")[1])
				}
				if got := genmodel.TensorTypeForTest(c.typ, name, layer, 16, 2048); gguf.GGMLType(got) != want {
					t.Errorf("%s: %v, want %v", name, got, want)
				}
			}
			if genmodel.Types[c.typ] != uint32(c.ftype) {
				t.Errorf("file_type %d, want %d", genmodel.Types[c.typ], c.ftype)
			}
		})
	}
	for _, typ := range genmodel.TypeNames() {
		if strings.HasSuffix(typ, "_m") {
			continue
		}
		got := genmodel.TensorTypeForTest(typ, "blk.3.ffn_up.weight", 3, 16, 2048)
		if !strings.EqualFold(got.String(), typ) {
			t.Errorf("--type %s writes ffn_up as %v", typ, got)
		}
	}
}

// TestDeterministic: the same options give the same bytes.
func TestDeterministic(t *testing.T) {
	dir := t.TempDir()
	o := genmodel.Options{Arch: "qwen2", Preset: "tiny", Type: "q4_k_m", Seed: 9}
	a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	if err := genmodel.Generate(o, a); err != nil {
		t.Fatal(err)
	}
	if err := genmodel.Generate(o, b); err != nil {
		t.Fatal(err)
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Fatal("same options, different files")
	}
	o.Seed = 10
	if err := genmodel.Generate(o, b); err != nil {
		t.Fatal(err)
	}
	db, _ = os.ReadFile(b)
	if bytes.Equal(da, db) {
		t.Fatal("different seeds, same file")
	}
}

// TestVocabFromFile copies the Llama 2 vocabulary and gives it the ChatML template.
func TestVocabFromFile(t *testing.T) {
	vocab := testenv.SharedFile(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf")
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1, Vocab: vocab, Tied: true}, path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := gguf.Open(vocab)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, kv := range src.KV {
		if len(kv.Key) > 10 && kv.Key[:10] == "tokenizer." {
			got, ok := f.Get(kv.Key)
			if !ok || got.Len() != kv.Value.Len() {
				t.Errorf("%s not copied", kv.Key)
			}
		}
	}
	if tmpl, _ := f.GetString("tokenizer.chat_template"); tmpl != genmodel.ChatMLTemplate {
		if _, had := src.GetString("tokenizer.chat_template"); !had {
			t.Errorf("chat template %q", tmpl)
		}
	}
	if _, ok := f.Tensor("output.weight"); ok {
		t.Error("tied model has output.weight")
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Config(); c.Vocab != 32000 || !c.Tied {
		t.Fatalf("config %+v", c)
	}
	logits, err := m.NewState(0).Forward([]int32{1, 15043}, false)
	if err != nil {
		t.Fatal(err)
	}
	if top := model.TopProbs(logits, 1)[0]; top.ID == 2 || math.IsNaN(top.P) {
		t.Fatalf("top %v", top)
	}
}

func TestBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []genmodel.Options{
		{Arch: "gpt2", Preset: "tiny", Type: "f32"},
		{Arch: "llama", Preset: "7b", Type: "f32"},
		{Arch: "llama", Preset: "tiny", Type: "iq2_xxs"}, // a type without a quantizer of ours
		{Arch: "llama", Preset: "tiny", Type: "f32", Vocab: filepath.Join(dir, "missing.gguf")},
		{Arch: "mixtral", Preset: "125m", Type: "f32"},
		{Arch: "olmoe", Preset: "tiny", Type: "f32", Tied: true},
		{Arch: "llama", Preset: "tiny", Type: "f32", TieExperts: 2},
		{Arch: "qwen3moe", Preset: "tiny", Type: "f32", TieExperts: 9},
	} {
		if err := genmodel.Generate(o, filepath.Join(dir, "x.gguf")); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestPresetVocabSize: without a vocabulary file, the 125m preset gets a 32,000-token
// vocabulary (the built-in one, padded), every token distinct.
func TestPresetVocabSize(t *testing.T) {
	w, err := genmodel.Build(genmodel.Options{Arch: "llama", Preset: "125m", Type: "q4_0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.Get("tokenizer.ggml.tokens")
	toks, _ := v.Strings()
	seen := map[string]bool{}
	for _, s := range toks {
		if seen[s] {
			t.Fatalf("token %q twice", s)
		}
		seen[s] = true
	}
	if len(toks) != 32000 || toks[len(toks)-1] != "<|im_end|>" {
		t.Fatalf("%d tokens, last %q", len(toks), toks[len(toks)-1])
	}
	if ti, _ := f.Tensor("output.weight"); ti.Dims[1] != 32000 {
		t.Fatalf("output.weight %v", ti.Dims)
	}
}

// TestGenerateMoE writes the tiny mixtures of experts, loads them and checks their
// experts' hyperparameters, the router's type (F32, as llama.cpp keeps it) and the
// Q4_K_M mix on the stacked experts; and that TieExperts gives identical router rows.
func TestGenerateMoE(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		arch, ggufArch       string
		kvHeads, ffn, shared int
		normTopK             bool
	}{
		{"mixtral", "llama", 2, 256, 0, true},
		{"qwen2moe", "qwen2moe", 2, 512, 512, false},
		{"qwen3moe", "qwen3moe", 2, 512, 0, true},
		{"olmoe", "olmoe", 4, 256, 0, false},
	} {
		t.Run(c.arch, func(t *testing.T) {
			path := filepath.Join(dir, c.arch+".gguf")
			if err := genmodel.Generate(genmodel.Options{Arch: c.arch, Preset: "tiny", Type: "q4_k_m", Seed: 3, TieExperts: 2}, path); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := model.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg := m.Config()
			if cfg.Arch != c.ggufArch || cfg.Experts != 8 || cfg.ExpertsUsed != 2 || cfg.ExpertFFN != 256 || cfg.FFN != c.ffn ||
				cfg.SharedFFN != c.shared || cfg.KVHeads != c.kvHeads || cfg.NormTopK != c.normTopK {
				t.Fatalf("config %+v", cfg)
			}
			for name, typ := range map[string]gguf.GGMLType{
				"blk.0.ffn_gate_inp.weight":  gguf.F32,
				"blk.0.ffn_gate_exps.weight": gguf.Q4_K,
				"blk.0.ffn_down_exps.weight": gguf.Q4_K,
				"blk.1.ffn_down_exps.weight": gguf.Q6_K, // use_more_bits(1, 2)
			} {
				if ti, ok := f.Tensor(name); !ok || ti.Type != typ {
					t.Errorf("%s: %v, want %v", name, ti, typ)
				}
			}
			router, _ := f.Tensor("blk.0.ffn_gate_inp.weight")
			data := f.TensorData(router)
			row := len(data) / 8
			if !bytes.Equal(data[:row], data[row:2*row]) || bytes.Equal(data[:row], data[2*row:3*row]) {
				t.Error("TieExperts 2: router rows 0 and 1 not identical, or row 2 identical too")
			}
			logits, err := m.NewState(0).Forward([]int32{1, 300, 301, 302}, false)
			if err != nil {
				t.Fatal(err)
			}
			if top := model.TopProbs(logits, 1)[0]; top.P < 0.05 || math.IsNaN(top.P) {
				t.Errorf("top %v", top)
			}
		})
	}
}

// TestChatTemplateOption: Options.ChatTemplate replaces the vocabulary's chat
// template (one key, whether the vocabulary had one or not).
func TestChatTemplateOption(t *testing.T) {
	const tmpl = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
	for _, vocab := range []string{"", testenv.SharedFile(t, "testdata/tokenizer/ggml-vocab-qwen2.gguf")} {
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1, Vocab: vocab, ChatTemplate: tmpl}, path); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, kv := range f.KV {
			if kv.Key == "tokenizer.chat_template" {
				n++
			}
		}
		got, _ := f.GetString("tokenizer.chat_template")
		f.Close()
		if n != 1 || got != tmpl {
			t.Errorf("vocab %q: %d chat templates, %q", vocab, n, got)
		}
	}
}
