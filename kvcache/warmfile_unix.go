//go:build unix

package kvcache

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// mapWarmFile opens (or creates) path to hold floats binary16 values and maps it
// shared, read-write: the warm tier then lives in the page cache and on disk rather
// than in anonymous memory, and outlives the process. A file of that size already is
// kept as it is (reused: its index may say what it holds); otherwise it is cleared to
// the size.
func mapWarmFile(path string, floats int) ([]uint16, func() error, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, false, fmt.Errorf("kvcache: warm file: %w", err)
	}
	defer f.Close()
	size := int64(floats) * 2
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, false, fmt.Errorf("kvcache: warm file: %w", err)
	}
	reused := fi.Size() == size
	if !reused {
		os.Remove(indexPath(path))
		if err := f.Truncate(0); err != nil {
			return nil, nil, false, fmt.Errorf("kvcache: warm file: %w", err)
		}
		if err := f.Truncate(size); err != nil {
			return nil, nil, false, fmt.Errorf("kvcache: warm file: %w", err)
		}
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, false, fmt.Errorf("kvcache: mapping the warm file: %w", err)
	}
	// The mapping is page-aligned, so it is aligned for uint16.
	data := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), floats)
	return data, func() error { return syscall.Munmap(b) }, reused, nil
}
