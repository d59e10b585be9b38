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
