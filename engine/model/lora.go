package model

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// ErrBadAdapter reports a LoRA adapter that is malformed or does not fit its base
// model: the error names the key or the tensor.
var ErrBadAdapter = errors.New("model: bad LoRA adapter")

// Adapter is a LoRA adapter loaded over a base Model, in llama.cpp's GGUF adapter
// format (convert_lora_to_gguf.py writes it, llama-adapter.cpp reads it):
// general.type = "adapter", adapter.type = "lora", general.architecture the base's,
// an optional float32 adapter.lora.alpha, and for each adapted base matrix W (ggml
// shape [in, out]) the pair W.lora_a of shape [in, rank] and W.lora_b of shape
// [rank, out]. The adapted projection of x is W·x + scale·B·(A·x), with scale =
// the user's scale × alpha / rank (alpha 0: the user's scale), rank per pair as
// llama.cpp takes it (lora_b's ne[0]).
//
// lmlite adapts the dense projections: attn_q, attn_k, attn_v (or the fused
// attn_qkv), attn_output, ffn_gate, ffn_up, ffn_down and output. An adapter of any
// other tensor (token_embd, the experts of a mixture) is refused at load time.
// The weights are views of the mapped file (a loaded adapter costs about its file
// size). An Adapter is read-only and safe for concurrent use; it must outlive the
// forward passes that use it, and it belongs to the Model it was loaded over.
type Adapter struct {
	base     *Model
	file     *gguf.File
	ownsFile bool
	alpha    float32
	layers   [][numProj]*loraPair // per layer; nil: the projection is not adapted
	output   *loraPair
	pairs    int
}

// LoRA is one adapter applied to a sequence at a user scale (llama.cpp's
// --lora-scaled FILE SCALE; 1 for --lora FILE). A sequence may carry several,
// their updates added in order.
type LoRA struct {
	Adapter *Adapter
	Scale   float32
}

// proj is a projection of a layer that an adapter may adapt.
type proj int

const (
	projQ    proj = iota // attn_q, or the fused attn_qkv
	projK                // attn_k
	projV                // attn_v
	projO                // attn_output
	projGate             // ffn_gate
	projUp               // ffn_up, or the fused gate|up
	projDown             // ffn_down
	numProj
)

// projNames maps a layer tensor's name (after "blk.N.") to its projection.
var projNames = map[string]proj{
	"attn_q.weight": projQ, "attn_qkv.weight": projQ, "attn_k.weight": projK, "attn_v.weight": projV,
	"attn_output.weight": projO, "ffn_gate.weight": projGate, "ffn_up.weight": projUp, "ffn_down.weight": projDown,
}

// loraPair is one adapted matrix's A (rank rows of in) and B (out rows of rank).
type loraPair struct {
	a, b kernels.Matrix
	rank int
}

// scale is the pair's factor at the user's scale s, computed as llama.cpp does in
// float32: s·alpha/rank, or s when alpha is 0.
func (p *loraPair) scale(alpha, s float32) float32 {
	if alpha == 0 {
		return s
	}
	return s * alpha / float32(p.rank)
}

