// Package gguf reads and writes GGUF files, the llama.cpp model format (versions 2
// and 3).
//
// Open memory-maps a file read-only and parses its header: metadata (every value
// type, arrays nested to any reasonable depth), tensor infos, general.alignment and
// the data offset. Tensor data is never copied: TensorData returns a slice of the
// mapping, so loading is near-instant, replicas and processes share the pages, and
// Close gives them back. On Linux the mapping asks for transparent huge pages
// (MADV_HUGEPAGE): a file read into the page cache through it is cached in 2 MiB
// folios, which later mappings fault in 2 MiB at a time. Remap maps a closed File's
// file again without parsing the header (a model's reload after an idle unload),
// unless the file's size or modification time has changed.
//
// Files are untrusted input. Every count, length, size and offset is checked against
// what the rest of the file could hold before anything is allocated for it, and every
// problem is an error wrapping ErrFormat that names the field at fault: a hostile file
// can neither panic the reader nor make it allocate more than the file's own size.
// FuzzParse holds the reader to that.
//
// Writer produces version 3 files (gen-model and tests use it):
//
//	w := gguf.NewWriter()
//	w.AddKV("general.architecture", gguf.String("llama"))
//	w.AddTensor("token_embd.weight", gguf.F32, []uint64{dim, vocab}, data)
//	err := w.WriteFile("m.gguf")
package gguf
