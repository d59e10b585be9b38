package gguf

import (
	"bytes"
	"path/filepath"
	"runtime"
	"testing"
)

// TestCopyOutsideTheHeap: File.Copy of a mapped File's tensor is a writable
// copy with the same bytes that the Go heap does not hold (so a model's packed
// weights do not raise the garbage collector's goal), its writes leave the
// file's bytes as they were, and Close unmaps it with the file.
func TestCopyOutsideTheHeap(t *testing.T) {
	w := NewWriter()
	w.AddKV("general.architecture", String("llama"))
	big := make([]byte, 8<<20/34*34)
	for i := range big {
		big[i] = byte(i*131 + i>>9 + 1)
	}
	must(w.AddTensor("big", Q8_0, []uint64{uint64(len(big) / 34 * 32)}, big))
	path := filepath.Join(t.TempDir(), "c.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("big")
	data := f.TensorData(ti)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := f.Copy(data)
	runtime.ReadMemStats(&after)
	if !bytes.Equal(c, big) {
		t.Fatal("the copy's bytes differ from the tensor's")
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew >= int64(len(big))/2 {
		t.Errorf("the heap grew by %d bytes with a copy of %d: the copy is on the heap", grew, len(big))
	}
	c[0] ^= 0xff
	if data[0] != big[0] {
		t.Fatal("a write to the copy changed the file's bytes")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
