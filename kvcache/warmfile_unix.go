//go:build unix

package kvcache

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// mapWarmFile creates (or truncates) path to hold floats binary16 values and maps it
// shared, read-write: the warm tier then lives in the page cache and on disk rather
// than in anonymous memory. The file is removed from the directory at once; the
// mapping keeps it until unmap.
func mapWarmFile(path string, floats int) ([]uint16, func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("kvcache: warm file: %w", err)
	}
	defer f.Close()
	size := int64(floats) * 2
	if err := f.Truncate(size); err != nil {
		return nil, nil, fmt.Errorf("kvcache: warm file: %w", err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("kvcache: mapping the warm file: %w", err)
	}
	os.Remove(path) // nothing else needs its name; the mapping holds the file
	// The mapping is page-aligned, so it is aligned for uint16.
	data := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), floats)
	return data, func() error { return syscall.Munmap(b) }, nil
}
