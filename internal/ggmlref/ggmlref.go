// Package ggmlref runs llama.cpp's own quantizers, decoders and CPU dot products
// (ggml, from the prebuilt libraries of the npm peer in ../shared/peers/llamacpp)
// for tests: c/ggmlref.c is built with gcc against them once per test binary, with
// the public headers taken from the llama.cpp git bundle the package carries (as
// the peer's bench.sh does).
package ggmlref

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
	"golang.org/x/sys/cpu"
)

//go:embed c/ggmlref.c
var source []byte

var (
	mu     sync.Mutex
	builds = map[string]built{} // by CPU variant ("" the default)
)

type built struct {
	path string
	err  error
}

// Binary returns the path of the built ggmlref program, linked with the CPU
// variant llama.cpp picks on an AVX2 CPU (or the baseline one); it skips the test
// (fails it in CI) when the peer, gcc or git is missing.
func Binary(t testing.TB) string {
	t.Helper()
	return binary_(t, "")
}

// BinaryAVX512 is Binary linked with llama.cpp's AVX-512 CPU variant (skylakex: the
// arithmetic of its AVX-512 builds, such as ggml_v_expf's); the test skips on a CPU
// without AVX-512.
func BinaryAVX512(t testing.TB) string {
	t.Helper()
	if !(cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512CD) {
		t.Skip("llama.cpp's AVX-512 variant needs an AVX-512 CPU")
	}
	return binary_(t, "skylakex")
}

// BinaryZen4 is Binary linked with llama.cpp's zen4 CPU variant, the one its
// loader picks on an AMD Zen 4 (AVX-512 with VNNI, VBMI and BF16): the variant
// the npm peer runs on these machines. The test skips on a CPU without those.
func BinaryZen4(t testing.TB) string {
	t.Helper()
	x := cpu.X86
	if !(x.HasAVX512F && x.HasAVX512DQ && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512CD && x.HasAVX512VNNI && x.HasAVX512VBMI && x.HasAVX512BF16) {
		t.Skip("llama.cpp's zen4 variant needs AVX-512 with VNNI, VBMI and BF16")
	}
	return binary_(t, "zen4")
}

func binary_(t testing.TB, variant string) string {
	t.Helper()
	shared := testenv.Shared(t) // (it may skip the test: not while holding mu)
	mu.Lock()
	b, ok := builds[variant]
	if !ok {
		b.path, b.err = build(shared, variant)
		builds[variant] = b
	}
	mu.Unlock()
	if b.err != nil {
		testenv.Missing(t, "llama.cpp's libraries (the npm peer) with gcc and git", b.err)
	}
	return b.path
}

func build(shared, cpuVariant string) (string, error) {
	setup := filepath.Join(shared, "peers", "llamacpp", "setup.sh")
	out, err := exec.Command(setup).Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", setup, err)
	}
	dir := strings.TrimSpace(string(out))
	lib := filepath.Join(dir, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
	inc := filepath.Join(dir, "include")
	if _, err := os.Stat(filepath.Join(inc, "ggml-cpu.h")); err != nil {
		if err := extractHeaders(dir, inc); err != nil {
			return "", err
		}
	}
	variant := "libggml-cpu-x64.so"
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C {
		variant = "libggml-cpu-haswell.so" // the variant llama.cpp picks on an AVX2 CPU
	}
	if cpuVariant != "" {
		variant = "libggml-cpu-" + cpuVariant + ".so"
	}
	tmp, err := os.MkdirTemp("", "ggmlref")
	if err != nil {
		return "", err
	}
	src := filepath.Join(tmp, "ggmlref.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(tmp, "ggmlref")
	cmd := exec.Command("gcc", "-O1", "-o", bin, src, "-I"+inc, "-L"+lib,
		"-l:libggml-base.so", "-l:"+variant, "-Wl,-rpath,"+lib)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc: %w: %s", err, msg)
	}
	return bin, nil
}

