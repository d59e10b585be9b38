//go:build linux

package gguf

import (
	"bytes"
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

// Copy returns a private copy of b (a part of the file's data) to change in
// place (a repacked layout), outside the Go heap when f is mapped: an anonymous
// mapping of its own, unmapped with the file's (Close), so that hundreds of MiB
// of weights do not raise the garbage collector's goal (GOGC) and let that much
// garbage accumulate beside them. A File that is not mapped (Parse's) copies b
// onto the heap. Not for concurrent use with Copy or Close on the same File
// (each load maps its own: Open, Remap).
func (f *File) Copy(b []byte) []byte {
	if f.unmap == nil || len(b) == 0 {
		return bytes.Clone(b)
	}
	c, err := syscall.Mmap(-1, 0, len(b), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return bytes.Clone(b)
	}
	adviseHugePages(c)
	copy(c, b)
	unmap := f.unmap
	f.unmap = func() error {
		err := unmap()
		if e := syscall.Munmap(c); err == nil {
			err = e
		}
		return err
	}
	return c
}
