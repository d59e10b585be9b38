// Package model runs the transformer architectures of lmlite's engine over GGUF
// weights: llama (and Mistral), qwen2 (QKV biases), qwen3 (per-head QK RMSNorm) and
// phi3 (fused QKV and gate|up projections).
//
// Load reads the hyperparameters from the GGUF metadata (ARCH.embedding_length,
// ARCH.block_count, ARCH.attention.head_count[_kv], ARCH.feed_forward_length,
// ARCH.context_length, ARCH.rope.*, ARCH.attention.layer_norm_rms_epsilon, ...) and
// takes views of the tensors under llama.cpp's names (token_embd.weight,
// blk.N.attn_q.weight, ..., output_norm.weight, output.weight; without
// output.weight the embedding is tied). Weights stay in the memory-mapped file; the
// matrix work goes through engine/kernels, whose quantized dot products follow
// ggml's, so logits match llama.cpp's closely.
//
// A State is one sequence: its position and a binary16 KV cache. Forward takes a
// batch of that sequence's tokens (a prompt as one matrix-matrix pass, or one token
// per decode step) and returns logits:
//
//	m, err := model.Open("m.gguf")
//	st := m.NewState(0)
//	logits, err := st.Forward(promptIDs, false) // last token's Vocab logits
//	logits, err = st.Forward([]int32{next}, false)
//
// Determinism: a token's logits are the same bits whatever batch it ran in and
// however many goroutines the kernels used (tested).
package model