// extractHeaders writes ggml's public headers from the package's llama.cpp git
// bundle into inc.
func extractHeaders(dir, inc string) error {
	tmp, err := os.MkdirTemp("", "ggmlref-git")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	git := func(args ...string) ([]byte, error) {
		return exec.Command("git", append([]string{"-C", tmp}, args...)...).Output()
	}
	if _, err := git("init", "-q"); err != nil {
		return err
	}
	if _, err := git("fetch", "-q", filepath.Join(dir, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")); err != nil {
		return fmt.Errorf("git fetch of llama.cpp's bundle: %w", err)
	}
	names, err := git("ls-tree", "--name-only", "FETCH_HEAD", "ggml/include/")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(inc, 0o755); err != nil {
		return err
	}
	for _, h := range strings.Fields(string(names)) {
		if !strings.HasSuffix(h, ".h") {
			continue
		}
		b, err := git("show", "FETCH_HEAD:"+h)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(inc, filepath.Base(h)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Rows is what llama.cpp gives for rows of weights and one activation row.
type Rows struct {
	Enc  []byte    // the rows quantized by llama.cpp (or the raw blocks given)
	Deq  []float32 // decoded by llama.cpp
	Dots []float32 // each row's dot product with the activations, by llama.cpp's CPU backend
	Act  []byte    // the activations in the type's vec_dot_type blocks, as llama.cpp quantized them
}

// Run has llama.cpp quantize w (rows × cols) to ggml type typ (with an all-ones
// importance matrix where the type requires one), or take the blocks in raw as
// they are (raw != nil), then decode them and multiply them with x (cols floats).
// rowBytes is the encoded size of one row.
func Run(t testing.TB, typ uint32, rows, cols, rowBytes int, w []float32, raw []byte, x []float32) Rows {
	t.Helper()
	return run(t, Binary(t), typ, rows, cols, rowBytes, w, raw, x)
}

// RunAVX512 is Run through llama.cpp's AVX-512 CPU variant (BinaryAVX512).
func RunAVX512(t testing.TB, typ uint32, rows, cols, rowBytes int, w []float32, raw []byte, x []float32) Rows {
	t.Helper()
	return run(t, BinaryAVX512(t), typ, rows, cols, rowBytes, w, raw, x)
}

func run(t testing.TB, bin string, typ uint32, rows, cols, rowBytes int, w []float32, raw []byte, x []float32) Rows {
	t.Helper()
	var in bytes.Buffer
	args := []string{fmt.Sprint(typ), fmt.Sprint(rows), fmt.Sprint(cols)}
	if raw != nil {
		in.Write(raw)
		args = append(args, "raw")
	} else {
		binary.Write(&in, binary.LittleEndian, w)
	}
	binary.Write(&in, binary.LittleEndian, x)
	cmd := exec.Command(bin, args...)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ggmlref type %d: %v: %s", typ, err, stderr.String())
	}
	rb := rows * rowBytes
	if len(out) < rb+4*rows*cols+4*rows {
		t.Fatalf("ggmlref type %d: %d bytes of output", typ, len(out))
	}
	r := Rows{Enc: out[:rb], Deq: make([]float32, rows*cols), Dots: make([]float32, rows)}
	binary.Decode(out[rb:], binary.LittleEndian, r.Deq)
	binary.Decode(out[rb+4*rows*cols:], binary.LittleEndian, r.Dots)
	r.Act = out[rb+4*rows*cols+4*rows:]
	return r
}

// MatMul has llama.cpp's CPU backend (the program bin: Binary, BinaryAVX512 or
// BinaryZen4; one thread) compute ggml_mul_mat of rows × cols weights, given as
// the type's raw blocks, with the nTok activation rows of x: nTok rows of rows
// float32 values. repack puts the weights in the CPU backend's CPU_REPACK buffer
// type, as llama.cpp loads a model (use_extra_bufts, its default): Q4_0 and Q4_K
// matrices of a multiple of 8 rows then take its repacked kernels (ggml_gemv_*
// for one token, ggml_gemm_* for each group of 4); without, its vec_dot (and
// llamafile's sgemm for several tokens where that applies). The test fails when
// repack is asked and the repacked kernels do not take the product.
func MatMul(t testing.TB, bin string, typ uint32, rows, cols int, raw []byte, x []float32, nTok int, repack bool) []float32 {
	t.Helper()
	var in bytes.Buffer
	in.Write(raw)
	binary.Write(&in, binary.LittleEndian, x[:nTok*cols])
	rp := "0"
	if repack {
		rp = "1"
	}
	cmd := exec.Command(bin, "matmul", fmt.Sprint(typ), fmt.Sprint(rows), fmt.Sprint(cols), fmt.Sprint(nTok), rp)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ggmlref matmul type %d: %v: %s", typ, err, stderr.String())
	}
	if len(out) != 4*rows*nTok {
		t.Fatalf("ggmlref matmul: %d bytes of output", len(out))
	}
	res := make([]float32, rows*nTok)
	binary.Decode(out, binary.LittleEndian, res)
	return res
}

// SwiGLU has llama.cpp's CPU backend, its AVX-512 variant, compute its SwiGLU op
// (ggml_swiglu_split, as its feed-forward layers call it) on gate and up:
// silu(gate[i])·up[i].
func SwiGLU(t testing.TB, gate, up []float32) []float32 {
	t.Helper()
	var in bytes.Buffer
	binary.Write(&in, binary.LittleEndian, gate)
	binary.Write(&in, binary.LittleEndian, up[:len(gate)])
	cmd := exec.Command(BinaryAVX512(t), "swiglu", fmt.Sprint(len(gate)))
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ggmlref swiglu: %v: %s", err, stderr.String())
	}
	if len(out) != 4*len(gate) {
		t.Fatalf("ggmlref swiglu: %d bytes of output", len(out))
	}
	res := make([]float32, len(gate))
	binary.Decode(out, binary.LittleEndian, res)
	return res
}

// Attend has llama.cpp's CPU backend, its AVX-512 variant, compute its flash
// attention op (ggml_flash_attn_ext) for one head and one query over n cached
// positions whose keys and values (len(q) binary16 values each) are k and v, as it
// decodes over its default F16 KV cache: the head's len(q) output values.
func Attend(t testing.TB, q []float32, k, v []uint16, n int, scale float32) []float32 {
	t.Helper()
	hd := len(q)
	var in bytes.Buffer
	binary.Write(&in, binary.LittleEndian, q)
	binary.Write(&in, binary.LittleEndian, k[:n*hd])
	binary.Write(&in, binary.LittleEndian, v[:n*hd])
	cmd := exec.Command(BinaryAVX512(t), "attend", fmt.Sprint(hd), fmt.Sprint(n), strconv.FormatFloat(float64(scale), 'g', -1, 32))
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ggmlref attend: %v: %s", err, stderr.String())
	}
	if len(out) != 4*hd {
		t.Fatalf("ggmlref attend: %d bytes of output", len(out))
	}
	res := make([]float32, hd)
	binary.Decode(out, binary.LittleEndian, res)
	return res
}

