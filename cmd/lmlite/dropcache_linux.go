package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropFromPageCache asks the kernel to drop a file's pages from the page cache
// (posix_fadvise POSIX_FADV_DONTNEED), so that the next read of it goes to the disk.
// Pages that a process maps, or that are dirty, stay.
func dropFromPageCache(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	return unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// settleOutOfCache writes a file just written to the disk (fdatasync) and drops it
// from the page cache, so that the first model load reads it in through the
// engine's mapping, which asks for huge pages: the page cache then holds it in 2 MiB
// folios. Cached as it was written, it would keep the folios of the writes, and
// every reload of the model would fault it in a few pages at a time
// (docs/PERFORMANCE.md, "Cold start").
func settleOutOfCache(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	if err := unix.Fdatasync(int(fh.Fd())); err != nil {
		return err
	}
	return unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED)
}
