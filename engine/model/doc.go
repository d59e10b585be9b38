// Package model runs the transformer architectures of lmlite's engine over GGUF
// weights: llama (and Mistral), qwen2 (QKV biases), qwen3 (per-head QK RMSNorm) and
// phi3 (fused QKV and gate|up projections), and the mixtures of experts llama with
// experts (Mixtral), qwen2moe (with its shared expert), qwen3moe and olmoe.
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
// Mixtures of experts (moe.go): the experts are stacked tensors
// (blk.N.ffn_{gate,up,down}_exps.weight) and the router blk.N.ffn_gate_inp.weight, as
// llama.cpp's converter writes them; the hyperparameters (expert_count,
// expert_used_count, expert_feed_forward_length, expert_shared_feed_forward_length)
// are read as llama.cpp reads them per architecture, and the gating is llama.cpp's for
// each (softmax over all experts, then the top k; their weights renormalised for llama
// and qwen3moe). Other mixtures of experts (deepseek2's latent attention, ...) are
// refused at load with ErrUnsupportedArch. Routing is deterministic: the top k is a
// total order (higher probability, then lower expert index), so a token picks the
// same experts alone or in any batch, and exact ties always go to the lower index. In
// a batch, the tokens routed to one expert go through its weights as one matrix
// product (expert packing), and each token's expert outputs are summed in expert
// order; the chosen experts' gate and up products run as one kernels.MatMuls, their
// down products as another (two starts of the kernels' workers per layer, not three
// per expert). Expert weights are views into the mapped file: experts no token picks are
// not read. Model.ExpertLoad counts the tokens routed to each expert.
//
// LoRA adapters (lora.go): Model.OpenAdapter loads a GGUF adapter as llama.cpp
// writes and reads it (convert_lora_to_gguf.py, llama-adapter.cpp): general.type
// "adapter", adapter.type "lora", the base's general.architecture, adapter.lora.alpha,
// and pairs <base tensor>.lora_a [in, rank] / .lora_b [rank, out]; any mismatch is
// an ErrBadAdapter naming the tensor. The dense projections are adapted (attention,
// fused or not, the dense FFN and the output; not the token embedding or experts).
// A sequence carries its adapters (State.SetLoRA, Item.LoRA, each a model.LoRA with
// the user's scale): the adapted projection of its rows is W·x + s·B·(A·x), s = scale
// × alpha / rank (alpha 0: scale), each row's products in their one-token order
// (the rows of a step on one adapter share one product, which reads the adapter
// once), so sequences on different adapters (or none) share a batched step and keep
// the bits they have alone. Parity with llama.cpp applying the same adapters is tested.
//
// Determinism: a token's logits are the same bits whatever batch it ran in and
// however many goroutines the kernels used (tested).
package model
