package model

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/kernels"
)

// Mixture of experts.
//
// Routing is a pure function of one token's router logits (route): the router is a
// float32 matrix product (each output row the same code in the same order whatever
// the batch), the softmax sums in float64 in expert order, and the top-k is a total
// order: the higher probability first, the lower expert index among equals. So a token
// picks the same experts, in the same order, with the same gate weights, alone or in
// any batch, with any thread count, and exact ties are decided the same way every time.
// That is llama.cpp's order where it is defined: its CPU top-k (ggml_argsort_top_k) is
// std::sort with a strict "greater" comparison, which libstdc++ runs as an insertion
// sort, stable, for up to 16 elements, so that up to 16 experts it too takes the lower
// index first among equals; with more, introsort leaves equals in an order of its own.
//
// Expert packing: in a batch step the tokens routed to one expert are gathered and go
// through that expert's three matrices as one matrix product (one pass over its
// weights for all its tokens); its output rows are scaled by their gate weights and
// kept in their token's top-k slot, and each token's output is then summed over its
// slots in top-k order, as llama.cpp's build_moe_ffn adds its views of the weighted
// experts (((e₀ + e₁) + e₂) + …): the same order whatever else is in the batch.
// Experts no token chose are not touched: their weights stay in the mapped file,
// unread.

// moeLayer is one layer's experts: views of the stacked tensors in the mapped file.
type moeLayer struct {
	router         kernels.Matrix   // ffn_gate_inp: Experts rows of Dim
	gate, up, down []kernels.Matrix // per expert, views into ffn_{gate,up,down}_exps
	// qwen2moe's shared expert, run on every token, and its gate (one row of Dim).
	shGate, shUp, shDown, shInp kernels.Matrix
}

// moeLayer loads layer p's router, experts and shared expert.
func (l *loader) moeLayer(p string, c *Config) *moeLayer {
	if _, ok := l.f.Tensor(p + "ffn_gate.0.weight"); ok && l.err == nil {
		l.err = fmt.Errorf("%w: %sffn_gate.0.weight: experts as separate tensors (an old conversion; convert the model again)", ErrUnsupportedArch, p)
	}
	e := &moeLayer{router: l.matrix(p+"ffn_gate_inp.weight", c.Dim, c.Experts)}
	e.gate = l.experts(p+"ffn_gate_exps.weight", c.Dim, c.ExpertFFN, c.Experts)
	e.up = l.experts(p+"ffn_up_exps.weight", c.Dim, c.ExpertFFN, c.Experts)
	e.down = l.experts(p+"ffn_down_exps.weight", c.ExpertFFN, c.Dim, c.Experts)
	if c.SharedFFN > 0 {
		e.shInp = l.row(p+"ffn_gate_inp_shexp.weight", c.Dim)
		e.shGate = l.matrix(p+"ffn_gate_shexp.weight", c.Dim, c.SharedFFN)
		e.shUp = l.matrix(p+"ffn_up_shexp.weight", c.Dim, c.SharedFFN)
		e.shDown = l.matrix(p+"ffn_down_shexp.weight", c.SharedFFN, c.Dim)
	}
	return e
}

// experts returns views of the n matrices (rows×cols each) stacked in a tensor of
// shape {cols, rows, n}.
func (l *loader) experts(name string, cols, rows, n int) []kernels.Matrix {
	t := l.info(name, cols, rows, n)
	if t == nil {
		return nil
	}
	data := l.f.TensorData(t)
	typ := kernels.Type(t.Type)
	size := rows * typ.RowBytes(cols)
	if len(data) != n*size {
		l.err = fmt.Errorf("%w: tensor %s has %d bytes, want %d", ErrBadModel, name, len(data), n*size)
		return nil
	}
	ms := make([]kernels.Matrix, n)
	for e := range ms {
		ms[e] = kernels.Matrix{Type: typ, Rows: rows, Cols: cols, Data: data[e*size : (e+1)*size : (e+1)*size]}
		if err := ms[e].Check(); err != nil {
			l.err = fmt.Errorf("%w: tensor %s expert %d: %w", ErrBadModel, name, e, err)
			return nil
		}
	}
	return ms
}

// row returns a one-dimensional tensor of n elements as a matrix of one row.
func (l *loader) row(name string, n int) kernels.Matrix {
	t := l.info(name, n)
	if t == nil {
		return kernels.Matrix{}
	}
	m := kernels.Matrix{Type: kernels.Type(t.Type), Rows: 1, Cols: n, Data: l.f.TensorData(t)}
	if err := m.Check(); err != nil {
		l.err = fmt.Errorf("%w: tensor %s: %w", ErrBadModel, name, err)
	}
	return m
}

