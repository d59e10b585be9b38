package kernels

import (
	"fmt"
	"sync"
)

// Product is one matrix product of a MatMuls group: Dst[t*W.Rows+r] = W.Row(r) ·
// X[t*W.Cols:(t+1)*W.Cols] for each of the NTok rows of X, as MatMul computes it.
type Product struct {
	Dst  []float32
	W    Matrix
	X    []float32
	NTok int
}

// MatMuls computes a group of independent products, each the same bits as MatMul
// would give it, as one parallel job: the products' weight rows are laid end to end
// (each starting on a multiple of 16, for the tile kernels) and the pool's workers
// share that one range, so the group costs one start and one wait of the workers
// instead of one per product. A mixture of experts' layer is such a group: each
// chosen expert's gate and up products, then their down products, each on a few
// tokens, so that per product the start and the wait were a large share of the
// work. Products that read the same X (the same first element and rows, and the
// same activation format, Q8_0's correction included) share its quantized form. Products of no tokens are
// skipped.
func MatMuls(ps []Product) { matMuls(ps, false, false) }

// MatMulsSerial is MatMuls on the calling goroutine alone (the same bits): for
// groups whose work is too small to pay for a start and a wait of the pool's
// workers, such as a decode step's LoRA products (rank-wide, a few rows each), which
// come twice per adapted projection. On a loaded machine a start costs far more than
// its share of the work: the workers must first be scheduled.
func MatMulsSerial(ps []Product) { matMuls(ps, true, false) }

func matMuls(ps []Product, serial, vecDot bool) {
	g := groupPool.Get().(*mmGroup)
	defer g.release()
	work := 0
	for i := range ps {
		p := &ps[i]
		if p.NTok == 0 {
			continue
		}
		w := p.W
		if len(p.X) < p.NTok*w.Cols || len(p.Dst) < p.NTok*w.Rows {
			panic(fmt.Sprintf("kernels: MatMuls product %d, %dx%d by %d tokens: x has %d, dst %d", i, w.Rows, w.Cols, p.NTok, len(p.X), len(p.Dst)))
		}
		a := g.shared(ps[:i], p)
		if a != nil && a.typ == Q8_K {
			a.layoutQ8K(w.Type) // what p's type reads and the earlier products' did not
		}
		if a == nil {
			a = actsPool.Get().(*acts)
			a.prepare(w.Type, p.X, p.NTok, w.Cols)
			g.own = append(g.own, a)
		}
		g.off = append(g.off, g.rows)
		g.mms = append(g.mms, matMul{dst: p.Dst, w: w, a: a, nTok: p.NTok, rb: w.Type.RowBytes(w.Cols), vecDot: vecDot})
		g.rows += roundUp(w.Rows, 16)
		work += w.Rows * w.Cols * p.NTok
	}
	if len(g.mms) == 0 {
		return
	}
	if serial || work < 1<<15 {
		g.run(0, g.rows)
		return
	}
	pool() // created once; SetThreads replaces it under poolMu
	if !poolMu.TryLock() {
		g.run(0, g.rows)
		return
	}
	defer poolMu.Unlock()
	p := thePool
	if p.Size() == 1 {
		g.run(0, g.rows)
		return
	}
	j := &theJob
	j.start(g.rows, max(1, work/g.rows), p.Size(), 16)
	j.group = g
	p.Run(j, p.Size(), 1)
	j.group = nil
}

// mmGroup is one MatMuls call's products: product i's rows are [off[i], off[i] +
// its rows) of the group's range of rows, off[i] a multiple of 16.
type mmGroup struct {
	mms  []matMul
	off  []int
	rows int
	own  []*acts // the activations the group prepared, returned to actsPool after
}

var groupPool = sync.Pool{New: func() any { return new(mmGroup) }}

// shared returns the activations already prepared for an earlier product of the
// same X, rows, columns and activation format as p, or nil.
func (g *mmGroup) shared(earlier []Product, p *Product) *acts {
	k := 0
	for i := range earlier {
		q := &earlier[i]
		if q.NTok == 0 {
			continue
		}
		if q.NTok == p.NTok && q.W.Cols == p.W.Cols && VecDotType(q.W.Type) == VecDotType(p.W.Type) && &q.X[0] == &p.X[0] &&
			(VecDotType(p.W.Type) != Q8_0 || actShift(q.W.Type, q.NTok) == actShift(p.W.Type, p.NTok)) {
			return g.mms[k].a
		}
		k++
	}
	return nil
}

// run computes the group's rows [lo, hi).
func (g *mmGroup) run(lo, hi int) {
	// The first product that ends after lo.
	i, j := 0, len(g.off)
	for i < j {
		h := int(uint(i+j) >> 1)
		if g.off[h]+g.mms[h].w.Rows <= lo {
			i = h + 1
		} else {
			j = h
		}
	}
	for ; i < len(g.mms) && g.off[i] < hi; i++ {
		m := &g.mms[i]
		r0, r1 := max(lo-g.off[i], 0), min(hi-g.off[i], m.w.Rows)
		if r0 < r1 {
			m.rows(r0, r1)
		}
	}
}

func (g *mmGroup) release() {
	for _, a := range g.own {
		a.f = nil
		actsPool.Put(a)
	}
	clear(g.own)
	clear(g.mms)
	g.own, g.mms, g.off, g.rows = g.own[:0], g.mms[:0], g.off[:0], 0
	groupPool.Put(g)
}
