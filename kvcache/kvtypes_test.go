package kvcache

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/kernels"
)

// TestQuantizedLayout: with q8_0 or q4_0 K and V rows, a row takes ggml's block
// bytes (34 or 18 per 32 values), the block's bytes count them, the spans of
// every (block, layer, K/V) are distinct, of their type's width, and tile the
// arena; a head size that is not whole blocks is a config error.
func TestQuantizedLayout(t *testing.T) {
	for _, c := range []struct {
		k, v         kernels.KVType
		rowK, rowV   int // bytes of one token's row in one layer (KVHeads 2 × HeadDim 64)
		blockBytesOf int64
	}{
		{kernels.KVF16, kernels.KVF16, 256, 256, 2 * 4 * (256 + 256)},
		{kernels.KVQ8_0, kernels.KVQ8_0, 4 * 34, 4 * 34, 2 * 4 * (136 + 136)},
		{kernels.KVQ4_0, kernels.KVQ4_0, 4 * 18, 4 * 18, 2 * 4 * (72 + 72)},
		{kernels.KVQ8_0, kernels.KVF16, 4 * 34, 256, 2 * 4 * (136 + 256)},
		{kernels.KVF16, kernels.KVQ4_0, 256, 4 * 18, 2 * 4 * (256 + 72)},
	} {
		cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 64, BlockTokens: 4, Blocks: 3, TypeK: c.k, TypeV: c.v}
		if got := cfg.BlockBytes(); got != c.blockBytesOf {
			t.Fatalf("%v/%v: block bytes %d, want %d", c.k, c.v, got, c.blockBytesOf)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(len(p.arena)) * 2; got != 3*c.blockBytesOf {
			t.Fatalf("%v/%v: arena of %d bytes, want %d", c.k, c.v, got, 3*c.blockBytesOf)
		}
		seen := map[*uint16]bool{}
		total := 0
		for b := range BlockID(3) {
			for l := range 2 {
				for i, s := range [][]uint16{p.K(b, l), p.V(b, l)} {
					if want := []int{c.rowK, c.rowV}[i] * 4 / 2; len(s) != want || cap(s) != len(s) {
						t.Fatalf("%v/%v: span of %d units (cap %d), want %d", c.k, c.v, len(s), cap(s), want)
					}
					if seen[&s[0]] {
						t.Fatal("spans overlap")
					}
					seen[&s[0]] = true
					total += len(s)
				}
			}
		}
		if total != len(p.arena) {
			t.Fatalf("%v/%v: spans cover %d of %d units", c.k, c.v, total, len(p.arena))
		}
		s := p.NewSeq("t")
		if err := s.Grow(6); err != nil {
			t.Fatal(err)
		}
		k, v := s.Row(5, 1) // block 1, row 1
		if len(k)*2 != c.rowK || len(v)*2 != c.rowV || &k[0] != &p.K(s.Blocks()[1], 1)[c.rowK/2] || &v[0] != &p.V(s.Blocks()[1], 1)[c.rowV/2] {
			t.Fatalf("%v/%v: Row does not address block 1, row 1", c.k, c.v)
		}
		p.Close()
	}
	if _, err := New(Config{Layers: 1, KVHeads: 2, HeadDim: 48, Blocks: 1, TypeV: kernels.KVQ8_0}); !errors.Is(err, ErrConfig) || !errors.Is(err, kernels.ErrKVType) {
		t.Fatalf("q8_0 with head size 48: %v, want ErrConfig and ErrKVType", err)
	}
}

// TestQuantizedCapacity: in the same byte budget, a q8_0 cache holds 64/34 ≈ 1.88×
// the sequences of an f16 one and q4_0 64/18 ≈ 3.56× (ggml's block sizes; counted by
// growing sequences until the pool is full).
func TestQuantizedCapacity(t *testing.T) {
	const budget, seqLen = 1 << 30, 2048
	seqs := map[kernels.KVType]int{}
	for _, typ := range []kernels.KVType{kernels.KVF16, kernels.KVQ8_0, kernels.KVQ4_0} {
		// The geometry of Llama-3.2-1B: 16 layers, 8 KV heads of 64.
		cfg := Config{Layers: 16, KVHeads: 8, HeadDim: 64, TypeK: typ, TypeV: typ}
		cfg.Blocks = cfg.BlocksFor(seqLen, 1<<20, budget)
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if p.Config().Bytes() > budget {
			t.Fatalf("%v: %d bytes, over the budget of %d", typ, p.Config().Bytes(), budget)
		}
		for {
			s := p.NewSeq("t")
			if err := s.Grow(seqLen); err != nil {
				if !errors.Is(err, ErrNoBlocks) {
					t.Fatal(err)
				}
				break
			}
			seqs[typ]++
		}
		p.Close()
	}
	r8 := float64(seqs[kernels.KVQ8_0]) / float64(seqs[kernels.KVF16])
	r4 := float64(seqs[kernels.KVQ4_0]) / float64(seqs[kernels.KVF16])
	t.Logf("sequences of %d tokens in %d MiB: f16 %d, q8_0 %d (%.3f×), q4_0 %d (%.3f×)", seqLen, budget>>20,
		seqs[kernels.KVF16], seqs[kernels.KVQ8_0], r8, seqs[kernels.KVQ4_0], r4)
	if seqs[kernels.KVF16] < 8 || r8 < 1.85 || r4 < 3.5 {
		t.Fatalf("q8_0 holds %.3f× and q4_0 %.3f× the sequences of f16, want ≥ 1.85× and 3.5×", r8, r4)
	}
}

