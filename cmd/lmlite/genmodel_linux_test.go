package main

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestGenModelLeavesPageCache: gen-model's output is not left in the page cache as
// its writes cached it (the first load reads it in through the engine's huge-page
// mapping instead). mincore on a mapping of the file that nothing has touched says
// which of its pages the page cache holds.
func TestGenModelLeavesPageCache(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || fs.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs: its pages are the file, nothing to drop")
	}
	path := filepath.Join(dir, "m.gguf")
	if err := commands["gen-model"].run([]string{"--preset", "tiny", "--type", "q8_0", "--out", path}); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	st, _ := fh.Stat()
	b, err := unix.Mmap(int(fh.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	if resident > len(vec)/10 {
		t.Errorf("%d of the file's %d pages are in the page cache after gen-model", resident, len(vec))
	}
}
