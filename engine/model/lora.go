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
// each row, scale·B·(A·x). It is loraN of one target.
func (w *scratch) lora(parts []part, li int, pr proj, dst []float32, out int, x []float32, in int) {
	w.loraTs[0] = loraTarget{pr: pr, dst: dst, out: out}
	w.loraN(parts, li, w.loraTs[:1], x, in)
}

// lora3 is loraN of the three projections of one input (attn_q, attn_k and
// attn_v; ffn_gate and ffn_up with a nil third dst).
func (w *scratch) lora3(parts []part, li int, t0, t1, t2 loraTarget, x []float32, in int) {
	w.loraTs[0], w.loraTs[1], w.loraTs[2] = t0, t1, t2
	ts := w.loraTs[:3]
	if t2.dst == nil {
		ts = ts[:2]
	}
	w.loraN(parts, li, ts, x, in)
}

// loraTarget is one projection that loraN updates: its output dst, out values a
// row.
type loraTarget struct {
	pr  proj
	dst []float32
	out int
}

// loraN adds to each target's dst the parts' adapters' updates of its projection
// of layer li (li < 0: the output projection, whose rows are the parts' logits
// rows; else their tokens), all the targets taking the same input x (in values
// per row): for each row, scale·B·(A·x). The rows of all the parts on the same
// adapter go as one product of A then one of B per target (each weight read once
// for them all, the F16 kernels taking two tokens at once; the adapter's rows,
// copied end to end where they are apart in x, and their rounded form serve all
// the targets), every row's output in the same order as it would have alone
// (kernels.MatMulsVecDot: ggml_vec_dot's orders, as llama.cpp's build_lora_mm
// decodes), so a row's bits depend only on its own sequence, never on the batch.
// All the A products go as one kernels.MatMulsVecDot group, then the B products
// as another (on the calling goroutine for a step of up to loraSerialRows rows).
func (w *scratch) loraN(parts []part, li int, ts []loraTarget, x []float32, in int) {
	// The (part, adapter) entries with rows, in part order, each in the set of
	// its adapter (loraSets, in order of first use) at row off of the set's.
	w.loraRow, w.loraSets = w.loraRow[:0], w.loraSets[:0]
	r0 := 0
	for pi := range parts {
		p := &parts[pi]
		nr := len(p.tokens)
		if li < 0 {
			nr = p.logits
		}
		if nr == 0 {
			continue
		}
		for _, l := range p.loras {
			if !l.Adapter.adapts(li, ts) {
				continue
			}
			si := 0
			for si < len(w.loraSets) && w.loraSets[si].a != l.Adapter {
				si++
			}
			if si == len(w.loraSets) {
				w.loraSets = append(w.loraSets, loraSet{a: l.Adapter, r0: r0})
			}
			set := &w.loraSets[si]
			w.loraRow = append(w.loraRow, loraRows{r0: r0, nr: nr, scale: l.Scale, set: si, off: set.rows})
			if set.r0+set.rows != r0 {
				set.gathered = true // its rows are not one run of x
			}
			set.rows += nr
		}
		r0 += nr
	}
	if len(w.loraSets) == 0 {
		return
	}
	// The sets' inputs: x's run of rows, or their copy end to end.
	nx := 0
	for i := range w.loraSets {
		if st := &w.loraSets[i]; st.gathered {
			nx += st.rows * in
		}
	}
	w.loraX = growTo(w.loraX, nx)
	ox := 0
	for i := range w.loraSets {
		st := &w.loraSets[i]
		st.x = x[st.r0*in : (st.r0+st.rows)*in]
		if st.gathered {
			st.x = w.loraX[ox : ox+st.rows*in]
			ox += st.rows * in
		}
	}
	for _, e := range w.loraRow {
		if st := &w.loraSets[e.set]; st.gathered {
			copy(st.x[e.off*in:(e.off+e.nr)*in], x[e.r0*in:(e.r0+e.nr)*in])
		}
	}
	// The products: per target, per set whose adapter adapts the target's
	// projection, A·x (rows·rank values of loraT) and B·(A·x) (rows·out of loraD).
	w.loraA, w.loraB, w.loraOut = w.loraA[:0], w.loraB[:0], w.loraOut[:0]
	nt, nd := 0, 0
	for ti := range ts {
		for si := range w.loraSets {
			st := &w.loraSets[si]
			if pair := st.a.pair(li, ts[ti].pr); pair != nil {
				nt += st.rows * pair.rank
				nd += st.rows * ts[ti].out
			}
		}
	}
	w.loraT, w.loraD = growTo(w.loraT, nt), growTo(w.loraD, nd)
	ot, od := 0, 0
	for ti := range ts {
		for si := range w.loraSets {
			st := &w.loraSets[si]
			pair := st.a.pair(li, ts[ti].pr)
			if pair == nil {
				continue
			}
			t := w.loraT[ot : ot+st.rows*pair.rank]
			d := w.loraD[od : od+st.rows*ts[ti].out]
			w.loraA = append(w.loraA, kernels.Product{W: pair.a, X: st.x, Dst: t, NTok: st.rows})
			w.loraB = append(w.loraB, kernels.Product{W: pair.b, X: t, Dst: d, NTok: st.rows})
			w.loraOut = append(w.loraOut, loraOut{target: ti, set: si, pair: pair, d: d})
			ot, od = ot+len(t), od+len(d)
		}
	}
	// A step of a few rows runs its LoRA products (rank 16: a few % of its work)
	// on the calling goroutine, where the pool's two starts per projection would
	// cost more; a batch's and a prefill's are spread over the workers
	// (loraSerialRows, BenchmarkLoRADecode16, docs/PERFORMANCE.md).
	// The products in ggml's vec_dot order, as llama.cpp decodes (MatMulsVecDot).
	serial := r0 <= loraSerialRows
	kernels.MatMulsVecDot(w.loraA, serial)
	kernels.MatMulsVecDot(w.loraB, serial)
	// The updates of each target in part order, each entry's after the one before
	// (a sequence's adapters add in their order), each as build_lora_mm adds it:
	// the product scaled (ggml_scale), rounded, then added (ggml_add):
	// kernels.AddScaled.
	for ti := range ts {
		tg := &ts[ti]
		for _, e := range w.loraRow {
			o := w.loraOutOf(ti, e.set)
			if o == nil {
				continue
			}
			s := o.pair.scale(w.loraSets[e.set].a.alpha, e.scale)
			kernels.AddScaled(tg.dst[e.r0*tg.out:(e.r0+e.nr)*tg.out], o.d[e.off*tg.out:(e.off+e.nr)*tg.out], s)
		}
	}
}

