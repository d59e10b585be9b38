// Package kvcache holds the paged KV memory of a model: a pool of fixed-size blocks,
// reference-counted, with a prefix cache over the full blocks and two tiers, hot
// (the compute pool) and warm (a compact host-memory area).
//
// # Layout
//
// A Pool owns one arena of uint16 units of Blocks blocks. A row (one token's K or V
// in one layer, RowValues = KVHeads × HeadDim values) is stored as Config.TypeK or
// TypeV says (kernels.KVType): binary16 values (the default, as llama.cpp's default
// cache), or llama.cpp's q8_0 / q4_0 blocks (-ctk / -ctv), 32 values in 17 or 9
// units, ggml's bytes. Block b holds, for every layer l, the K rows of its
// BlockTokens tokens contiguous (Pool.K(b, l): token t at [t*k, (t+1)*k), k and v
// the row widths of Config.RowUnits), then the V rows (Pool.V(b, l)); the spans of
// one block are contiguous too, so a block moves between tiers with one copy.
// BlockBytes counts the stored bytes, so that a budget holds 64/34 ≈ 1.88× the
// tokens with q8_0 and 64/18 ≈ 3.56× with q4_0. A Seq is one sequence's block table:
// token position pos lives in Blocks()[pos/BlockTokens], row pos%BlockTokens;
// Seq.Row(pos, l) returns its K and V rows for the model to write
// (kernels.PutKVRow), and an attention kernel walks Blocks() with K and V
// (kernels.AttendBlocksKV reads the quantized blocks directly).
//
// # Prefix cache
//
// A full block is keyed by a hash chained over its parent's key and its tokens; the
// first block's parent is the cache salt. The salt is per tenant by default, so that
// one tenant never hits, and cannot time, another's prompts; "" is for prefixes shared
// on purpose. Entries keep the parent key, salt and tokens they stand for, so a hash
// collision is a miss, never a wrong hit. Seq.Prefix takes the longest cached prefix
// (each block referenced); Seq.Publish enters the sequence's newly full blocks once
// their KV is written. Cached blocks never change again; a referenced block is never
// evicted. Cached blocks nobody references are kept in LRU order and evicted only when
// Alloc finds no free block; Seq.Release drops the tail of a prefix first, so the tail
// goes before the head.
//
// # Tiers
//
// With WarmBytes > 0, a block evicted from hot is demoted: its units are copied bit
// for bit (quantized blocks stay quantized) into a slot of the warm area (host
// memory, or a mapped file with WarmFile, whose index names the K and V types) (LRU
// among the slots; a full warm tier drops its least recently used block). A lookup that finds a block warm replays it: copies it
// back into a fresh hot block, which is cheaper than computing it again. Stats gives
// lookups, hit and miss tokens, demotions, replays, evictions, blocks and bytes per
// tier, for the gateway to export.
//
// # Use
//
// A Pool and its Seqs belong to one goroutine (the engine's Block); during a forward
// pass the model may read and write rows from several goroutines, each its own rows.
// Stats may be called from any goroutine.
//
//	cfg := kvcache.Config{Layers: 32, KVHeads: 8, HeadDim: 128, BlockTokens: 16, WarmBytes: 1 << 30}
//	cfg.Blocks = cfg.BlocksFor(maxModelLen, maxConcurrency, budgetBytes)
//	pool, err := kvcache.New(cfg)
//	...
//	seq := pool.NewSeq(tenantSalt)
//	cached := seq.Prefix(prompt[:len(prompt)-1]) // prefill only prompt[cached:]
//	if err := seq.Grow(len(prompt)); err != nil { ... } // the scheduler's KV accounting prevents this
//	// the model writes seq.Row(pos, l) for pos ≥ cached, then:
//	seq.Publish(prompt)
//	// ... decode: Grow(n+1), write row n, Publish(tokens) ...
//	seq.Release() // finished, cancelled or preempted
package kvcache