// OpenAdapter opens a GGUF LoRA adapter and loads it over m; Close releases it.
func (m *Model) OpenAdapter(path string) (*Adapter, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	a, err := m.LoadAdapter(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	a.ownsFile = true
	return a, nil
}

// Close releases the adapter's file if OpenAdapter opened it. The Adapter must not
// be used afterwards.
func (a *Adapter) Close() error {
	if a.ownsFile {
		return a.file.Close()
	}
	return nil
}

// Alpha is the adapter's adapter.lora.alpha (0: none).
func (a *Adapter) Alpha() float32 { return a.alpha }

// Pairs is the number of adapted matrices.
func (a *Adapter) Pairs() int { return a.pairs }

// Size is the adapter's file size in bytes: what it costs in memory once loaded.
func (a *Adapter) Size() int64 { return a.file.Size() }

// Base is the model the adapter was loaded over.
func (a *Adapter) Base() *Model { return a.base }

// LoadAdapter builds an Adapter over m from an open GGUF file, which must stay open
// while the Adapter is used. It applies llama.cpp's checks (the file's types, the
// architecture, every tensor's pair, base tensor and shapes), each failure an
// ErrBadAdapter naming the key or tensor.
func (m *Model) LoadAdapter(f *gguf.File) (*Adapter, error) {
	if err := CheckAdapterHeader(f, m.file.Architecture()); err != nil {
		return nil, err
	}
	a := &Adapter{base: m, file: f, layers: make([][numProj]*loraPair, m.cfg.Layers)}
	if v, ok := f.Get("adapter.lora.alpha"); ok {
		x, ok := v.Float()
		if !ok || v.Type() != gguf.TypeFloat32 {
			return nil, fmt.Errorf("%w: adapter.lora.alpha is a %v, want float32", ErrBadAdapter, v.Type())
		}
		a.alpha = float32(x)
	}
	// Pair the tensors by base name, in file order (the first error is about the
	// first tensor in the file).
	type ab struct{ a, b *gguf.TensorInfo }
	pairs := map[string]*ab{}
	var names []string
	for i := range f.Tensors {
		t := &f.Tensors[i]
		base, isA := strings.CutSuffix(t.Name, ".lora_a")
		if !isA {
			var isB bool
			if base, isB = strings.CutSuffix(t.Name, ".lora_b"); !isB {
				return nil, fmt.Errorf("%w: tensor %s is neither a .lora_a nor a .lora_b", ErrBadAdapter, t.Name)
			}
		}
		p := pairs[base]
		if p == nil {
			p = &ab{}
			pairs[base] = p
			names = append(names, base)
		}
		if isA {
			p.a = t
		} else {
			p.b = t
		}
	}
	for _, name := range names {
		p := pairs[name]
		if p.a == nil || p.b == nil {
			return nil, fmt.Errorf("%w: tensor %s has only one of .lora_a and .lora_b", ErrBadAdapter, name)
		}
		w, ok := m.file.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("%w: tensor %s is not in the base model", ErrBadAdapter, name)
		}
		slot, err := a.slot(name)
		if err != nil {
			return nil, err
		}
		wd, ad, bd := dims2(w), dims2(p.a), dims2(p.b)
		if len(p.a.Dims) > 2 || len(p.b.Dims) > 2 || ad[0] != wd[0] || bd[1] != wd[1] {
			return nil, fmt.Errorf("%w: tensor %s: lora_a %v and lora_b %v do not fit the base's %v (want [%d, rank] and [rank, %d])",
				ErrBadAdapter, name, p.a.Dims, p.b.Dims, w.Dims, wd[0], wd[1])
		}
		if ad[1] != bd[0] {
			return nil, fmt.Errorf("%w: tensor %s: lora_a's rank %d is not lora_b's %d (lora_a not transposed?)", ErrBadAdapter, name, ad[1], bd[0])
		}
		in, out, rank := int(wd[0]), int(wd[1]), int(ad[1])
		pr := &loraPair{rank: rank}
		if pr.a, err = adapterMatrix(f, p.a, in, rank); err == nil {
			pr.b, err = adapterMatrix(f, p.b, rank, out)
		}
		if err != nil {
			return nil, err
		}
		*slot = pr
		a.pairs++
	}
	return a, nil
}

// CheckAdapterHeader checks an adapter file's metadata against a base model of
// architecture arch (its general.architecture): the checks LoadAdapter makes
// before the tensors', for a configuration to be refused before any model loads.
func CheckAdapterHeader(f *gguf.File, arch string) error {
	if t, _ := f.GetString("general.type"); t != "adapter" {
		return fmt.Errorf("%w: general.type is %q, want \"adapter\"", ErrBadAdapter, t)
	}
	if t, _ := f.GetString("adapter.type"); t != "lora" {
		return fmt.Errorf("%w: adapter.type is %q, want \"lora\"", ErrBadAdapter, t)
	}
	if a := f.Architecture(); a != arch {
		return fmt.Errorf("%w: architecture %q, the base model's is %q", ErrBadAdapter, a, arch)
	}
	return nil
}

