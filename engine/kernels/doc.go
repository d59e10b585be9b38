// Package kernels holds the numeric kernels of lmlite's engine: the operations a
// transformer forward pass spends its time in, over weights in ggml's tensor formats.
//
// The interface is deliberately small, because every kernel here is the pure-Go
// reference that faster implementations (AVX2, AVX-512/VNNI assembly, dispatched at
// run time) will implement and be tested against:
//
//   - MatMul(dst, w, x, nTok): a weight Matrix (type, rows, cols, encoded bytes as
//     the GGUF file holds them) times nTok activation rows; the projection of a
//     batch of tokens. Parallel over weight rows. MatMuls(products): a group of
//     independent products (a mixture of experts' chosen experts, or q, k and v) as
//     one parallel job over their rows laid end to end, each product's outputs the
//     bits MatMul gives it; products of the same activations quantize them once.
//   - DequantizeRow and QuantizeRow: one row to and from float32 (embedding lookup,
//     small vectors, and the model generator's quantizers).
//   - RMSNorm, RoPECache + RoPE (normal and NeoX), Softmax, SwiGLU, and Attend (one
//     head of one query over an F16 KV cache); AttendBlocks over a paged cache, and
//     AttendBlocksTile for the query heads of one GQA group over a run of tokens
//     (prompts): they walk the cache together, block by block, so that a block of
//     keys and values serves every head of the tile while it is in the cache, each
//     head keeping its own state and order (AttendBlocks' bits); on AVX-512 with
//     head size 64, up to four heads at a time score each key once and update
//     their accumulators interleaved (attend_amd64.go's group kernels).
//   - AttendBlocksKV and AttendBlocksTileKV: the same over a cache whose K and V
//     rows are llama.cpp's q8_0 / q4_0 blocks (KVType, written by PutKVRow), read
//     directly as llama.cpp's one-query flash attention does: q quantized to Q8_0
//     and integer block dot products for the scores, dequantized V rows
//     accumulated in float32; on AVX2, chunks of positions through scoresKV,
//     attnExpF16 and attnAccumQ8_0AVX2 / Q4_0, the Go loop's bits. scoresKV takes
//     runs of 8 positions through the AVX2 outer-product tiles
//     (dot{Q8_0,Q4_0}AVX2x8t{1,2,3,4}, _asm/attnkvtile.go: the 8 K rows transposed,
//     4 bytes of each in a lane; per 4 bytes and head one VPMADDUBSW and one
//     VPMADDWD, Q8_0 as |k| against q·sign(k), Q4_0's nibbles against q from
//     c = −8·Σq; exact isums, no horizontal sums; every head of the group at once)
//     and the rest through attnScoresQ8_0AVX2 / Q4_0. AttendBlocksTileKV takes the
//     blocks outer, the next block's rows prefetched (prefetchRows: a head's q8_0
//     row is 68 bytes, which the hardware prefetchers leave to demand misses; a
//     share of the lines before each group's scores and another before its
//     accumulation, nextBlock and prefetchPart, as a burst of them at the block's
//     start arrived late on Zen4: q8_0 ÷ f16 decode 0.90 → 1.40 at 8k,
//     docs/PERFORMANCE.md), and
//     up to four heads of a GQA group share each V row's dequantization
//     (attnAccumGroup{2,3,4}Q8_0AVX2 / Q4_0), each head keeping its own operations
//     and order. AttendBlocksTileKVHeads takes a decoding token's KV heads (up to
//     four, a group each at its own offset) through the blocks together, so that
//     each row's cache lines are read once for all of them (a q8_0 head's 68 bytes
//     span two lines, as an f16 head's 128 do): the per-head bits
//     (TestAttendBlocksTileKVHeadsMatchesPerHead). On AVX-512
//     (attend_kv_amd64.go) a group of 1 to 4 heads scores 16 positions at once
//     through the Q8_0 / Q4_0 outer-product tiles (the 16 K rows transposed, one
//     VNNI VPDPBUSD per 4 bytes and head, c = −128·Σq or −8·Σq making the isums
//     exact) and updates its accumulators a block (two zmm) at a time
//     (attnAccumGroup{1,2,3,4}{Q8_0,Q4_0}AVX512): the generic code's bits at every
//     level (TestAttendBlocksTileKVLevelsMatchGeneric).
//
// Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0 and the lattice types IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, with ggml's block layouts byte for byte (Q4_K_M
// files mix Q4_K and Q6_K). TQ1_0, TQ2_0 and the lattice types have AVX2 row
// kernels (no AVX-512 row or tile kernels; the lattice types' prompts take
// four- and two-token forms, each group's grid entries, signs and scales decoded
// once for the tokens, and with AVX-512 eight-token forms for IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS and IQ3_S, the signs as mask registers, _asm/lattice512.go;
// TQ1_0's a two-token form) with their pure-Go references' bits
// (refquants.go, iquants.go). With AVX-512 VNNI (and BMI2), products of 6
// tokens or more of IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S and IQ1_M go through
// panels instead (iqpanel.go, _asm/iqpanel.go; llama.cpp's iqp.cpp does the
// same): groups of 16 rows (up to 4 at a time) decoded once per MatMul into
// int16 with their scales folded in, the tokens' quants widened to int16, 4 rows by 4 tokens by VPDPWSSD,
// the integer sums exact and the float steps the row kernels', so the same
// bits (TestPanelMatMul, TestMatMulLevels). IQ1_S and TQ2_0 take byte panels
// the same way, by VPDPBUSD (iq1spanel.go, tq2panel.go). Without AVX-512,
// IQ2_XXS, IQ2_XS, IQ2_S and IQ3_XXS prompts take byte panels by VPMADDUBSW
// and VPMADDWD (iq2panel2.go, _asm/iq2panel2.go). QuantizeRow writes every type but the lattice ones (CanQuantize),
// whose grids (iqgrids.go) are generated from ggml-common.h by internal/gengrids.
// The decoders and dot products are checked against llama.cpp's own (ggml's
// decoders and CPU vec_dot, through the npm peer's libraries: llamacpp_test.go).
//
// Numerics follow llama.cpp's CPU backend rather than ideal arithmetic, so that the
// engine's logits can be compared with llama.cpp's closely: quantized weights are
// multiplied with activations quantized to 8 bits (Q8_0 blocks for Q8_0, Q4_0,
// Q5_0 and IQ4_NL; Q8_1 blocks, which carry their sum, for Q4_1 and Q5_1; Q8_K for
// the K-quants, the IQ types and the ternary types) using integer dot products, F16/BF16 weights with activations
// rounded to the same format, and attention runs as llama.cpp's flash attention
// does over an F16 cache, bit for bit as its AVX-512 build computes it for head
// sizes that are a multiple of 64 (TestGGMLAttendOrder, every SIMD level): K·q in
// ggml_vec_dot_f16's order with 16-lane vectors (attnScore), the accumulator
// updated by a fused multiply-add before its binary16 rounding, the exponentials
// correctly rounded as libm's expf that llama.cpp calls (attnExpf, in float64).
// Other head sizes keep 8 lanes in index order (ggml adds the values after the
// last 64 in float64 there). SwiGLU is llama.cpp's op bit for bit as its AVX-512 builds
// compute it (ggml_v_expf's arithmetic, expfGGML; TestSwiGLUMatchesLlamaCpp). The
// Q4_1, Q5_1, Q3_K, Q5_K, Q6_K, IQ3_S and IQ1_S dot products are ggml's vec_dot bit for bit
// (TestDotMatchesLlamaCppBits, TestDotIQ1SMatchesLlamaCppBits): ggml keeps 8 float lanes per row (each a fused
// multiply-add of the block scale and the integer sum of 4 neighbouring
// products); the others agree with it only to float rounding, one sum per block
// (ggmlorder_test.go). Q4_0 and IQ4_NL give the bits of the repacked kernels
// llama.cpp multiplies a model's matrices of those types with (CPU_REPACK:
// ggml_gemv/gemm_*_8x8_q8_0, which agree with each other): one float per (row,
// token), each block added as fma(isum, f16(x.d)·y.d, acc)
// (TestDotMatchesLlamaCppRepackedBits). Q4_K's repacked gemm and gemv disagree,
// so llama.cpp is not batch invariant there and Q4_K keeps its order. Q8_0 keeps one sum per block on purpose: in ggml's order
// (commit 75bc768, reverted) it took mixtral-moe-Q4_K_M from a mean KL of 4.3e-4
// to 3.7e-7, but the order needs 8 floats per (row, token) where the AVX-512
// outer-product tiles keep one, and a 128-token product took 3.3 times as long
// (issue 32; docs/PERFORMANCE.md). The F32 routers of a mixture of experts take
// MatMulVecDotF32: ggml_vec_dot_f32's order as llama.cpp's AVX-512 builds decode
// (four 16-lane fused accumulators; dotF32VecDotAVX2 on every level,
// TestVecDotF32MatchesLlamaCppBits), not MatMul's F32 order. LoRA adapters'
// products take MatMulsVecDot: ggml_vec_dot_f16, _f32 and _q8_0_q8_0's orders as
// llama.cpp decodes (F16 through attnScoresF16 for the 64-value blocks, its tail
// in float64: a rank-16 B is all tail, on AVX-512 sixteen rows transposed in
// registers and two tokens at once, dotF16VecDotTail16AVX512t2; on AVX2 eight
// rows, dotF16VecDotTail16AVX2t2), so that an adapted projection is llama.cpp's build_lora_mm bit for
// bit (engine/model's TestLoRAMatchesLlamaCppBits); RoPE rotates with ggml's
// fused multiply-adds (TestRoPEMatchesLlamaCppBits; its cos and sin still differ
// from libm's cosf and sinf at about 2% of the angles). On small
// random-weight models that last-bit difference can flip an 8-bit activation
// rounding and drift by a mean KL of 1e-4 to 1e-3 (issue 32; TestZooQuantizeParity).
//
// Assembly (amd64, generated by ../../_asm with avo; the `purego` build tag keeps
// the Go references): row dot products for every type (AVX2, AVX-512/VNNI), tile
// kernels that take 8 weight rows against one token (decoding) or one row against
// 16, 8 or 4 tokens (prompts) and reduce their pairs' sums together (tile_amd64.go;
// F16 and BF16 prompts one row against 6, 4 or 2 tokens, floattile_amd64.go,
// and with AVX2 only against 3 or 2 (dotF16AVX2t3 …, f32Tokens); Q8_0, Q4_0
// and Q5_0 prompts on AVX2 4 rows against 4 tokens (Q4_0, Q5_0: 8 while 8 are left; dot0Tiles,
// _asm/dot0tiles.go: each block decoded once for the tokens, the 16 pairs' sums
// reduced together, their float steps 8 pairs to a register in the one-token
// kernel's order), the rows left over and prompts of 2-3 tokens one row
// against 4 or 2 tokens (dot0Rows, _asm/dot0tokens.go);
// F32 from 2 tokens on (a verification step's positions) one row against 6, 4 or
// 2 tokens with AVX-512 and 3 or 2 with AVX2 (dotF32AVX512t6 …, dotF32AVX2t3,
// t2; f32Tokens), every token in dotF32AVX2's order, the groups of 8 past the
// last multiple of 64 into accumulator 0 and the last cols%8 added in Go
// (addF32Tail), so with dotF32Row's bits; the AVX2 kernels take the eight
// accumulators in two passes of four;
// Q4_1, Q5_1 and the lattice types' prompts several tokens per AVX2 call, each block
// unpacked once (Q4_1 and Q5_1 with AVX-512: 16 rows against 2 tokens, below); Q4_K on AVX2 one row against 8, 4 or 2 tokens (dotQ4KAVX2x8, x4,
// _asm/q4ktokens.go: the tokens' sums reduced together and their float steps
// run lane by lane, for a speculative verification step's few tokens; 6-7 or 3
// tokens left through the 8- or 4-token kernel again over the last ones; Q6_K
// the same way, dotQ6KAVX2x8, x4, _asm/q6ktokens.go, each token's float steps
// those of the one-token kernel, and with AVX-512 first one row against 16 or 8
// tokens, dotQ6KAVX512x16, x8, 12-15 or 6-7 tokens left through them again over
// the last ones, then 4 tokens through dotQ6KAVX512x4 (MatMul's chunks of 16
// tokens from an even one through dotQ6KAVX512x16p instead, on activations laid
// out by pairs of tokens, acts.q6P, so that each 512-bit register holds two
// tokens' 8 lanes from the start: 0.72x x16's CPU): issue 36 found decoding 16
// sequences 0.85x as fast after Q6_K moved to llama.cpp's order with only AVX2
// multi-token kernels; Q5_K with AVX-512 the same, dotQ5KAVX512x16, x8,
// _asm/q5ktokens.go, where AVX2 takes two tokens per call, dotQ5KAVX2x2); Q4_K with
// AVX-512 VBMI one row against
// 5-16 tokens through the VNNI kernel of that count (dotQ4KAVX512r1t5p … t16p,
// _asm/q4kvnnip.go: the tokens' scales and bsums loaded under a mask, two
// tokens' int16-sized accumulators packed per vector for the scales and the
// reduction; q4KRowVNNI: a verification step's positions), 2-4 tokens four rows at a
// time (q4KRows4); IQ4_NL
// and Q5_0 decoding 16 rows per AVX-512 call (IQ4_NL's and IQ4_XS's prompts
// on AVX2: one row against 8 or 4 tokens, dotIQ4NLRows and dotIQ4XSRows,
// _asm/iq4tokens.go); Q4_1 and Q5_1, in ggml's 8-lane
// order, 16 rows against 1 or 2 tokens per AVX-512 call, one register per lane of
// the 8 holding it for the 16 rows (dotQ4_1AVX512x16t1, t2; lanesTokens); Q5_K,
// Q6_K and Q3_K, in that order too, take no tiles (Q3_K: one row against 2 or 4
// tokens per AVX2 call, 4 or 8 per AVX-512 call, dotQ3KRows, _asm/q3k.go;
// llama.cpp's own Q3_K x86 kernel has no 512-bit form);
// a batch's short last chunk of 11-15 tokens goes through the 16-token kernel
// again over the last 16 tokens, 2-3 tokens left through the 4-token kernel over
// the last 4 or, for a batch of 2-3 tokens, over activations padded with zero rows),
// attention in three steps per chunk of positions (attend_amd64.go: scores,
// each key's lanes summed in attnScore's tree, online-softmax factors with a
// vector attnExpf, accumulator update, the last fused with the next chunk's scores
// for head size 64); a chunk is 64 contiguous positions, or
// one block of a paged cache (AttendBlocks) of 8 to 64 positions. Then the
// activation quantizers, binary16/bfloat16 rounding, the binary16 conversion of
// keys and values, and SwiGLU (act_amd64.go). Each has its Go
// reference beside it and a table test against it with odd sizes, unaligned slices
// and guard values. A test that needs a level calls requireSIMD, which logs
// "avx2 ran" or "avx512 skipped: CPU lacks avx512f ..."; the package's TestMain
// fails the run when the CPU has a level (golang.org/x/sys/cpu) whose tests skipped,
// or, in an unfiltered run, whose tests never ran (simdlevel_test.go).
//
// The level is read once, from golang.org/x/sys/cpu, which honours GODEBUG:
// GODEBUG=cpu.avx512f=off runs a process (the engine, a test or a benchmark) on
// the AVX2 kernels of an AVX-512 machine, as an AVX2-only CPU runs them
// (TestGODEBUGCapsTheSIMDLevel); docs/PERFORMANCE.md measures the AVX2 level so.
//
// Threads: MatMul and Parallel run on a persistent worker pool; each worker takes
// an equal share of the first three quarters of the rows, then chunks of the rest
// from a shared counter (sched.go), so that a worker slowed by another process does
// not hold up the others. Steady-state calls allocate nothing (tested).
//
// Determinism: every output value is computed by the same code in the same order,
// whatever the number of tokens in the call and the number of goroutines, so a
// token's results never depend on the batch it ran in (tested). SIMD versions may
// round differently from the reference, but must keep this property: the tile
// kernels give every output the single-row kernel's bits, and the attention
// assembly gives the Go loop's bits.
package kernels