// loraOutOf is the product of target ti and set si, or nil.
func (w *scratch) loraOutOf(ti, si int) *loraOut {
	for i := range w.loraOut {
		if o := &w.loraOut[i]; o.target == ti && o.set == si {
			return o
		}
	}
	return nil
}

// pair is the adapter's pair of projection pr of layer li (li < 0: the output
// projection), or nil.
func (a *Adapter) pair(li int, pr proj) *loraPair {
	if li < 0 {
		return a.output
	}
	return a.layers[li][pr]
}

// adapts reports whether the adapter adapts one of the targets' projections.
func (a *Adapter) adapts(li int, ts []loraTarget) bool {
	for _, t := range ts {
		if a.pair(li, t.pr) != nil {
			return true
		}
	}
	return false
}

// loraSerialRows is the most rows of a step whose LoRA products run on the
// calling goroutine (MatMulsVecDot's serial form) rather than the pool's workers.
// A variable for BenchmarkLoRADecode16 (LMLITE_BENCH_LORA_SERIAL_ROWS). On a
// quiet machine at -cpu 2 (Zen4, 3 process pairs, 16 rows over 8 rank-16
// adapters) the pool gave the adapters' step 1.11–1.26× the tokens/s of the
// calling goroutine (lora/base 0.86 against 0.71, docs/PERFORMANCE.md); on a
// machine loaded by other processes it took twice the CPU and halved them, its
// workers' start and spinning costing more than the second thread gave back.
// Steps of a few rows (a lone request decoding) stay on the calling goroutine:
// loaded, at -cpu 2, steps of 8 and 4 rows (one per adapter) gave lora/base CPU
// 0.92–1.09 there against 0.38–0.52 on the pool; 1 row no clear answer (0.73–0.77
// against 0.61–0.76) (Zen3, AVX2, two process pairs each, LMLITE_BENCH_PARALLEL;
// not measured quiet).
var loraSerialRows = 8

// loraRows is one (part, adapter) entry: rows r0…r0+nr-1 at the user's scale,
// rows off… of set set's.
type loraRows struct {
	r0, nr int
	scale  float32
	set    int
	off    int
}

// loraSet is the rows of a step's parts on one adapter: rows rows, the first at
// row r0 of the input; gathered when they are not one run of it (x is then their
// copy end to end, else x's run).
type loraSet struct {
	a        *Adapter
	r0, rows int
	gathered bool
	x        []float32
}

// loraOut is the B·(A·x) of target target and set set, by pair pair: d.
type loraOut struct {
	target, set int
	pair        *loraPair
	d           []float32
}
