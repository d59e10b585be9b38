package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/lmlite/lmlite/internal/testenv"
)

// sample builds a file with every metadata type, nested arrays and three tensors.
func sample() *Writer {
	w := NewWriter()
	w.AddKV("general.architecture", String("llama"))
	w.AddKV("u8", Uint8(200))
	w.AddKV("i8", Int8(-100))
	w.AddKV("u16", Uint16(60000))
	w.AddKV("i16", Int16(-30000))
	w.AddKV("u32", Uint32(4000000000))
	w.AddKV("i32", Int32(-2000000000))
	w.AddKV("f32", Float32(1.5))
	w.AddKV("bool", Bool(true))
	w.AddKV("str", String("héllo ▁ wörld"))
	w.AddKV("u64", Uint64(math.MaxUint64))
	w.AddKV("i64", Int64(math.MinInt64))
	w.AddKV("f64", Float64(-2.25))
	w.AddKV("strs", Strings([]string{"a", "", "<0x0A>"}))
	w.AddKV("f32s", Float32s([]float32{0, -1, 3.25}))
	w.AddKV("i32s", Int32s([]int32{1, -2, 3}))
	w.AddKV("u8s", Array(TypeUint8, []Value{Uint8(1), Uint8(2)}))
	w.AddKV("bools", Bools([]bool{true, false}))
	w.AddKV("nested", Array(TypeArray, []Value{Strings([]string{"x", "y"}), Int32s([]int32{7}), Array(TypeArray, []Value{Bools([]bool{true})})}))
	w.AddKV("empty", Strings([]string{}))
	f32 := make([]byte, 4*6)
	for i := range 6 {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(i)))
	}
	must(w.AddTensor("a", F32, []uint64{3, 2}, f32))
	must(w.AddTensor("b", Q8_0, []uint64{64}, bytes.Repeat([]byte{7}, 68)))
	must(w.AddTensor("c", F16, []uint64{5}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}))
	return w
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func encode(t testing.TB, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	w := sample()
	data := encode(t, w)
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != 32 || f.DataOffset%32 != 0 {
		t.Fatalf("version %d alignment %d data offset %d", f.Version, f.Alignment, f.DataOffset)
	}
	if len(f.KV) != len(w.kv) {
		t.Fatalf("%d KVs, wrote %d", len(f.KV), len(w.kv))
	}
	for i, kv := range w.kv {
		got := f.KV[i]
		if got.Key != kv.Key || got.Value.Type() != kv.Value.Type() || got.Value.ElemType() != kv.Value.ElemType() {
			t.Errorf("KV %d: got %s %s/%s, want %s %s/%s", i, got.Key, got.Value.Type(), got.Value.ElemType(), kv.Key, kv.Value.Type(), kv.Value.ElemType())
		}
		if !reflect.DeepEqual(got.Value, kv.Value) {
			t.Errorf("KV %s: got %#v, want %#v", kv.Key, got.Value.Any(), kv.Value.Any())
		}
	}
	if s, _ := f.GetString("str"); s != "héllo ▁ wörld" {
		t.Errorf("str = %q", s)
	}
	if u, ok := f.GetUint("u64"); !ok || u != math.MaxUint64 {
		t.Errorf("u64 = %d %v", u, ok)
	}
	if v, _ := f.Get("i64"); func() bool { i, ok := v.Int(); return !ok || i != math.MinInt64 }() {
		t.Errorf("i64 = %v", v.Any())
	}
	if _, ok := f.GetUint("i8"); ok {
		t.Error("negative int8 read as uint")
	}
	if x, _ := f.GetFloat("f32"); x != 1.5 {
		t.Errorf("f32 = %v", x)
	}
	if b, _ := f.GetBool("bool"); !b {
		t.Error("bool")
	}
	if v, _ := f.Get("u8s"); func() bool { a, ok := v.Int32s(); return !ok || !reflect.DeepEqual(a, []int32{1, 2}) }() {
		t.Errorf("u8s as int32s: %v", v.Any())
	}
	nested, _ := f.Get("nested")
	arr, ok := nested.Array()
	if !ok || len(arr) != 3 {
		t.Fatalf("nested: %v", nested.Any())
	}
	if s, _ := arr[0].Strings(); !reflect.DeepEqual(s, []string{"x", "y"}) {
		t.Errorf("nested[0] = %v", s)
	}
	if f.Architecture() != "llama" {
		t.Errorf("architecture %q", f.Architecture())
	}
	if len(f.Tensors) != 3 {
		t.Fatalf("%d tensors", len(f.Tensors))
	}
	for _, wt := range w.tensors {
		ti, ok := f.Tensor(wt.info.Name)
		if !ok {
			t.Fatalf("tensor %s missing", wt.info.Name)
		}
		if ti.Offset%32 != 0 || ti.Type != wt.info.Type || !reflect.DeepEqual(ti.Dims, wt.info.Dims) {
			t.Errorf("tensor %s: %+v", ti.Name, ti)
		}
		got := f.TensorData(ti)
		if !bytes.Equal(got, wt.data) {
			t.Errorf("tensor %s data differs", ti.Name)
		}
		// The data is a view into the parsed buffer, not a copy.
		start := uintptr(unsafe.Pointer(&data[0]))
		if p := uintptr(unsafe.Pointer(&got[0])); p < start || p >= start+uintptr(len(data)) {
			t.Errorf("tensor %s data was copied", ti.Name)
		}
	}
	if a, _ := f.Tensor("a"); a.Elements() != 6 || a.Size != 24 {
		t.Errorf("a: %d elements, %d bytes", a.Elements(), a.Size)
	}
	// Re-encoding what was read gives the same bytes.
	w2 := NewWriter()
	for _, kv := range f.KV {
		w2.AddKV(kv.Key, kv.Value)
	}
	for i := range f.Tensors {
		must(w2.AddTensor(f.Tensors[i].Name, f.Tensors[i].Type, f.Tensors[i].Dims, f.TensorData(&f.Tensors[i])))
	}
	if !bytes.Equal(encode(t, w2), data) {
		t.Error("re-encoding differs")
	}
}