// slot is where the pair of the base tensor name goes, or an error for a tensor
// lmlite does not adapt.
func (a *Adapter) slot(name string) (**loraPair, error) {
	if name == "output.weight" {
		return &a.output, nil
	}
	var li int
	var rest string
	if n, _ := fmt.Sscanf(name, "blk.%d.", &li); n == 1 {
		rest = strings.TrimPrefix(name, fmt.Sprintf("blk.%d.", li))
	}
	p, ok := projNames[rest]
	if !ok || li < 0 || li >= len(a.layers) || a.base.layers[li].moe != nil && p >= projGate {
		return nil, fmt.Errorf("%w: tensor %s: lmlite adapts only the dense projections (attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_gate, ffn_up, ffn_down, output)", ErrBadAdapter, name)
	}
	return &a.layers[li][p], nil
}

// dims2 is a tensor's first two ggml dimensions (1 where absent).
func dims2(t *gguf.TensorInfo) [2]uint64 {
	d := [2]uint64{1, 1}
	copy(d[:], t.Dims)
	return d
}

// adapterMatrix views an adapter tensor of rows×cols as a Matrix.
func adapterMatrix(f *gguf.File, t *gguf.TensorInfo, cols, rows int) (kernels.Matrix, error) {
	typ := kernels.Type(t.Type)
	if !kernels.ValidRow(typ, cols) {
		return kernels.Matrix{}, fmt.Errorf("%w: tensor %s: rows of %d elements cannot be %v (supported: %v)", ErrBadAdapter, t.Name, cols, t.Type, kernels.SupportedTypes())
	}
	m := kernels.Matrix{Type: typ, Rows: rows, Cols: cols, Data: f.TensorData(t)}
	if err := m.Check(); err != nil {
		return kernels.Matrix{}, fmt.Errorf("%w: tensor %s: %w", ErrBadAdapter, t.Name, err)
	}
	return m, nil
}

// checkLoRAs checks that a sequence's adapters belong to m.
func (m *Model) checkLoRAs(loras []LoRA) error {
	for i, l := range loras {
		if l.Adapter == nil || l.Adapter.base != m {
			return fmt.Errorf("model: LoRA %d was not loaded over this model", i)
		}
	}
	return nil
}

