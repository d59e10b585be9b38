package kvcache

import (
	"errors"
	"testing"
)

// FuzzPoolOps drives a small pool with random sequences (few distinct tokens, so
// prefixes are shared often; three salts), releases, extensions and lookups. After
// every operation the invariants hold (check), every reference the sequences hold is
// counted, and every row a sequence can see holds the value its own salt and tokens
// determine: a cache hit never returns another prefix's or another tenant's data,
// and a referenced block is never evicted or overwritten.
func FuzzPoolOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0})
	f.Add([]byte{3, 200, 17, 3, 201, 17, 1, 0, 3, 202, 17, 2, 1, 5, 3, 200, 17})
	f.Fuzz(func(t *testing.T, ops []byte) {
		cfg := Config{Layers: 2, KVHeads: 1, HeadDim: 2, BlockTokens: 3, Blocks: 12}
		cfg.WarmBytes = 4 * cfg.BlockBytes()
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		salts := []string{"a", "b", ""}
		type live struct {
			s      *Seq
			salt   string
			tokens []int32 // tokens whose rows are written
		}
		var seqs []*live
		// value is what row pos of a sequence holds in layer l: a hash of the salt, the
		// tokens up to pos and (l, K or V): exactly what a correct KV cache shares.
		value := func(salt string, tokens []int32, pos, l, kv int) uint16 {
			h := chainKey(rootKey(salt), tokens[:pos+1])
			h = chainKey(h, []int32{int32(l), int32(kv)})
			return uint16(h) | 1 // never zero
		}
		write := func(x *live, from int) {
			for pos := from; pos < len(x.tokens); pos++ {
				for l := range cfg.Layers {
					k, v := x.s.Row(pos, l)
					for i := range k {
						k[i], v[i] = value(x.salt, x.tokens, pos, l, 0), value(x.salt, x.tokens, pos, l, 1)
					}
				}
			}
		}
		verify := func() {
			refs := map[BlockID]int{}
			for _, x := range seqs {
				for _, b := range x.s.Blocks() {
					refs[b]++
				}
				for pos := range x.tokens {
					for l := range cfg.Layers {
						k, v := x.s.Row(pos, l)
						for i := range k {
							if k[i] != value(x.salt, x.tokens, pos, l, 0) || v[i] != value(x.salt, x.tokens, pos, l, 1) {
								t.Fatalf("sequence (salt %q, tokens %v) sees wrong KV at position %d layer %d", x.salt, x.tokens, pos, l)
							}
						}
					}
				}
			}
			for b := range BlockID(cfg.Blocks) {
				if p.Refs(b) != refs[b] {
					t.Fatalf("block %d: refcount %d, sequences hold %d", b, p.Refs(b), refs[b])
				}
			}
			if err := p.check(); err != nil {
				t.Fatal(err)
			}
		}
		next := func() byte {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return b
		}
		for len(ops) > 0 {
			switch op := next(); op % 4 {
			case 0, 3: // a new sequence: prefix lookup, then prefill the rest
				n := 1 + int(next())%14
				bits := next()
				x := &live{s: p.NewSeq(salts[int(op/4)%3]), salt: salts[int(op/4)%3]}
				prompt := make([]int32, n)
				for i := range prompt {
					prompt[i] = int32(bits>>(i%8)) & 1
				}
				hit := x.s.Prefix(prompt[:n-1])
				if hit%cfg.BlockTokens != 0 || hit > n-1 {
					t.Fatalf("hit %d of %d tokens", hit, n-1)
				}
				if err := x.s.Grow(n); err != nil {
					if !errors.Is(err, ErrNoBlocks) {
						t.Fatal(err)
					}
					x.s.Release()
					break
				}
				x.tokens = prompt
				write(x, hit)
				x.s.Publish(x.tokens)
				seqs = append(seqs, x)
			case 1: // a sequence ends
				if len(seqs) > 0 {
					i := int(next()) % len(seqs)
					seqs[i].s.Release()
					seqs = append(seqs[:i], seqs[i+1:]...)
				}
			case 2: // a sequence decodes a few tokens
				if len(seqs) > 0 {
					x := seqs[int(next())%len(seqs)]
					m := 1 + int(next())%4
					if err := x.s.Grow(len(x.tokens) + m); err != nil {
						break // the blocks it got stay in its table, unwritten
					}
					from := len(x.tokens)
					for range m {
						x.tokens = append(x.tokens, int32(next())&1)
					}
					write(x, from)
					x.s.Publish(x.tokens)
				}
			}
			verify()
		}
		for _, x := range seqs {
			x.s.Release()
		}
		if st := p.Stats(); st.HotUsed != 0 {
			t.Fatalf("blocks still used after every release: %+v", st)
		}
		if err := p.check(); err != nil {
			t.Fatal(err)
		}
	})
}