func TestAlignment(t *testing.T) {
	w := sample()
	w.AddKV("general.alignment", Uint32(64))
	f, err := Parse(encode(t, w))
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Fatalf("alignment %d, data offset %d", f.Alignment, f.DataOffset)
	}
	for _, ti := range f.Tensors {
		if ti.Offset%64 != 0 {
			t.Errorf("%s at %d", ti.Name, ti.Offset)
		}
	}
}

func TestWriterRejects(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensor("x", F32, []uint64{4}, make([]byte, 15)); err == nil {
		t.Error("short data accepted")
	}
	if err := w.AddTensor("x", Q4_K, []uint64{100}, make([]byte, 100)); err == nil {
		t.Error("row not a multiple of the block accepted")
	}
	if err := w.AddTensor("x", GGMLType(99), []uint64{4}, make([]byte, 4)); err == nil {
		t.Error("unknown type accepted")
	}
	must(w.AddTensor("x", F32, []uint64{1}, make([]byte, 4)))
	if err := w.AddTensor("x", F32, []uint64{1}, make([]byte, 4)); err == nil {
		t.Error("duplicate accepted")
	}
}

func TestWriteFileAndOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := sample().WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, _ := f.Tensor("a")
	if got := math.Float32frombits(binary.LittleEndian.Uint32(f.TensorData(ti)[20:])); got != 5 {
		t.Errorf("a[5] = %v", got)
	}
	if f.Size() == 0 {
		t.Error("size 0")
	}
}

// TestOpenErrors: Open's errors are matched by kind (a missing file is
// fs.ErrNotExist, a directory syscall.EISDIR, a file that is not GGUF ErrFormat)
// and say what is wrong.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		must(os.WriteFile(p, b, 0o644))
		return p
	}
	cases := []struct {
		path string
		kind error
		want string
	}{
		{filepath.Join(dir, "missing.gguf"), fs.ErrNotExist, "no such file"},
		{dir, syscall.EISDIR, "is a directory"},
		{write("empty", nil), ErrFormat, "too short"},
		{write("text", []byte("hello, this is not a model")), ErrFormat, "not a GGUF file"},
	}
	for _, c := range cases {
		_, err := Open(c.path)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s) = %v, want %v saying %q", filepath.Base(c.path), err, c.kind, c.want)
		}
	}
}