// lora adds to dst (out values per row) each part's adapters' updates of the
// projection pr of layer li (li < 0: the output projection, whose rows are the
// parts' logits rows; else their tokens), whose input is x (in values per row): for
// each row, scale·B·(A·x). The rows of all the parts on the same adapter go as one
// product of A then one of B (each weight read once for all of them, the F16
// kernels taking two tokens at once), every row's output in the same order as it
// would have alone (kernels.MatMulsVecDot: ggml_vec_dot's orders, as llama.cpp's
// build_lora_mm decodes), so a row's bits depend only on its own sequence, never
// on the batch; the A products go as one kernels.MatMulsVecDot group, then the B
// products as another (on the calling goroutine for a step of up to
// loraSerialRows rows).
func (w *scratch) lora(parts []part, li int, pr proj, dst []float32, out int, x []float32, in int) {
	// The (part, adapter) entries with rows, in part order, each in the group of
	// its pair (loraGroups, in order of first use) at row off of the group's.
	w.loraRow, w.loraGroups = w.loraRow[:0], w.loraGroups[:0]
	r0 := 0
	for pi := range parts {
		p := &parts[pi]
		nr := len(p.tokens)
		if li < 0 {
			nr = p.logits
		}
		for _, l := range p.loras {
			pair := l.Adapter.output
			if li >= 0 {
				pair = l.Adapter.layers[li][pr]
			}
			if pair == nil || nr == 0 {
				continue
			}
			g := 0
			for g < len(w.loraGroups) && w.loraGroups[g].pair != pair {
				g++
			}
			if g == len(w.loraGroups) {
				w.loraGroups = append(w.loraGroups, loraGroup{pair: pair, r0: r0})
			}
			grp := &w.loraGroups[g]
			w.loraRow = append(w.loraRow, loraRows{r0: r0, nr: nr, s: pair.scale(l.Adapter.alpha, l.Scale), g: g, off: grp.rows})
			if grp.r0+grp.rows != r0 {
				grp.gathered = true // its rows are not one run of x
			}
			grp.rows += nr
		}
		r0 += nr
	}
	if len(w.loraGroups) == 0 {
		return
	}
	// The groups' buffers: A·x (rows·rank), B·(A·x) (rows·out), and for a group
	// whose rows are apart in x, their copy end to end.
	nt, nd, nx := 0, 0, 0
	for i := range w.loraGroups {
		g := &w.loraGroups[i]
		nt += g.rows * g.pair.rank
		nd += g.rows * out
		if g.gathered {
			nx += g.rows * in
		}
	}
	w.loraT, w.loraD, w.loraX = growTo(w.loraT, nt), growTo(w.loraD, nd), growTo(w.loraX, nx)
	w.loraA, w.loraB = w.loraA[:0], w.loraB[:0]
	ot, od, ox := 0, 0, 0
	for i := range w.loraGroups {
		g := &w.loraGroups[i]
		gx := x[g.r0*in : (g.r0+g.rows)*in]
		if g.gathered {
			gx = w.loraX[ox : ox+g.rows*in]
			ox += g.rows * in
		}
		g.od = od
		t := w.loraT[ot : ot+g.rows*g.pair.rank]
		w.loraA = append(w.loraA, kernels.Product{W: g.pair.a, X: gx, Dst: t, NTok: g.rows})
		w.loraB = append(w.loraB, kernels.Product{W: g.pair.b, X: t, Dst: w.loraD[od : od+g.rows*out], NTok: g.rows})
		ot, od = ot+g.rows*g.pair.rank, od+g.rows*out
	}
	for _, e := range w.loraRow {
		if g := &w.loraGroups[e.g]; g.gathered {
			copy(w.loraA[e.g].X[e.off*in:(e.off+e.nr)*in], x[e.r0*in:(e.r0+e.nr)*in])
		}
	}
	// A decode step's LoRA products (a few rows each, rank 16) are a few % of its
	// work, less than the two starts of the pool's workers they would cost per
	// projection: they run on the calling goroutine (BenchmarkLoRADecode16,
	// docs/PERFORMANCE.md). A prefill's are spread over the workers.
	// The products in ggml's vec_dot order, as llama.cpp decodes (MatMulsVecDot).
	serial := r0 <= loraSerialRows
	kernels.MatMulsVecDot(w.loraA, serial)
	kernels.MatMulsVecDot(w.loraB, serial)
	// The updates in part order, each entry's after the one before (a sequence's
	// adapters add in their order), each as build_lora_mm adds it: the product
	// scaled (ggml_scale), rounded, then added (ggml_add): kernels.AddScaled.
	for _, e := range w.loraRow {
		g := &w.loraGroups[e.g]
		kernels.AddScaled(dst[e.r0*out:(e.r0+e.nr)*out], w.loraD[g.od+e.off*out:g.od+(e.off+e.nr)*out], e.s)
	}
}

// loraSerialRows is the most rows of a step whose LoRA products run on the
// calling goroutine (MatMulsVecDot's serial form) rather than the pool's workers.
const loraSerialRows = 64

// loraRows is where one (part, adapter) update goes: rows r0…r0+nr-1, at scale
// s, from rows off… of group g's product.
type loraRows struct {
	r0, nr int
	s      float32
	g, off int
}

// loraGroup is the rows of a step's parts on one adapter pair: rows rows, the
// first at row r0 of the input; gathered when they are not one run of it (they
// are then copied end to end); its B·(A·x) at od of loraD.
type loraGroup struct {
	pair     *loraPair
	r0, rows int
	gathered bool
	od       int
}
