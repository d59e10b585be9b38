package kvcache

import "fmt"

// Seq is the block table of one sequence: the blocks that hold its KV, token position
// pos in block pos/BlockTokens at row pos%BlockTokens. It belongs to the Pool's
// goroutine.
type Seq struct {
	p      *Pool
	salt   string
	blocks []BlockID
	keys   []uint64 // chained keys of the leading blocks that are in the prefix cache
}

// NewSeq returns an empty sequence whose full blocks go into the prefix cache under
// salt: per tenant by default, so that one tenant never hits (or times) another's
// prompt; "" only for prefixes shared on purpose.
func (p *Pool) NewSeq(salt string) *Seq { return &Seq{p: p, salt: salt} }

// Prefix looks up the longest cached prefix of tokens, in whole blocks, and makes
// those blocks the start of the sequence (each referenced, never written again). It
// returns the number of tokens found. Pass the tokens that may come from the cache:
// the prompt without its last token, whose logits the model must compute. Prefix may
// only be called on an empty Seq.
func (s *Seq) Prefix(tokens []int32) int { return s.PrefixLimit(tokens, len(tokens)) }

// PrefixLimit is Prefix taking at most limit tokens from the cache: the blocks a
// scheduler's plan counted on (after a Peek). The lookup's statistics count hits and
// misses over all of tokens.
func (s *Seq) PrefixLimit(tokens []int32, limit int) int {
	if len(s.blocks) > 0 {
		panic("kvcache: Prefix on a sequence that has blocks")
	}
	s.blocks, s.keys = s.p.lookup(s.salt, tokens, limit)
	return len(s.blocks) * s.p.bt
}

// Cached is the number of leading tokens whose blocks are in the prefix cache (found
// by Prefix or entered by Publish): the sequence must not write below it.
func (s *Seq) Cached() int { return len(s.keys) * s.p.bt }

// Grow makes room for n tokens, allocating blocks. On ErrNoBlocks the sequence keeps
// the blocks it had and those allocated so far.
func (s *Seq) Grow(n int) error {
	for len(s.blocks)*s.p.bt < n {
		b, err := s.p.Alloc()
		if err != nil {
			return fmt.Errorf("kvcache: growing a sequence to %d tokens: %w", n, err)
		}
		s.blocks = append(s.blocks, b)
	}
	return nil
}

// Truncate rolls the sequence back to its first n tokens: the blocks past those
// that hold them go back to the pool (last first, as Release), without copying;
// rows written at positions n and above in the block that keeps position n-1 stay
// as they are and are overwritten before anything reads them (attention reads
// positions below the query's only). A speculative step's rejected drafts are
// rolled back so. n must not be below Cached: published blocks stay.
func (s *Seq) Truncate(n int) {
	if n < s.Cached() {
		panic(fmt.Sprintf("kvcache: Truncate to %d tokens below the %d cached", n, s.Cached()))
	}
	keep := (n + s.p.bt - 1) / s.p.bt
	for i := len(s.blocks) - 1; i >= keep; i-- {
		s.p.Release(s.blocks[i])
	}
	if keep < len(s.blocks) {
		clear(s.blocks[keep:])
		s.blocks = s.blocks[:keep]
	}
}

// Cap is the number of tokens the sequence's blocks hold.
func (s *Seq) Cap() int { return len(s.blocks) * s.p.bt }

// Blocks is the block table (read-only for the caller): with Pool.K and Pool.V, what
// an attention kernel walks.
func (s *Seq) Blocks() []BlockID { return s.blocks }

// Row returns the K and V rows of token position pos in layer l (Config.RowUnits
// units each: RowValues binary16 values, or their blocks, which the model writes
// with kernels.PutKVRow). pos must be below Cap; the model writes rows at or above
// Cached only.
func (s *Seq) Row(pos, l int) (k, v []uint16) {
	b := s.blocks[pos/s.p.bt]
	ko, vo := (pos%s.p.bt)*s.p.krow, (pos%s.p.bt)*s.p.vrow
	return s.p.K(b, l)[ko : ko+s.p.krow : ko+s.p.krow], s.p.V(b, l)[vo : vo+s.p.vrow : vo+s.p.vrow]
}

// Publish enters the sequence's full blocks into the prefix cache: tokens are the
// sequence's tokens whose KV the model has written (its prompt and output so far, or
// a prefix of them). Blocks already published are skipped. A block whose contents
// another hot block caches already stays private to the sequence, and so do the
// blocks after it, so that Cached counts only blocks in the cache; the next Publish
// tries that block again.
func (s *Seq) Publish(tokens []int32) {
	full := min(len(tokens)/s.p.bt, len(s.blocks))
	for i := len(s.keys); i < full; i++ {
		parent := rootKey(s.salt)
		if i > 0 {
			parent = s.keys[i-1]
		}
		toks := tokens[i*s.p.bt : (i+1)*s.p.bt]
		key := chainKey(parent, toks)
		if !s.p.publish(s.blocks[i], key, parent, s.salt, toks) {
			return
		}
		s.keys = append(s.keys, key)
	}
}

// Release drops the sequence's references, last block first, so that the tail of a
// cached prefix is evicted before its head. The Seq is empty afterwards.
func (s *Seq) Release() {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		s.p.Release(s.blocks[i])
	}
	s.blocks, s.keys = nil, nil
}

// Layer appends the sequence's K and V blocks of layer l to ks and vs, in position
// order (block i holds positions [i*BlockTokens, (i+1)*BlockTokens)): the view an
// attention kernel walks.
func (s *Seq) Layer(l int, ks, vs [][]uint16) ([][]uint16, [][]uint16) {
	for _, b := range s.blocks {
		ks, vs = append(ks, s.p.K(b, l)), append(vs, s.p.V(b, l))
	}
	return ks, vs
}

// Config is the configuration of the sequence's pool (its KV types, for the model).
func (s *Seq) Config() Config { return s.p.cfg }

// BlockTokens is the number of tokens per block of the sequence's pool.
func (s *Seq) BlockTokens() int { return s.p.bt }
