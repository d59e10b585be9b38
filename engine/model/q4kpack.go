package model

import (
	"os"
	"runtime"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// PackQ4K says whether Load repacks the layers' Q4_K matrices for the packed
// kernels where they run (kernels.PacksQ4K: AVX-512 with VNNI). Each packed
// matrix is copied out of the file's read-only mapping once and repacked in
// place (kernels.PackQ4K): the same bytes, in the process's own memory rather
// than the shared page cache, whose pages of the plain matrix the process
// releases (gguf.File.Release) so that its resident memory counts them once.
// Every product keeps its bits either way.
//
// Its default is PackQ4KDefault's for an in-process engine on this system
// (LMLITE_PACK_Q4K=0 or 1 overrides it); a worker process of the workers mode
// sets it to PackQ4KDefault's for a worker before loading (cmd/lmlite's worker).
// Tests and benchmarks set it to compare the two layouts.
var PackQ4K = PackQ4KDefault(runtime.GOOS, false, os.Getenv(EnvPackQ4K))

// EnvPackQ4K is the environment variable that overrides PackQ4KDefault: "0"
// loads Q4_K plain, "1" packs it (where kernels.PacksQ4K); anything else
// leaves the default.
const EnvPackQ4K = "LMLITE_PACK_Q4K"

// PackQ4KDefault decides whether Load packs Q4_K matrices (PackQ4K) on system
// goos, in a worker process of the workers mode (worker) or not, with
// EnvPackQ4K's value env. Packing is on only where it costs no memory: on
// Linux, where the file's pages of a packed matrix are released
// (gguf.File.Release; elsewhere the process would hold the weights twice),
// and not in a worker process, whose packed copy would be its own anonymous
// memory where the plain matrices share the page cache with the other workers.
func PackQ4KDefault(goos string, worker bool, env string) bool {
	switch env {
	case "0":
		return false
	case "1":
		return true
	}
	return goos == "linux" && !worker
}

// packQ4K packs the Q4_K layer matrix m (tensor name) when PackQ4K says so,
// into a copy of its bytes (gguf.File.Copy), and reports whether it did; the
// caller releases the file's plain bytes (gguf.File.Release) once the loading
// reads no more tensors, so that the process's resident memory holds the
// weights once. token_embd.weight stays plain: its rows are read one by one as
// embeddings.
func packQ4K(f *gguf.File, m *kernels.Matrix, name string) bool {
	if !PackQ4K || m.Type != kernels.Q4_K || m.Rows < 16 || !strings.HasPrefix(name, "blk.") || !kernels.PacksQ4K() {
		return false
	}
	m.Data = f.Copy(m.Data)
	kernels.PackQ4K(m)
	return true
}
