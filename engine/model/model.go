package model

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// Model is a loaded transformer: its configuration and views of its weights inside
// the GGUF file (never copied, except the small norm and bias vectors, which are
// decoded to float32). A Model is read-only and safe for concurrent use by any
// number of States.
type Model struct {
	cfg       Config
	file      *gguf.File // closed by Close when the Model opened it
	ownsFile  bool
	tokEmbd   kernels.Matrix
	output    kernels.Matrix
	outputB   []float32 // optional output.bias
	outNorm   []float32
	ropeFreqs []float32 // optional llama3-style frequency factors (rope_freqs.weight)
	layers    []layer
	load      []atomic.Uint64 // MoE: tokens routed to each expert, Layers×Experts
}

type layer struct {
	attnNorm     []float32
	wq, wk, wv   kernels.Matrix // wq holds the fused Q|K|V rows when Config.Fused
	wo           kernels.Matrix
	bq, bk, bv   []float32 // qwen2
	qNorm, kNorm []float32 // qwen3, per head
	ffnNorm      []float32
	gate, up     kernels.Matrix // up holds gate|up rows when Config.Fused
	down         kernels.Matrix
	moe          *moeLayer // the experts instead of gate, up and down (Config.MoE)
}

// Config returns the model's hyperparameters.
func (m *Model) Config() Config { return m.cfg }

// Open opens a GGUF file and loads the model in it; Close releases the file.
func Open(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m, err := Load(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	m.ownsFile = true
	return m, nil
}

// Close releases the file if Open opened it. The Model must not be used afterwards.
func (m *Model) Close() error {
	if m.ownsFile {
		return m.file.Close()
	}
	return nil
}

// Load builds a Model over an open GGUF file, which must stay open while the Model
// is used. It checks the architecture, the hyperparameters and every tensor's type
// and shape.
func Load(f *gguf.File) (*Model, error) {
	cfg, err := readConfig(f)
	if err != nil {
		return nil, err
	}
	m := &Model{file: f}
	l := loader{f: f}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || len(emb.Shape()) != 2 {
		return nil, fmt.Errorf("%w: token_embd.weight missing or not a matrix", ErrBadModel)
	}
	cfg.Vocab = int(emb.Shape()[1])
	m.tokEmbd = l.matrix("token_embd.weight", cfg.Dim, cfg.Vocab)
	if _, ok := f.Tensor("output.weight"); ok {
		m.output = l.matrix("output.weight", cfg.Dim, cfg.Vocab)
	} else {
		cfg.Tied = true
		m.output = m.tokEmbd
	}
	if _, ok := f.Tensor("output.bias"); ok {
		m.outputB = l.vector("output.bias", cfg.Vocab)
	}
	m.outNorm = l.vector("output_norm.weight", cfg.Dim)
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		m.ropeFreqs = l.vector("rope_freqs.weight", cfg.RopeDims/2)
	}
	m.layers = make([]layer, cfg.Layers)
	qd, kvd := cfg.qDim(), cfg.kvDim()
	for i := range m.layers {
		ly := &m.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		ly.attnNorm = l.vector(p+"attn_norm.weight", cfg.Dim)
		switch {
		case cfg.Fused:
			ly.wq = l.matrix(p+"attn_qkv.weight", cfg.Dim, qd+2*kvd)
			ly.up = l.matrix(p+"ffn_up.weight", cfg.Dim, 2*cfg.FFN)
		default:
			ly.wq = l.matrix(p+"attn_q.weight", cfg.Dim, qd)
			ly.wk = l.matrix(p+"attn_k.weight", cfg.Dim, kvd)
			ly.wv = l.matrix(p+"attn_v.weight", cfg.Dim, kvd)
		}
		if cfg.MoE() {
			ly.moe = l.moeLayer(p, &cfg)
		} else if !cfg.Fused {
			ly.gate = l.matrix(p+"ffn_gate.weight", cfg.Dim, cfg.FFN)
			ly.up = l.matrix(p+"ffn_up.weight", cfg.Dim, cfg.FFN)
			ly.down = l.matrix(p+"ffn_down.weight", cfg.FFN, cfg.Dim)
		}
		if _, ok := f.Tensor(p + "attn_q.bias"); ok || cfg.QKVBias {
			ly.bq = l.vector(p+"attn_q.bias", qd)
			ly.bk = l.vector(p+"attn_k.bias", kvd)
			ly.bv = l.vector(p+"attn_v.bias", kvd)
		}
		if cfg.QKNorm {
			ly.qNorm = l.vector(p+"attn_q_norm.weight", cfg.HeadDim)
			ly.kNorm = l.vector(p+"attn_k_norm.weight", cfg.HeadDim)
		}
		if cfg.QKNormRow {
			ly.qNorm = l.vector(p+"attn_q_norm.weight", qd)
			ly.kNorm = l.vector(p+"attn_k_norm.weight", kvd)
		}
		ly.wo = l.matrix(p+"attn_output.weight", qd, cfg.Dim)
		ly.ffnNorm = l.vector(p+"ffn_norm.weight", cfg.Dim)
		if cfg.Fused {
			ly.down = l.matrix(p+"ffn_down.weight", cfg.FFN, cfg.Dim)
		}
	}
	for _, b := range l.packed {
		f.Release(b)
	}
	if l.err != nil {
		return nil, l.err
	}
	if cfg.MoE() {
		m.load = make([]atomic.Uint64, cfg.Layers*cfg.Experts)
	}
	m.cfg = cfg
	return m, nil
}