// header returns the bytes of a file header with the given counts.
func header(version uint32, nTensors, nKV uint64) []byte {
	b := []byte(Magic)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint64(b, nTensors)
	return binary.LittleEndian.AppendUint64(b, nKV)
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

func TestMalformed(t *testing.T) {
	kv := func(key string, typ uint32, payload ...byte) []byte {
		b := appendStr(nil, key)
		b = binary.LittleEndian.AppendUint32(b, typ)
		return append(b, payload...)
	}
	u64 := func(x uint64) []byte { return binary.LittleEndian.AppendUint64(nil, x) }
	u32 := func(x uint32) []byte { return binary.LittleEndian.AppendUint32(nil, x) }
	tensor := func(name string, dims []uint64, typ uint32, off uint64) []byte {
		b := appendStr(nil, name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(dims)))
		for _, d := range dims {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		b = binary.LittleEndian.AppendUint32(b, typ)
		return binary.LittleEndian.AppendUint64(b, off)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"version 1", header(1, 0, 0), "version 1"},
		{"version 9", header(9, 0, 0), "unsupported GGUF version 9"},
		{"big endian", cat([]byte(Magic), []byte{0, 0, 0, 3}, make([]byte, 16)), "big-endian"},
		{"truncated header", header(3, 0, 0)[:10], "truncated"},
		{"absurd kv count", header(3, 0, 1<<60), "metadata count"},
		{"absurd tensor count", header(3, 1<<62, 0), "tensor count"},
		{"unknown value type", cat(header(3, 0, 1), kv("k", 77, 0, 0, 0, 0)), "unknown value type 77"},
		{"unknown array type", cat(header(3, 0, 1), kv("k", 9, cat(u32(99), u64(1))...)), "unknown array element type 99"},
		{"absurd array length", cat(header(3, 0, 1), kv("k", 9, cat(u32(0), u64(1<<40))...)), "larger than the rest of the file"},
		{"absurd string length", cat(header(3, 0, 1), kv("k", 8, u64(1<<50)...)), "exceeds"},
		{"string past end", cat(header(3, 0, 1), kv("k", 8, cat(u64(100), []byte("abc"))...)), "truncated"},
		{"absurd key length", cat(header(3, 0, 1), u64(1<<40), make([]byte, 16)), "exceeds the limit"},
		{"deep nesting", cat(header(3, 0, 1), kv("k", 9, bytes.Repeat(cat(u32(9), u64(1)), 20)...)), "nested deeper"},
		{"duplicate key", cat(header(3, 0, 2), kv("k", 0, 1), kv("k", 0, 2)), "duplicate metadata key"},
		{"bad alignment", cat(header(3, 0, 1), kv("general.alignment", 4, u32(3)...)), "general.alignment"},
		{"alignment wrong type", cat(header(3, 0, 1), kv("general.alignment", 10, u64(32)...)), "general.alignment"},
		{"too many dims", cat(header(3, 1, 0), tensor("t", []uint64{1, 1, 1, 1, 1}, 0, 0)), "5 dimensions"},
		{"zero dims", cat(header(3, 1, 0), tensor("t", nil, 0, 0), make([]byte, 16)), "0 dimensions"},
		{"unknown tensor type", cat(header(3, 1, 0), tensor("t", []uint64{4}, 55, 0)), "unknown tensor type 55"},
		{"bad block multiple", cat(header(3, 1, 0), tensor("t", []uint64{100}, uint32(Q4_K), 0)), "block size"},
		{"size overflow", cat(header(3, 1, 0), tensor("t", []uint64{1 << 40, 1 << 40, 1 << 40}, 0, 0)), "overflows"},
		{"data past end", cat(header(3, 1, 0), tensor("t", []uint64{1 << 20}, 0, 0), make([]byte, 64)), "runs past the end"},
		{"offset past end", cat(header(3, 1, 0), tensor("t", []uint64{1}, 0, 1<<62), make([]byte, 64)), "runs past the end"},
		{"unaligned offset", cat(header(3, 1, 0), tensor("t", []uint64{1}, 0, 4), make([]byte, 64)), "not a multiple of the alignment"},
		{"duplicate tensor", cat(header(3, 2, 0), tensor("t", []uint64{1}, 0, 0), tensor("t", []uint64{1}, 0, 0), make([]byte, 64)), "duplicate tensor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.data)
			if err == nil {
				t.Fatalf("no error, want one containing %q", c.want)
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want ErrFormat containing %q", err, c.want)
			}
		})
	}
}

