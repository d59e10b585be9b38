package model

import (
	"bytes"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// PackQ4K says whether Load repacks the layers' Q4_K matrices for the packed
// kernels where they run (kernels.PacksQ4K: AVX-512 with VNNI). Each packed
// matrix is copied out of the file's read-only mapping once and repacked in
// place (kernels.PackQ4K): the same bytes, in the process's own memory rather
// than the shared page cache, whose pages of the plain matrix the process
// releases (so its resident memory counts them once; but worker processes
// each hold their own copy, where the mapping would share one).
// Every product keeps its bits either way. Tests and benchmarks set it to
// compare the two layouts.
var PackQ4K = true

// packQ4K packs the Q4_K layer matrix m (tensor name) when PackQ4K says so.
// token_embd.weight stays plain: its rows are read one by one as embeddings. The
// file's pages of the plain matrix are released (gguf.File.Release), so that
// the process's resident memory holds the weights once.
func packQ4K(f *gguf.File, m *kernels.Matrix, name string) {
	if !PackQ4K || m.Type != kernels.Q4_K || m.Rows < 16 || !strings.HasPrefix(name, "blk.") || !kernels.PacksQ4K() {
		return
	}
	plain := m.Data
	m.Data = bytes.Clone(plain)
	kernels.PackQ4K(m)
	f.Release(plain)
}
