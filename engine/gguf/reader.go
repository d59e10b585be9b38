package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the alignment of tensor data when general.alignment is absent.
const DefaultAlignment = 32

// Limits that keep a hostile file from making the reader allocate or loop without
// bound. Real files are far inside them.
const (
	maxDims       = 4       // GGML_MAX_DIMS
	maxArrayDepth = 8       // nesting of arrays of arrays
	maxKeyLen     = 1 << 16 // bytes of a metadata key or tensor name
)

// ErrFormat is wrapped by every error about the content of a file.
var ErrFormat = errors.New("gguf: malformed file")

// KV is one metadata key and its value.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor. Dims are in GGML order: Dims[0] is the length of a
// row (ne0), Dims[1] the number of rows, and so on.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64 // relative to the start of the data section
	Size   int64  // bytes
}

// Shape is the tensor's shape as ggml takes it: Dims with the trailing dimensions of
// length 1 dropped (at least one kept), so that [256 1] is the vector [256] (llama.cpp's
// converter writes some vectors, such as Qwen2MoE's ffn_gate_inp_shexp, that way).
func (t *TensorInfo) Shape() []uint64 { return TrimShape(t.Dims) }

// TrimShape is dims without its trailing 1s (the first dimension always kept).
func TrimShape(dims []uint64) []uint64 {
	n := len(dims)
	for n > 1 && dims[n-1] == 1 {
		n--
	}
	return dims[:n]
}

// Elements is the number of elements of the tensor.
func (t *TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= int64(d)
	}
	return n
}

// File is a parsed GGUF file. Its tensor data stays in the mapping (or the slice given
// to Parse) and is never copied; metadata strings are copied out.
type File struct {
	Version    uint32
	KV         []KV
	Tensors    []TensorInfo
	Alignment  int64
	DataOffset int64

	data    []byte
	unmap   func() error
	kvIndex map[string]int
	tIndex  map[string]int
	stat    fileStamp // of the file Open mapped, for Remap
}

// fileStamp is what says a file on disk is still the one that was parsed.
type fileStamp struct {
	size  int64
	mtime time.Time
}

func (s fileStamp) same(o fileStamp) bool { return s.size == o.size && s.mtime.Equal(o.mtime) }

// Open memory-maps the file read-only and parses it.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.IsDir() {
		return nil, &fs.PathError{Op: "gguf: open", Path: path, Err: syscall.EISDIR}
	}
	if st.Size() < 4 {
		return nil, fmt.Errorf("%w: %s: %d bytes is too short for a GGUF header", ErrFormat, path, st.Size())
	}
	data, unmap, err := mapFile(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: mapping %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	f.unmap, f.stat = unmap, fileStamp{st.Size(), st.ModTime()}
	return f, nil
}

// Header returns f's parsed header without its mapping (no tensor data; Remap maps
// the file again with it) and without the metadata whose keys start with one of
// drop: a model kept across unloads needs its tensor table and its configuration,
// not the vocabulary its tokenizer has already copied out (most of a header: 1 MiB
// for 32k tokens, 8.6 MiB for Qwen2's 152k tokens and merges).
func (f *File) Header(drop ...string) *File {
	h := &File{Version: f.Version, Tensors: f.Tensors, Alignment: f.Alignment, DataOffset: f.DataOffset,
		tIndex: f.tIndex, stat: f.stat, kvIndex: map[string]int{}}
	for _, kv := range f.KV {
		if slices.ContainsFunc(drop, func(p string) bool { return strings.HasPrefix(kv.Key, p) }) {
			continue
		}
		h.kvIndex[kv.Key] = len(h.KV)
		h.KV = append(h.KV, kv)
	}
	return h
}

// Remap maps the file at path again, sharing f's parsed metadata and tensor table
// instead of parsing the header again (a model's vocabulary alone is tens of
// thousands of strings): a reload after an unload costs a stat and an mmap. f is a
// File from Open, mapped or closed; it stays as it was. When the file at path is not
// the one f was parsed from (another size or modification time), or f did not come
// from Open, the file is opened and parsed anew.
func (f *File) Remap(path string) (*File, error) {
	if f.stat == (fileStamp{}) {
		return Open(path)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.IsDir() || !f.stat.same(fileStamp{st.Size(), st.ModTime()}) {
		return Open(path)
	}
	data, unmap, err := mapFile(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: mapping %s: %w", path, err)
	}
	g := *f
	g.data, g.unmap = data, unmap
	return &g, nil
}

// Close releases the mapping. The File and the tensor data it handed out must not be
// used afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap = nil
	f.data = nil
	return err
}