// Every prefix of a valid file fails cleanly (a truncated download).
func TestTruncatedEverywhere(t *testing.T) {
	data := encode(t, sample())
	for n := 0; n < len(data); n++ {
		if _, err := Parse(data[:n]); err == nil {
			// Cutting inside the last tensor's alignment padding leaves a valid file only
			// if every tensor still fits; the sample's last tensor ends before its pad.
			f, _ := Parse(data[:n])
			last := f.Tensors[len(f.Tensors)-1]
			if f.DataOffset+int64(last.Offset)+last.Size > int64(n) {
				t.Fatalf("prefix of %d bytes parsed although tensor %s is cut", n, last.Name)
			}
		}
	}
}

// The real files in ../shared all parse: models and vocab-only files.
func TestSharedFiles(t *testing.T) {
	shared := testenv.Shared(t)
	paths, _ := filepath.Glob(filepath.Join(shared, "models", "*.gguf"))
	vocab, _ := filepath.Glob(filepath.Join(shared, "testdata", "tokenizer", "*.gguf"))
	paths = append(paths, vocab...)
	if len(paths) < 10 {
		t.Fatalf("found only %d GGUF files under %s", len(paths), shared)
	}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(p), err)
			continue
		}
		if toks, ok := f.Get("tokenizer.ggml.tokens"); !ok || toks.Len() == 0 {
			t.Errorf("%s: no tokenizer.ggml.tokens", filepath.Base(p))
		}
		for i := range f.Tensors {
			_ = f.TensorData(&f.Tensors[i]) // in bounds by construction
		}
		f.Close()
	}
	f, err := Open(filepath.Join(shared, "models", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Architecture() != "llama" {
		t.Errorf("stories260K architecture %q", f.Architecture())
	}
	if n, _ := f.GetUint("llama.embedding_length"); n != 64 {
		t.Errorf("stories260K embedding_length %d", n)
	}
	ti, ok := f.Tensor("token_embd.weight")
	if !ok || ti.Type != F32 || ti.Dims[0] != 64 || ti.Dims[1] != 512 {
		t.Errorf("token_embd.weight: %+v", ti)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(encode(f, sample()))
	w := sample()
	w.AddKV("general.alignment", Uint32(64))
	f.Add(encode(f, w))
	f.Add(header(3, 0, 0))
	f.Add(header(2, 1, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error not ErrFormat: %v", err)
			}
			return
		}
		// A file that parses can be read whole and written back, and the result parses
		// to the same metadata and tensors.
		w := NewWriter()
		for _, kv := range file.KV {
			w.AddKV(kv.Key, kv.Value)
			kv.Value.Array()
			kv.Value.Int32s()
			kv.Value.Float32s()
		}
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, file.TensorData(ti)); err != nil {
				t.Fatalf("re-adding tensor: %v", err)
			}
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatalf("re-encoded file does not parse: %v", err)
		}
		if len(again.KV) != len(file.KV) || len(again.Tensors) != len(file.Tensors) {
			t.Fatalf("re-encoded file differs")
		}
	})
}