// loader looks tensors up and keeps the first error.
type loader struct {
	f   *gguf.File
	err error
	// packed are the file's bytes of the matrices packQ4K copied, released
	// (gguf.File.Release) at once and again when every tensor is read: a read
	// of a neighbour after a release maps its large folio again, the released
	// pages included.
	packed [][]byte
}

func (l *loader) info(name string, dims ...int) *gguf.TensorInfo {
	if l.err != nil {
		return nil
	}
	t, ok := l.f.Tensor(name)
	if !ok {
		l.err = fmt.Errorf("%w: tensor %s is missing", ErrBadModel, name)
		return nil
	}
	if !kernels.Supported(kernels.Type(t.Type)) {
		l.err = fmt.Errorf("%w %v (tensor %s; supported: %v)", ErrUnsupportedType, t.Type, name, kernels.SupportedTypes())
		return nil
	}
	want := make([]uint64, len(dims))
	for i, d := range dims {
		want[i] = uint64(d)
	}
	// Shapes compare as ggml's: trailing dimensions of length 1 are absent.
	if have, want := t.Shape(), gguf.TrimShape(want); !slices.Equal(have, want) {
		l.err = fmt.Errorf("%w: tensor %s has shape %v, want %v", ErrBadModel, name, have, want)
		return nil
	}
	if !kernels.ValidRow(kernels.Type(t.Type), dims[0]) {
		l.err = fmt.Errorf("%w: tensor %s: rows of %d elements cannot be %v", ErrBadModel, name, dims[0], t.Type)
		return nil
	}
	return t
}

func (l *loader) matrix(name string, cols, rows int) kernels.Matrix {
	t := l.info(name, cols, rows)
	if t == nil {
		return kernels.Matrix{}
	}
	m := kernels.Matrix{Type: kernels.Type(t.Type), Rows: rows, Cols: cols, Data: l.f.TensorData(t)}
	if err := m.Check(); err != nil {
		l.err = fmt.Errorf("%w: tensor %s: %w", ErrBadModel, name, err)
		return m
	}
	if plain := m.Data; packQ4K(l.f, &m, name) {
		l.f.Release(plain)
		l.packed = append(l.packed, plain)
	}
	return m
}

// vector decodes a one-dimensional tensor of n elements to float32.
func (l *loader) vector(name string, n int) []float32 {
	t := l.info(name, n)
	if t == nil {
		return nil
	}
	m := kernels.Matrix{Type: kernels.Type(t.Type), Rows: 1, Cols: n, Data: l.f.TensorData(t)}
	if err := m.Check(); err != nil {
		l.err = fmt.Errorf("%w: tensor %s: %w", ErrBadModel, name, err)
		return nil
	}
	v := make([]float32, n)
	kernels.DequantizeRow(v, m.Type, m.Data)
	return v
}