// route picks one token's experts from its router logits (one per expert, replaced
// by their softmax): sel gets the len(sel) most probable experts, the most probable
// first and the lower index first among equal probabilities; wts their
// probabilities, renormalised to sum 1 when norm (the sum taken in float64 in sel's
// order and clamped below at binary16's smallest normal, as llama.cpp does).
func route(sel []int32, wts, logits []float32, norm bool) {
	kernels.Softmax(logits)
	for k := range sel {
		best := -1
	scan:
		for e, p := range logits {
			for _, s := range sel[:k] {
				if int(s) == e {
					continue scan
				}
			}
			if best < 0 || p > logits[best] {
				best = e
			}
		}
		sel[k], wts[k] = int32(best), logits[best]
	}
	if !norm {
		return
	}
	var sum float64
	for _, w := range wts {
		sum += float64(w)
	}
	s := max(float32(sum), 6.103515625e-5)
	for k := range wts {
		wts[k] /= s
	}
}

// moe runs layer li's experts (and shared expert) on the n normalised rows of xn and
// adds their output to x.
func (w *scratch) moe(m *Model, li int, x, xn []float32, n int) {
	c := &m.cfg
	e := m.layers[li].moe
	E, K, dim, F := c.Experts, c.ExpertsUsed, c.Dim, c.ExpertFFN
	logits := w.rLogits[:n*E]
	// In the order llama.cpp's AVX-512 builds decode F32 routers in: a last-bit
	// difference can tip the choice between two near-equal experts (issue 32).
	kernels.MatMulVecDotF32(logits, e.router, xn, n)
	sel, wts := w.sel[:n*K], w.wts[:n*K]
	for i := 0; i < n; i++ {
		route(sel[i*K:(i+1)*K], wts[i*K:(i+1)*K], logits[i*E:(i+1)*E], c.NormTopK)
	}

	// Pack: expert ex's tokens (in token order) and their gate weights are
	// eTok[start[ex]:start[ex+1]] and eW[…].
	start, fill := w.eStart[:E+1], w.eFill[:E]
	clear(start)
	for _, s := range sel {
		start[s+1]++
	}
	for ex := 1; ex <= E; ex++ {
		start[ex] += start[ex-1]
	}
	copy(fill, start[:E])
	eTok, eSlot, eW := w.eTok[:n*K], w.eSlot[:n*K], w.eW[:n*K]
	for i := 0; i < n; i++ {
		for k := 0; k < K; k++ {
			s := sel[i*K+k]
			eTok[fill[s]], eSlot[fill[s]], eW[fill[s]] = int32(i), int32(i*K+k), wts[i*K+k]
			fill[s]++
		}
	}

	out, slots := w.moeOut[:n*dim], w.eOut[:n*K*dim]
	// The experts go in runs of at most R routed rows (all of them in decoding and
	// short prefills; a bound on the scratch for long ones): the run's gate and up
	// products are one kernels.MatMuls, its down products another, so the workers
	// start and wait twice per run, not three times per expert. qwen2moe's shared
	// expert joins the first run.
	R := w.moeRun(c, n)
	shared := c.SharedFFN > 0
	for ex := 0; ex < E; {
		first := ex
		rows := 0
		for ; ex < E && rows+int(start[ex+1]-start[ex]) <= R; ex++ {
			rows += int(start[ex+1] - start[ex])
		}
		base := int(start[first])
		g := w.eIn[:rows*dim]
		for j, t := range eTok[base : base+rows] {
			copy(g[j*dim:(j+1)*dim], xn[int(t)*dim:(int(t)+1)*dim])
		}
		a, b := w.eA[:rows*F], w.eB[:rows*F]
		ps := w.prods[:0]
		for x := first; x < ex; x++ {
			lo, hi := int(start[x])-base, int(start[x+1])-base
			if lo == hi {
				continue
			}
			m.load[li*E+x].Add(uint64(hi - lo))
			ps = append(ps,
				kernels.Product{Dst: a[lo*F : hi*F], W: e.gate[x], X: g[lo*dim : hi*dim], NTok: hi - lo},
				kernels.Product{Dst: b[lo*F : hi*F], W: e.up[x], X: g[lo*dim : hi*dim], NTok: hi - lo})
		}
		var sa, sb, sd []float32
		if shared {
			SF := c.SharedFFN
			sa, sb, sd = w.ffA[:n*SF], w.ffB[:n*SF], w.moeIn[:n*dim]
			ps = append(ps,
				kernels.Product{Dst: sa, W: e.shGate, X: xn, NTok: n},
				kernels.Product{Dst: sb, W: e.shUp, X: xn, NTok: n})
		}
		kernels.MatMuls(ps)
		kernels.SwiGLU(a, a, b)
		d := g // the gathered rows are no longer needed
		ps = ps[:0]
		for x := first; x < ex; x++ {
			lo, hi := int(start[x])-base, int(start[x+1])-base
			ps = append(ps, kernels.Product{Dst: d[lo*dim : hi*dim], W: e.down[x], X: a[lo*F : hi*F], NTok: hi - lo})
		}
		if shared {
			kernels.SwiGLU(sa, sa, sb)
			ps = append(ps, kernels.Product{Dst: sd, W: e.shDown, X: sa, NTok: n})
			shared = false
		}
		kernels.MatMuls(ps)
		w.prods = ps[:0]
		// Each expert's rows, scaled by their gate weights, into their tokens'
		// top-k slots.
		for j, sl := range eSlot[base : base+rows] {
			wt := eW[base+j]
			o := slots[int(sl)*dim : (int(sl)+1)*dim]
			for k, v := range d[j*dim : (j+1)*dim] {
				o[k] = wt * v
			}
		}
	}
	// Each token's output: its slots summed in top-k order, as llama.cpp does.
	for i := 0; i < n; i++ {
		o := out[i*dim : (i+1)*dim]
		copy(o, slots[i*K*dim:(i*K+1)*dim])
		for k := 1; k < K; k++ {
			for j, v := range slots[(i*K+k)*dim : (i*K+k+1)*dim] {
				o[j] += v
			}
		}
	}

	if c.SharedFFN > 0 {
		// llama.cpp's qwen2moe: out += down(swiglu(gate·x, up·x)) · sigmoid(inp·x), the
		// sigmoid computed as silu(v)/v. The products ran with the first run above.
		d := w.moeIn[:n*dim]
		v, s, ones := w.shV[:n], w.shS[:n], w.ones[:n]
		kernels.MatMulVecDotF32(v, e.shInp, xn, n)
		kernels.SwiGLU(s, v, ones)
		for i := range s {
			s[i] /= v[i]
		}
		for i := 0; i < n; i++ {
			o := out[i*dim : (i+1)*dim]
			for k, dv := range d[i*dim : (i+1)*dim] {
				o[k] += float32(dv * s[i])
			}
		}
	}
	addInto(x, out)
}