// Size is the number of bytes of the whole file.
func (f *File) Size() int64 { return int64(len(f.data)) }

// Get returns a metadata value.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// GetString returns a string metadata value.
func (f *File) GetString(key string) (string, bool) {
	v, ok := f.Get(key)
	if !ok {
		return "", false
	}
	return v.String()
}

// GetUint returns a non-negative integer metadata value.
func (f *File) GetUint(key string) (uint64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	return v.Uint()
}

// GetFloat returns a numeric metadata value as float64.
func (f *File) GetFloat(key string) (float64, bool) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	return v.Float()
}

// GetBool returns a bool metadata value.
func (f *File) GetBool(key string) (bool, bool) {
	v, ok := f.Get(key)
	if !ok {
		return false, false
	}
	return v.Bool()
}

// Architecture is general.architecture ("" when absent).
func (f *File) Architecture() string {
	s, _ := f.GetString("general.architecture")
	return s
}

// Tensor finds a tensor by name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorData returns the tensor's bytes inside the mapping: read-only, never copied.
func (f *File) TensorData(t *TensorInfo) []byte {
	start := f.DataOffset + int64(t.Offset)
	return f.data[start : start+t.Size : start+t.Size]
}

// Parse parses a GGUF file held in data. The File keeps data for its tensors.
func Parse(data []byte) (*File, error) {
	d := &decoder{buf: data}
	f, err := d.file()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrFormat, err.Error())
	}
	f.data = data
	return f, nil
}

// decoder reads little-endian values from buf, failing on any read past its end.
type decoder struct {
	buf []byte
	off int
}

func (d *decoder) remaining() int { return len(d.buf) - d.off }

