package gguf

import "syscall"

// adviseHugePages asks the kernel to map the weights with 2 MiB pages where it can
// (MADV_HUGEPAGE; transparent_hugepage=madvise is the common default). Pages read
// into the page cache through such a mapping are read as 2 MiB folios, and a
// mapping of a file whose pages are 2 MiB folios faults them in 2 MiB at a time:
// a reload of a 650 MiB model then takes ~330 page faults instead of ~10,000, and
// every forward pass misses the TLB far less (docs/PERFORMANCE.md, "Cold start").
// Pages the page cache already holds as small folios stay small. An error (no THP
// in this kernel) is harmless.
func adviseHugePages(b []byte) { _ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) }
