//go:build linux

package gguf

import (
	"os"
	"syscall"
	"unsafe"
)

// Release tells the kernel that the process will not read b (a part of the
// file's data, TensorData's) for a while: the whole pages inside it leave the
// process's resident set (MADV_DONTNEED on the read-only shared mapping; the
// file's pages stay in the page cache and a later read faults them back in,
// with the same bytes). Only a mapped File (Open's) releases anything. A model that copies a tensor out of the mapping (a
// repacked layout) releases the original so that its resident memory counts
// the bytes once.
func (f *File) Release(b []byte) {
	if len(b) == 0 || f.unmap == nil {
		return // not mapped (Parse's data): nothing to release
	}
	ps := os.Getpagesize()
	lo := (ps - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(ps))) % ps
	hi := lo + (len(b)-lo)/ps*ps
	if hi-lo < ps {
		return
	}
	_ = syscall.Madvise(b[lo:hi], syscall.MADV_DONTNEED)
}