// LoRA is what llama.cpp's CPU backend, its AVX-512 variant, computes for an
// adapted projection as its build_lora_mm (llama-graph.cpp) builds it: T = A·x,
// U = B·T, WX = W·x and Res = WX + scale·U, for nTok activation rows of in values.
type LoRA struct {
	T, U, WX, Res []float32 // nTok rows of rank, out, out and out values
}

// RunLoRA has llama.cpp (BinaryAVX512, one thread) compute the projection W·x
// adapted by the pair A, B at scale for the nTok rows of x, each matrix given as
// its ggml type and raw rows: W out rows of in values, A rank rows of in, B out
// rows of rank. One row (nTok 1) takes the path in which llama.cpp decodes;
// several, its prompts' (llamafile's sgemm where it applies).
func RunLoRA(t testing.TB, wType, aType, bType uint32, w, a, b []byte, in, out, rank, nTok int, x []float32, scale float32) LoRA {
	t.Helper()
	var inb bytes.Buffer
	inb.Write(w)
	inb.Write(a)
	inb.Write(b)
	binary.Write(&inb, binary.LittleEndian, x[:nTok*in])
	cmd := exec.Command(BinaryAVX512(t), "lora", fmt.Sprint(wType), fmt.Sprint(aType), fmt.Sprint(bType),
		fmt.Sprint(in), fmt.Sprint(out), fmt.Sprint(rank), fmt.Sprint(nTok), strconv.FormatFloat(float64(scale), 'g', -1, 32))
	cmd.Stdin = &inb
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("ggmlref lora: %v: %s", err, stderr.String())
	}
	if len(res) != 4*nTok*(rank+3*out) {
		t.Fatalf("ggmlref lora: %d bytes of output, want %d", len(res), 4*nTok*(rank+3*out))
	}
	l := LoRA{T: make([]float32, nTok*rank), U: make([]float32, nTok*out), WX: make([]float32, nTok*out), Res: make([]float32, nTok*out)}
	for _, v := range [][]float32{l.T, l.U, l.WX, l.Res} {
		n, _ := binary.Decode(res, binary.LittleEndian, v)
		res = res[n:]
	}
	return l
}

// RoPE has llama.cpp's CPU backend, its AVX-512 variant, rotate x (nTok tokens of
// nHeads heads of hd values) by its RoPE op (ggml_rope_ext without YaRN, as its
// graphs call it): the first nDims values of each head, at the tokens' positions,
// neox or normal pairs, with the frequency base and scale.
func RoPE(t testing.TB, x []float32, hd, nHeads int, pos []int32, nDims int, neox bool, base, freqScale float32) []float32 {
	t.Helper()
	n := hd * nHeads * len(pos)
	var in bytes.Buffer
	binary.Write(&in, binary.LittleEndian, pos)
	binary.Write(&in, binary.LittleEndian, x[:n])
	mode := 0
	if neox {
		mode = 2
	}
	f := func(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }
	cmd := exec.Command(BinaryAVX512(t), "rope", fmt.Sprint(hd), fmt.Sprint(nHeads), fmt.Sprint(len(pos)), fmt.Sprint(nDims), fmt.Sprint(mode), f(base), f(freqScale))
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ggmlref rope: %v: %s", err, stderr.String())
	}
	if len(out) != 4*n {
		t.Fatalf("ggmlref rope: %d bytes of output", len(out))
	}
	res := make([]float32, n)
	binary.Decode(out, binary.LittleEndian, res)
	return res
}