// moeRun is the most routed rows (token, expert) that one run of experts takes for a
// batch of n tokens: all n·ExpertsUsed up to 512, and at least n, so that an expert
// every token chose fits.
func (w *scratch) moeRun(c *Config, n int) int {
	return max(n, min(n*c.ExpertsUsed, 512))
}

// growMoE sizes the scratch's expert buffers for n tokens.
func (w *scratch) growMoE(c *Config, n int) {
	if !c.MoE() {
		return
	}
	w.rLogits = growTo(w.rLogits, n*c.Experts)
	w.sel, w.eTok = growTo(w.sel, n*c.ExpertsUsed), growTo(w.eTok, n*c.ExpertsUsed)
	w.eSlot, w.eOut = growTo(w.eSlot, n*c.ExpertsUsed), growTo(w.eOut, n*c.ExpertsUsed*c.Dim)
	w.wts, w.eW = growTo(w.wts, n*c.ExpertsUsed), growTo(w.eW, n*c.ExpertsUsed)
	w.eStart, w.eFill = growTo(w.eStart, c.Experts+1), growTo(w.eFill, c.Experts)
	w.moeIn, w.moeOut = growTo(w.moeIn, n*c.Dim), growTo(w.moeOut, n*c.Dim)
	R := w.moeRun(c, n)
	w.eIn = growTo(w.eIn, R*c.Dim)
	w.eA, w.eB = growTo(w.eA, R*c.ExpertFFN), growTo(w.eB, R*c.ExpertFFN)
	if cap(w.prods) < 2*c.Experts+2 {
		w.prods = make([]kernels.Product, 0, 2*c.Experts+2)
	}
	if c.SharedFFN > 0 {
		w.shV, w.shS = growTo(w.shV, n), growTo(w.shS, n)
		if len(w.ones) < n {
			w.ones = make([]float32, n)
			for i := range w.ones {
				w.ones[i] = 1
			}
		}
	}
}

// ExpertLoad returns, for each layer, the number of tokens routed to each of its
// experts since the model was loaded (by every State and Batch), so that an operator
// can see routing skew; nil for a dense model.
func (m *Model) ExpertLoad() [][]uint64 {
	if !m.cfg.MoE() {
		return nil
	}
	E := m.cfg.Experts
	out := make([][]uint64, m.cfg.Layers)
	flat := make([]uint64, len(m.load))
	for i := range flat {
		flat[i] = m.load[i].Load()
	}
	for l := range out {
		out[l] = flat[l*E : (l+1)*E : (l+1)*E]
	}
	return out
}

// DecodeBytes is the weight bytes one decode step of one sequence reads: every weight
// matrix once, except that a mixture of experts reads ExpertsUsed of its experts per
// layer, and the token embedding one row (the whole of it when it is also the output
// projection). Divided into the memory bandwidth, it gives the ceiling of decode speed.
func (m *Model) DecodeBytes() int64 {
	var n int64
	size := func(ms ...kernels.Matrix) {
		for _, x := range ms {
			n += int64(len(x.Data))
		}
	}
	size(m.output)
	if !m.cfg.Tied {
		n += int64(len(m.tokEmbd.Row(0)))
	}
	for i := range m.layers {
		ly := &m.layers[i]
		size(ly.wq, ly.wk, ly.wv, ly.wo, ly.gate, ly.up, ly.down)
		if e := ly.moe; e != nil {
			size(e.router, e.shGate, e.shUp, e.shDown, e.shInp)
			// The experts' sizes differ only by type (none here): the first K stand
			// for any K.
			for x := 0; x < m.cfg.ExpertsUsed; x++ {
				size(e.gate[x], e.up[x], e.down[x])
			}
		}
	}
	return n
}
