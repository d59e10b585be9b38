//go:build unix

package gguf

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// mapFile maps the whole file read-only and shared, so that replicas and processes
// share its pages and unmapping returns them.
func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	data, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	adviseHugePages(data)
	return data, func() error { return syscall.Munmap(data) }, nil
}