func (d *decoder) take(n int, what string) ([]byte, error) {
	if n < 0 || n > d.remaining() {
		return nil, fmt.Errorf("truncated at byte %d reading %s (%d bytes needed, %d left)", d.off, what, n, d.remaining())
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	b, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	b, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *decoder) str(what string, limit uint64) (string, error) {
	s, err := d.rawStr(limit)
	if err != nil {
		return "", fmt.Errorf(err.Error(), what)
	}
	return s, nil
}

// rawStr reads a string; its error is a format with one %s for the caller to name the
// string, so that the hot path (a vocabulary's 150,000 strings) formats nothing.
func (d *decoder) rawStr(limit uint64) (string, error) {
	if d.remaining() < 8 {
		return "", fmt.Errorf("truncated at byte %d reading %%s length (8 bytes needed, %d left)", d.off, d.remaining())
	}
	n := binary.LittleEndian.Uint64(d.buf[d.off:])
	d.off += 8
	if n > limit {
		return "", fmt.Errorf("%%s length %d exceeds the limit of %d", n, limit)
	}
	if n > uint64(d.remaining()) {
		return "", fmt.Errorf("truncated at byte %d reading %%s (%d bytes needed, %d left)", d.off, n, d.remaining())
	}
	s := string(d.buf[d.off : d.off+int(n)])
	d.off += int(n)
	return s, nil
}

func (d *decoder) file() (*File, error) {
	magic, err := d.take(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("not a GGUF file (magic %q)", magic)
	}
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 1:
		return nil, fmt.Errorf("GGUF version 1 is not supported (only 2 and 3)")
	case version == 2 || version == 3:
	case version&0xffff == 0 && (version>>16 == 2 || version>>16 == 3 || version>>24 == 2 || version>>24 == 3):
		return nil, fmt.Errorf("big-endian GGUF files are not supported")
	default:
		return nil, fmt.Errorf("unsupported GGUF version %d", version)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Every KV takes at least 8+4 bytes and every tensor info at least 8+4+8+4+8, so a
	// count beyond what the rest of the file could hold is a lie: refuse it before
	// allocating anything for it.
	if nKV > uint64(d.remaining())/12 {
		return nil, fmt.Errorf("metadata count %d is larger than the file could hold", nKV)
	}
	if nTensors > uint64(d.remaining())/32 {
		return nil, fmt.Errorf("tensor count %d is larger than the file could hold", nTensors)
	}
	f := &File{Version: version, Alignment: DefaultAlignment,
		KV: make([]KV, 0, nKV), kvIndex: make(map[string]int, nKV),
		Tensors: make([]TensorInfo, 0, nTensors), tIndex: make(map[string]int, nTensors)}
	for i := uint64(0); i < nKV; i++ {
		key, err := d.str(fmt.Sprintf("metadata key #%d", i), maxKeyLen)
		if err != nil {
			return nil, err
		}
		typ, err := d.u32("type of " + key)
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(typ), key, 0)
		if err != nil {
			return nil, err
		}
		if _, dup := f.kvIndex[key]; dup {
			return nil, fmt.Errorf("duplicate metadata key %q", key)
		}
		f.kvIndex[key] = len(f.KV)
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.Uint()
		if !ok || v.Type() != TypeUint32 || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("general.alignment must be a power of two uint32 up to 1 MiB, got %v (%s)", v.Any(), v.Type())
		}
		f.Alignment = int64(a)
	}
	for i := uint64(0); i < nTensors; i++ {
		t, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tIndex[t.Name]; dup {
			return nil, fmt.Errorf("duplicate tensor %q", t.Name)
		}
		f.tIndex[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	// The data section starts at the next multiple of the alignment.
	off := int64(d.off)
	f.DataOffset = (off + f.Alignment - 1) / f.Alignment * f.Alignment
	dataLen := int64(len(d.buf)) - f.DataOffset
	if len(f.Tensors) > 0 && dataLen < 0 {
		return nil, fmt.Errorf("truncated: data section would start at byte %d past the end (%d)", f.DataOffset, len(d.buf))
	}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if int64(t.Offset)%f.Alignment != 0 {
			return nil, fmt.Errorf("tensor %q: offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > uint64(math.MaxInt64) || int64(t.Offset) > dataLen || t.Size > dataLen-int64(t.Offset) {
			return nil, fmt.Errorf("truncated: tensor %q (%d bytes at data offset %d) runs past the end of the file (data section %d bytes)", t.Name, t.Size, t.Offset, max(dataLen, 0))
		}
	}
	return f, nil
}

func (d *decoder) tensorInfo(i uint64) (TensorInfo, error) {
	name, err := d.str(fmt.Sprintf("tensor #%d name", i), maxKeyLen)
	if err != nil {
		return TensorInfo{}, err
	}
	nd, err := d.u32("dimension count of tensor " + name)
	if err != nil {
		return TensorInfo{}, err
	}
	if nd == 0 || nd > maxDims {
		return TensorInfo{}, fmt.Errorf("tensor %q has %d dimensions (1 to %d allowed)", name, nd, maxDims)
	}
	dims := make([]uint64, nd)
	for j := range dims {
		if dims[j], err = d.u64("dimensions of tensor " + name); err != nil {
			return TensorInfo{}, err
		}
	}
	typ, err := d.u32("type of tensor " + name)
	if err != nil {
		return TensorInfo{}, err
	}
	off, err := d.u64("offset of tensor " + name)
	if err != nil {
		return TensorInfo{}, err
	}
	size, err := tensorBytes(GGMLType(typ), dims)
	if err != nil {
		return TensorInfo{}, fmt.Errorf("tensor %q: %v", name, err)
	}
	return TensorInfo{Name: name, Dims: dims, Type: GGMLType(typ), Offset: off, Size: size}, nil
}

func (d *decoder) value(t ValueType, key string, depth int) (Value, error) {
	if sz := t.scalarSize(); sz > 0 {
		b, err := d.take(sz, "value of "+key)
		if err != nil {
			return Value{}, err
		}
		return scalar(t, b), nil
	}
	switch t {
	case TypeString:
		s, err := d.str("value of "+key, math.MaxInt32)
		if err != nil {
			return Value{}, err
		}
		return String(s), nil
	case TypeArray:
		if depth >= maxArrayDepth {
			return Value{}, fmt.Errorf("%s: arrays nested deeper than %d", key, maxArrayDepth)
		}
		et, err := d.u32("array type of " + key)
		if err != nil {
			return Value{}, err
		}
		elem := ValueType(et)
		n, err := d.u64("array length of " + key)
		if err != nil {
			return Value{}, err
		}
		return d.array(elem, n, key, depth)
	}
	return Value{}, fmt.Errorf("%s: unknown value type %d", key, uint32(t))
}

func scalar(t ValueType, b []byte) Value {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return Uint8(b[0])
	case TypeInt8:
		return Int8(int8(b[0]))
	case TypeBool:
		return Bool(b[0] != 0)
	case TypeUint16:
		return Uint16(le.Uint16(b))
	case TypeInt16:
		return Int16(int16(le.Uint16(b)))
	case TypeUint32:
		return Uint32(le.Uint32(b))
	case TypeInt32:
		return Int32(int32(le.Uint32(b)))
	case TypeFloat32:
		return Float32(math.Float32frombits(le.Uint32(b)))
	case TypeUint64:
		return Uint64(le.Uint64(b))
	case TypeInt64:
		return Int64(int64(le.Uint64(b)))
	case TypeFloat64:
		return Float64(math.Float64frombits(le.Uint64(b)))
	}
	panic("gguf: scalar of non-scalar type")
}

