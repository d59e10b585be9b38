//go:build unix

package kvcache

import (
	"syscall"
	"unsafe"
)

// anonMap maps n binary16 values of anonymous, private memory; when the system
// refuses (a limit on mappings), it falls back to the Go heap (unmap nil).
func anonMap(n int) ([]uint16, func() error) {
	if n == 0 {
		return nil, nil
	}
	b, err := syscall.Mmap(-1, 0, 2*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]uint16, n), nil
	}
	adviseHugePages(b)
	// The mapping is page-aligned, so it is aligned for uint16.
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n), func() error { return syscall.Munmap(b) }
}
