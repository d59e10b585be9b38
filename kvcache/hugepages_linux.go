package kvcache

import "syscall"

// adviseHugePages asks for transparent huge pages on the arena where the system
// allows them (enabled=madvise is the common default): with 4 KiB pages, decoding
// 16 sequences ran 5-7% slower than with the arena in a Go slice, since attention
// reads all over it (docs/PERFORMANCE.md, issue 12). Pages are still faulted in
// lazily, 2 MiB at a time. An error (no THP in this kernel) is harmless.
func adviseHugePages(b []byte) { _ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) }
