// Package kernels holds the numeric kernels of lmlite's engine: the operations a
// transformer forward pass spends its time in, over weights in ggml's tensor formats.
//
// The interface is deliberately small, because every kernel here is the pure-Go
// reference that faster implementations (AVX2, AVX-512/VNNI assembly, dispatched at
// run time) will implement and be tested against:
//
//   - MatMul(dst, w, x, nTok): a weight Matrix (type, rows, cols, encoded bytes as
//     the GGUF file holds them) times nTok activation rows; the projection of a
//     batch of tokens. Parallel over weight rows.
//   - DequantizeRow and QuantizeRow: one row to and from float32 (embedding lookup,
//     small vectors, and the model generator's quantizers).
//   - RMSNorm, RoPECache + RoPE (normal and NeoX), Softmax, SwiGLU, and Attend (one
//     head of one query over an F16 KV cache).
//
// Types: F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K, with ggml's block layouts byte for
// byte (Q4_K_M files mix the last two).
//
// Numerics follow llama.cpp's CPU backend rather than ideal arithmetic, so that the
// engine's logits can be compared with llama.cpp's closely: quantized weights are
// multiplied with activations quantized to 8 bits (Q8_0 blocks for Q8_0/Q4_0, Q8_K
// for the K-quants) using integer dot products, F16/BF16 weights with activations
// rounded to the same format, and attention runs as llama.cpp's flash attention
// does over an F16 cache.
//
// Determinism: every output value is computed by the same code in the same order,
// whatever the number of tokens in the call and the number of goroutines, so a
// token's results never depend on the batch it ran in (tested). SIMD versions may
// round differently from the reference, but must keep this property.
package kernels
