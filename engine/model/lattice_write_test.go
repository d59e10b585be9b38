package model

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// TestWriteLatticeModels writes bench models of the lattice types (which have no
// quantizer of ours) with llama.cpp's own quantizer, as latticeModel does for the
// parity test, for the speed rows in docs/PERFORMANCE.md. It runs only when asked:
//
//	LMLITE_LATTICE_OUT=DIR [LMLITE_LATTICE_PRESET=125m] [LMLITE_LATTICE_TYPES=iq2_xxs,iq1_s] \
//	  go test -run TestWriteLatticeModels -timeout 1h ./engine/model
//
// writes DIR/llama-PRESET-TYPE.gguf (seed 1) for each type and opens it. With
// LMLITE_LATTICE_RANDOM=1 the matrices are random blocks instead (random bytes, a
// small f16 scale in each block; LMLITE_LATTICE_VOCAB=V.gguf: the vocabulary of
// gen-model --vocab V.gguf): the same shapes and speed in seconds, where
// llama.cpp's quantizer takes many minutes on a 1b model; for speed rows only.
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
		_, lattice := latticeTypes[name]
		_, random := randomBlockTypes[name]
		if !lattice && !(random && os.Getenv("LMLITE_LATTICE_RANDOM") != "") {
			t.Fatalf("%s is not a lattice type (IQ4_NL: random blocks only)", name)
		}
		path := filepath.Join(dir, "llama-"+preset+"-"+name+".gguf")
		if os.Getenv("LMLITE_LATTICE_RANDOM") != "" {
			latticeRandomModel(t, path, preset, name)
		} else {
			latticeModel(t, path, "llama", preset, 1, name)
		}
		os.Remove(path + ".f32")
		m, err := Open(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		t.Logf("wrote %s (%s)", path, m.Config().Arch)
		m.Close()
	}
}

// randomBlockTypes are the other types TestWriteLatticeModels writes as random
// blocks (LMLITE_LATTICE_RANDOM=1): IQ4_NL, whose quantizer's search takes gen-model
// most of an hour on the 1b shape.
var randomBlockTypes = map[string]struct {
	typ   kernels.Type
	ftype uint32
}{
	"iq4_nl": {kernels.IQ4_NL, 25},
}

// latticeRandomModel writes to path the llama model of the preset (seed 1; the
// shapes of gen-model's) with every matrix of rows of a multiple of 256 as random
// blocks of the lattice type name (or IQ4_NL), each with the f16 scale 2⁻¹⁰ (IQ1_M's
// in its scale words' top nibbles).
func latticeRandomModel(t *testing.T, path, preset, name string) {
	t.Helper()
	lt, ok := latticeTypes[name]
	if !ok {
		lt = randomBlockTypes[name]
	}
	base := path + ".f32"
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: preset, Type: "q8_0", Seed: 1, Vocab: os.Getenv("LMLITE_LATTICE_VOCAB")}, base); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 2))
	w := gguf.NewWriter()
	for _, kv := range f.KV {
		if kv.Key != "general.file_type" {
			w.AddKV(kv.Key, kv.Value)
		}
	}
	w.AddKV("general.file_type", gguf.Uint32(lt.ftype))
	bb := lt.typ.BlockBytes()
	d := uint16(0x1400) // f16 2⁻¹⁰
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		typ, data := ti.Type, f.TensorData(ti)
		if len(ti.Dims) >= 2 && ti.Dims[0]%256 == 0 && ti.Type == gguf.GGMLType(kernels.Q8_0) {
			buf := make([]byte, int(ti.Elements())/lt.typ.BlockSize()*bb)
			for j := range buf {
				buf[j] = byte(r.Uint32())
			}
			for b := 0; b < len(buf); b += bb {
				if lt.typ == kernels.IQ1_M {
					for k := 0; k < 4; k++ {
						buf[b+48+2*k+1] = buf[b+48+2*k+1]&0x0f | byte(d>>(4*k)&0xf)<<4
					}
				} else {
					buf[b], buf[b+1] = byte(d), byte(d>>8)
				}
			}
			typ, data = gguf.GGMLType(lt.typ), buf
		}
		if err := w.AddTensor(ti.Name, typ, ti.Dims, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}