func (d *decoder) array(elem ValueType, n uint64, key string, depth int) (Value, error) {
	// The smallest encoding of one element bounds how many the rest of the file holds.
	minSize := uint64(elem.scalarSize())
	switch elem {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	if minSize == 0 {
		return Value{}, fmt.Errorf("%s: unknown array element type %d", key, uint32(elem))
	}
	if n > uint64(d.remaining())/minSize {
		return Value{}, fmt.Errorf("%s: array of %d %s elements is larger than the rest of the file (%d bytes)", key, n, elem, d.remaining())
	}
	cnt := int(n)
	if sz := elem.scalarSize(); sz > 0 {
		b, _ := d.take(cnt*sz, "")
		return scalarArray(elem, b, cnt), nil
	}
	if elem == TypeString {
		out := make([]string, cnt)
		for i := range out {
			s, err := d.rawStr(math.MaxInt32)
			if err != nil {
				return Value{}, fmt.Errorf(err.Error(), fmt.Sprintf("%s[%d]", key, i))
			}
			out[i] = s
		}
		return Strings(out), nil
	}
	out := make([]Value, cnt)
	for i := range out {
		v, err := d.value(TypeArray, fmt.Sprintf("%s[%d]", key, i), depth+1)
		if err != nil {
			return Value{}, err
		}
		out[i] = v
	}
	return Value{typ: TypeArray, elem: TypeArray, x: out}, nil
}

func scalarArray(elem ValueType, b []byte, n int) Value {
	var x any
	switch elem {
	case TypeUint8:
		x = decodeAll[uint8](b, n)
	case TypeInt8:
		x = decodeAll[int8](b, n)
	case TypeBool:
		x = decodeAll[bool](b, n)
	case TypeUint16:
		x = decodeAll[uint16](b, n)
	case TypeInt16:
		x = decodeAll[int16](b, n)
	case TypeUint32:
		x = decodeAll[uint32](b, n)
	case TypeInt32:
		x = decodeAll[int32](b, n)
	case TypeFloat32:
		x = decodeAll[float32](b, n)
	case TypeUint64:
		x = decodeAll[uint64](b, n)
	case TypeInt64:
		x = decodeAll[int64](b, n)
	case TypeFloat64:
		x = decodeAll[float64](b, n)
	}
	return Value{typ: TypeArray, elem: elem, x: x}
}

// decodeAll decodes n little-endian values of a fixed-size type from b, which the
// caller has checked holds them (encoding/binary has fast paths for such slices).
func decodeAll[T any](b []byte, n int) []T {
	a := make([]T, n)
	if _, err := binary.Decode(b, binary.LittleEndian, a); err != nil {
		panic("gguf: " + err.Error()) // the length was checked by the caller
	}
	return a
}
