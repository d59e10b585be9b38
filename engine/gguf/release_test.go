package gguf

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestReleaseKeepsBytes: Release of a mapped File's tensor leaves its bytes
// readable and the same (the pages come back from the file), and on a Parse'd
// File, whose data is the process's own memory, it changes nothing (releasing
// anonymous pages would zero them).
func TestReleaseKeepsBytes(t *testing.T) {
	w := NewWriter()
	w.AddKV("general.architecture", String("llama"))
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(i*131 + i>>9 + 1)
	}
	must(w.AddTensor("big", Q8_0, []uint64{uint64(len(big) / 34 * 32)}, big[:len(big)/34*34]))
	path := filepath.Join(t.TempDir(), "r.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parsed, err := Parse(bytes.Clone(encode(t, w)))
	if err != nil {
		t.Fatal(err)
	}
	want := big[:len(big)/34*34]
	for name, g := range map[string]*File{"mapped": f, "parsed": parsed} {
		ti, _ := g.Tensor("big")
		data := g.TensorData(ti)
		if !bytes.Equal(data, want) {
			t.Fatalf("%s: tensor bytes differ before Release", name)
		}
		g.Release(data)
		if !bytes.Equal(data, want) {
			t.Fatalf("%s: tensor bytes differ after Release", name)
		}
	}
}