// TestQuantizedWarmTier: the warm tier (in memory and in a file) keeps a quantized
// pool's blocks as they are stored, so the same bytes hold more of them, replays
// them bit for bit, and a file written with other KV types (of the same size) is
// not replayed.
func TestQuantizedWarmTier(t *testing.T) {
	base := Config{Layers: 2, KVHeads: 2, HeadDim: 64, BlockTokens: 4, Blocks: 3, WarmFileTag: "m"}
	f16 := base
	q8 := base
	q8.TypeK, q8.TypeV = kernels.KVQ8_0, kernels.KVQ8_0
	warmBytes := 2 * f16.BlockBytes()
	for _, file := range []bool{false, true} {
		cfg := q8
		cfg.WarmBytes = warmBytes
		if file {
			cfg.WarmFile = filepath.Join(t.TempDir(), "warm")
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if slots := p.warm.slots(); slots != int(warmBytes/q8.BlockBytes()) || slots < 3 {
			t.Fatalf("file %v: %d warm slots in %d bytes, want %d", file, slots, warmBytes, warmBytes/q8.BlockBytes())
		}
		prompt := seqOf(12, 1)
		a := p.NewSeq("t")
		fill(t, a, 0, 12, 9)
		a.Publish(prompt)
		want := rows(a, 12)
		a.Release()
		if n := p.DemoteAll(); n != 3 {
			t.Fatalf("file %v: demoted %d blocks, want 3", file, n)
		}
		if !file {
			c := p.NewSeq("t")
			if hit := c.Prefix(prompt); hit != 12 {
				t.Fatalf("warm hit %d, want 12", hit)
			}
			if !equalBits(rows(c, 12), want) {
				t.Fatal("replayed quantized blocks differ from the ones written")
			}
			c.Release()
			p.Close()
			continue
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		// The same file size with K and V types swapped (q8_0 K, f16 V vs f16 K,
		// q8_0 V): the header tells them apart.
		mixA, mixB := cfg, cfg
		mixA.TypeV, mixB.TypeK = kernels.KVF16, kernels.KVF16
		q, err := New(mixA)
		if err != nil {
			t.Fatal(err)
		}
		if q.Peek("t", prompt) != 0 {
			t.Fatal("a pool of other KV types found the quantized blocks")
		}
		q.Close()
		p, err = New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// mixA's Close rewrote the index (empty): write again, close, reopen.
		a = p.NewSeq("t")
		fill(t, a, 0, 12, 9)
		a.Publish(prompt)
		a.Release()
		p.Close()
		p, err = New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := p.NewSeq("t")
		if hit := c.Prefix(prompt); hit != 12 || !equalBits(rows(c, 12), want) {
			t.Fatalf("after reopening: hit %d, bits equal %v", hit, equalBits(rows(c, 12), want))
		}
		c.Release()
		p.Close()
		// mixA and mixB have the same block size, hence the same file size: only
		// the header's types keep mixB from replaying what mixA wrote.
		if mixA.BlockBytes() != mixB.BlockBytes() {
			t.Fatal("the swapped types differ in size")
		}
		for _, reader := range []Config{mixB, mixA} {
			w, err := New(mixA)
			if err != nil {
				t.Fatal(err)
			}
			a = w.NewSeq("t")
			fill(t, a, 0, 12, 9)
			a.Publish(prompt)
			a.Release()
			w.Close()
			r, err := New(reader)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := r.Peek("t", prompt), map[bool]int{true: 4 * int(mixA.WarmBytes/mixA.BlockBytes()), false: 0}[reader == mixA]; got != want {
				t.Fatalf("K %v V %v reading a file of K %v V %v: %d tokens cached, want %d", reader.TypeK, reader.TypeV, mixA.TypeK, mixA.TypeV, got, want)
			}
			r.Close()
		}
	}
}