// TestRemap: a File closed after Open maps its file again without parsing it (the
// metadata and the tensor table are the same values, the tensor bytes are the file's),
// and a file that has changed since (another size, or the same size written at
// another time) is parsed anew.
func TestRemap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := sample().WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(f.TensorData(&f.Tensors[0]))
	f.Close()

	g, err := f.Remap(path)
	if err != nil {
		t.Fatal(err)
	}
	if &g.KV[0] != &f.KV[0] || &g.Tensors[0] != &f.Tensors[0] {
		t.Error("Remap parsed the header again; it should share the closed File's")
	}
	if got := g.TensorData(&g.Tensors[0]); !bytes.Equal(got, want) || g.Size() == 0 {
		t.Errorf("remapped tensor a = %v, want %v (size %d)", got, want, g.Size())
	}
	if f.Size() != 0 {
		t.Error("Remap changed the closed File")
	}
	g.Close()

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sameLen := strings.Repeat("x", len("héllo ▁ wörld"))
	for _, c := range []struct {
		name  string
		str   string
		mtime time.Time
	}{
		{"another size, the same time", strings.Repeat("changed ", 20), st.ModTime()},
		{"the same size, another time", sameLen, st.ModTime().Add(time.Hour)},
	} {
		w := sample()
		w.AddKV("str", String(c.str))
		if err := w.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, c.mtime, c.mtime); err != nil {
			t.Fatal(err)
		}
		if c.str == sameLen {
			if fi, _ := os.Stat(path); fi.Size() != st.Size() {
				t.Fatalf("%s: the file has %d bytes, want %d", c.name, fi.Size(), st.Size())
			}
		}
		h, err := f.Remap(path)
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := h.GetString("str"); s != c.str || &h.KV[0] == &f.KV[0] {
			t.Errorf("%s: str = %q, want the new file's %q (header parsed again)", c.name, s, c.str)
		}
		h.Close()
	}

	// A File from Parse has no file to compare with: Remap opens the path.
	p, err := Parse(encode(t, sample()))
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Remap(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := h.GetString("str"); s != sameLen {
		t.Errorf("Remap of a parsed File: str = %q, want the file's", s)
	}
	h.Close()
}

// TestHeader: a header leaves out the metadata under the given prefixes and the
// mapping, keeps the rest, and maps the file again with Remap.
func TestHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := sample().WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(f.TensorData(&f.Tensors[1]))
	h := f.Header("str", "nested")
	f.Close()
	if h.Size() != 0 || len(h.KV) != len(f.KV)-3 {
		t.Errorf("header: size %d, %d keys (want 0 and %d)", h.Size(), len(h.KV), len(f.KV)-3)
	}
	g, err := h.Remap(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for key, kept := range map[string]bool{"str": false, "strs": false, "nested": false, "u8": true, "general.architecture": true, "empty": true} {
		if _, ok := g.Get(key); ok != kept {
			t.Errorf("remapped header: key %q present %v, want %v", key, ok, kept)
		}
	}
	if v, _ := g.GetUint("u8"); v != 200 {
		t.Errorf("u8 = %d", v)
	}
	ti, ok := g.Tensor("b")
	if !ok || !bytes.Equal(g.TensorData(ti), want) {
		t.Errorf("remapped tensor b differs (found %v)", ok)
	}
}

// TestShapeDropsTrailingOnes: a tensor's shape is its ggml ne with the trailing
// dimensions of length 1 dropped, the first always kept (issue 32).
func TestShapeDropsTrailingOnes(t *testing.T) {
	for _, c := range []struct{ dims, want []uint64 }{
		{[]uint64{256, 1}, []uint64{256}},
		{[]uint64{256, 512, 1, 1}, []uint64{256, 512}},
		{[]uint64{1, 1}, []uint64{1}},
		{[]uint64{1, 8}, []uint64{1, 8}},
		{[]uint64{32, 1, 8}, []uint64{32, 1, 8}},
	} {
		ti := TensorInfo{Dims: c.dims}
		if got := ti.Shape(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Shape of %v = %v, want %v", c.dims, got, c.want)
		}
	}
}
