package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
	"golang.org/x/sys/cpu"
)

// ggmlRef builds testdata/ggmlref.c against the prebuilt llama.cpp libraries of
// the npm peer (../shared/peers/llamacpp) once per test binary and returns its path;
// it skips (fails in CI) when the peer, gcc or git is missing.
func ggmlRef(t *testing.T) string {
	t.Helper()
	ggmlRefOnce.Do(func() { ggmlRefPath, ggmlRefErr = buildGGMLRef(testenv.Shared(t)) })
	if ggmlRefErr != nil {
		testenv.Missing(t, "llama.cpp's libraries (the npm peer) with gcc and git", ggmlRefErr)
	}
	return ggmlRefPath
}

var (
	ggmlRefOnce sync.Once
	ggmlRefPath string
	ggmlRefErr  error
)

func buildGGMLRef(shared string) (string, error) {
	setup := filepath.Join(shared, "peers", "llamacpp", "setup.sh")
	out, err := exec.Command(setup).Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", setup, err)
	}
	dir := strings.TrimSpace(string(out))
	lib := filepath.Join(dir, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
	inc := filepath.Join(dir, "include")
	if _, err := os.Stat(filepath.Join(inc, "ggml-cpu.h")); err != nil {
		// The package carries llama.cpp's sources as a git bundle (as bench.sh
		// does, take the public headers from it).
		tmp, err := os.MkdirTemp("", "ggmlref")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		git := func(args ...string) ([]byte, error) {
			return exec.Command("git", append([]string{"-C", tmp}, args...)...).Output()
		}
		if _, err := git("init", "-q"); err != nil {
			return "", err
		}
		if _, err := git("fetch", "-q", filepath.Join(dir, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")); err != nil {
			return "", fmt.Errorf("git fetch of llama.cpp's bundle: %w", err)
		}
		names, err := git("ls-tree", "--name-only", "FETCH_HEAD", "ggml/include/")
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(inc, 0o755); err != nil {
			return "", err
		}
		for _, h := range strings.Fields(string(names)) {
			if !strings.HasSuffix(h, ".h") {
				continue
			}
			b, err := git("show", "FETCH_HEAD:"+h)
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(inc, filepath.Base(h)), b, 0o644); err != nil {
				return "", err
			}
		}
	}
	variant := "libggml-cpu-x64.so"
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C {
		variant = "libggml-cpu-haswell.so" // the variant llama.cpp picks on an AVX2 CPU
	}
	src, err := filepath.Abs(filepath.Join("testdata", "ggmlref.c"))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("lmlite-ggmlref-%d", os.Getpid()))
	cmd := exec.Command("gcc", "-O1", "-o", bin, src, "-I"+inc, "-L"+lib,
		"-l:libggml-base.so", "-l:"+variant, "-Wl,-rpath,"+lib)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc: %w: %s", err, msg)
	}
	return bin, nil
}

// ggmlRows is what ggmlref gives for rows of weights and one activation row.
type ggmlRows struct {
	enc  []byte    // the rows quantized by llama.cpp
	deq  []float32 // decoded by llama.cpp
	dots []float32 // each row's dot product with the activations, by llama.cpp's CPU backend
}

func runGGMLRef(t *testing.T, typ Type, rows, cols int, w, x []float32) ggmlRows {
	t.Helper()
	var in bytes.Buffer
	binary.Write(&in, binary.LittleEndian, w)
	binary.Write(&in, binary.LittleEndian, x)
	cmd := exec.Command(ggmlRef(t), fmt.Sprint(uint32(typ)), fmt.Sprint(rows), fmt.Sprint(cols))
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ggmlref %v: %v: %s", typ, err, stderr.String())
	}
	rb := rows * typ.RowBytes(cols)
	if len(out) != rb+4*rows*cols+4*rows {
		t.Fatalf("ggmlref %v: %d bytes of output", typ, len(out))
	}
	r := ggmlRows{enc: out[:rb], deq: make([]float32, rows*cols), dots: make([]float32, rows)}
	binary.Decode(out[rb:], binary.LittleEndian, r.deq)
	binary.Decode(out[rb+4*rows*cols:], binary.LittleEndian, r.dots)
	return r
}

// TestAgainstLlamaCpp quantizes rows with llama.cpp's own quantizer (ggml's
// quantize_chunk, from the npm peer's libraries) and checks, for every quantized
// weight type, that DequantizeRow decodes them to llama.cpp's values bit for bit,
// and that MatMul's dot products (our activation quantization and integer sums)
// agree with llama.cpp's CPU backend (its vec_dot_type quantization and vec_dot) to
// float rounding: a different activation rounding or a misread scale shows far
// above the bound.
func TestAgainstLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C program against llama.cpp; skipped in -short")
	}
	for _, typ := range SupportedTypes() {
		if typ.BlockSize() == 1 {
			continue
		}
		t.Run(typ.String(), func(t *testing.T) {
			const rows, cols = 8, 1024
			r := rand.New(rand.NewPCG(31, uint64(typ)))
			w := randRow(r, rows*cols, 0.05)
			for i := range w {
				w[i] += 0.01
			}
			x := randRow(r, cols, 1)
			g := runGGMLRef(t, typ, rows, cols, w, x)
			m := Matrix{Type: typ, Rows: rows, Cols: cols, Data: g.enc}
			y := make([]float32, cols)
			for i := 0; i < rows; i++ {
				DequantizeRow(y, typ, m.Row(i))
				for j, v := range y {
					if want := g.deq[i*cols+j]; math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("row %d element %d decodes to %v, llama.cpp %v", i, j, v, want)
					}
				}
			}
			dst := make([]float32, rows)
			MatMul(dst, m, x, 1)
			var a acts
			a.prepare(typ, x, 1, cols)
			xq := actFloats(&a, 0)
			var worst float64
			for i := 0; i < rows; i++ {
				var norm float64
				for j, v := range g.deq[i*cols : (i+1)*cols] {
					norm += math.Abs(float64(v) * float64(xq[j]))
				}
				e := math.Abs(float64(dst[i])-float64(g.dots[i])) / norm
				worst = max(worst, e)
				if e > 1e-6 {
					t.Errorf("row %d: dot %v, llama.cpp %v (relative %.3g)", i, dst[i], g.dots[i], e)
				}
			}
			t.Logf("%v: worst relative difference from llama.cpp's dot product %.3g", typ, worst)
		})
	}
}
