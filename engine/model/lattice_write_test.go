package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWriteLatticeModels writes bench models of the lattice types (which have no
// quantizer of ours) with llama.cpp's own quantizer, as latticeModel does for the
// parity test, for the speed rows in docs/PERFORMANCE.md. It runs only when asked:
//
//	LMLITE_LATTICE_OUT=DIR [LMLITE_LATTICE_PRESET=125m] [LMLITE_LATTICE_TYPES=iq2_xxs,iq1_s] \
//	  go test -run TestWriteLatticeModels -timeout 1h ./engine/model
//
// writes DIR/llama-PRESET-TYPE.gguf (seed 1) for each type and opens it.
func TestWriteLatticeModels(t *testing.T) {
	dir := os.Getenv("LMLITE_LATTICE_OUT")
	if dir == "" {
		t.Skip("LMLITE_LATTICE_OUT is not set: nothing to write")
	}
	preset := os.Getenv("LMLITE_LATTICE_PRESET")
	if preset == "" {
		preset = "125m"
	}
	var names []string
	if s := os.Getenv("LMLITE_LATTICE_TYPES"); s != "" {
		names = strings.Split(s, ",")
	} else {
		for n := range latticeTypes {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	for _, name := range names {
		if _, ok := latticeTypes[name]; !ok {
			t.Fatalf("%s is not a lattice type", name)
		}
		path := filepath.Join(dir, "llama-"+preset+"-"+name+".gguf")
		latticeModel(t, path, "llama", preset, 1, name)
		os.Remove(path + ".f32")
		m, err := Open(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		t.Logf("wrote %s (%s)", path, m.Config().Arch)
		m.Close()
	}
}
