// Package engine is lmlite's embedded inference runtime: GGUF models loaded by mmap
// (engine/gguf), tokenizers (engine/tokenizer), chat templates (engine/chat), the
// model architectures (engine/model) over a small kernel interface (engine/kernels),
// and sampling (engine/sample).
//
// The Block API in api.go is the shape that the gateway and Go programs embedding the
// engine use (LM Lite's LMLiteBlock): a block of model configs, Ready, Generate
// returning a Stream of tokens and a final Usage, Close and GC.
package engine
