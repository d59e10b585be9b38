package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// Writer builds a GGUF version 3 file: metadata in the order added, then tensor infos
// and the tensor data, each tensor aligned to general.alignment (32 unless set).
type Writer struct {
	kv      []KV
	kvIndex map[string]int
	tensors []wtensor
	tIndex  map[string]bool
}

type wtensor struct {
	info TensorInfo
	data []byte
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{kvIndex: map[string]int{}, tIndex: map[string]bool{}}
}

// AddKV adds a metadata value; adding a key again replaces its value in place.
func (w *Writer) AddKV(key string, v Value) {
	if i, ok := w.kvIndex[key]; ok {
		w.kv[i].Value = v
		return
	}
	w.kvIndex[key] = len(w.kv)
	w.kv = append(w.kv, KV{Key: key, Value: v})
}

// AddTensor adds a tensor. data must be exactly the encoded size of dims in typ; it is
// kept, not copied, until the file is written.
func (w *Writer) AddTensor(name string, typ GGMLType, dims []uint64, data []byte) error {
	if w.tIndex[name] {
		return fmt.Errorf("gguf: tensor %q added twice", name)
	}
	if len(dims) == 0 || len(dims) > maxDims {
		return fmt.Errorf("gguf: tensor %q: %d dimensions (1 to %d allowed)", name, len(dims), maxDims)
	}
	size, err := tensorBytes(typ, dims)
	if err != nil {
		return fmt.Errorf("gguf: tensor %q: %v", name, err)
	}
	if int64(len(data)) != size {
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, %s %v needs %d", name, len(data), typ, dims, size)
	}
	w.tIndex[name] = true
	w.tensors = append(w.tensors, wtensor{TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: typ, Size: size}, data})
	return nil
}

func (w *Writer) alignment() int64 {
	if i, ok := w.kvIndex["general.alignment"]; ok {
		if a, ok := w.kv[i].Value.Uint(); ok && a > 0 && a&(a-1) == 0 {
			return int64(a)
		}
	}
	return DefaultAlignment
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	cw := &countWriter{w: bufio.NewWriterSize(out, 1<<20)}
	e := &encoder{w: cw}
	e.raw([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kv)))
	for _, kv := range w.kv {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type()))
		e.value(kv.Value)
	}
	align := w.alignment()
	var off int64
	for i := range w.tensors {
		t := &w.tensors[i].info
		t.Offset = uint64(off)
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
		off += (t.Size + align - 1) / align * align
	}
	e.pad(align)
	for _, t := range w.tensors {
		e.raw(t.data)
		e.pad(align)
	}
	if e.err == nil {
		e.err = cw.w.(*bufio.Writer).Flush()
	}
	return cw.n, e.err
}

// WriteFile writes the file atomically: to a temporary file beside path, then renamed.
func (w *Writer) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := w.WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("gguf: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encoder writes little-endian values and remembers the first error.
type encoder struct {
	w   *countWriter
	err error
	b   [8]byte
}

func (e *encoder) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}
func (e *encoder) u8(x uint8) { e.b[0] = x; e.raw(e.b[:1]) }
func (e *encoder) u16(x uint16) {
	binary.LittleEndian.PutUint16(e.b[:], x)
	e.raw(e.b[:2])
}
func (e *encoder) u32(x uint32) {
	binary.LittleEndian.PutUint32(e.b[:], x)
	e.raw(e.b[:4])
}
func (e *encoder) u64(x uint64) {
	binary.LittleEndian.PutUint64(e.b[:], x)
	e.raw(e.b[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}

func (e *encoder) pad(align int64) {
	var zero [64]byte
	for n := (align - e.w.n%align) % align; n > 0 && e.err == nil; {
		k := min(n, int64(len(zero)))
		e.raw(zero[:k])
		n -= k
	}
}

func (e *encoder) value(v Value) {
	switch x := v.x.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	default:
		if v.typ != TypeArray {
			if e.err == nil {
				e.err = fmt.Errorf("gguf: cannot encode value of type %s", v.typ)
			}
			return
		}
		e.u32(uint32(v.elem))
		n := v.Len()
		e.u64(uint64(n))
		if s, ok := v.x.([]string); ok {
			for _, x := range s {
				e.str(x)
			}
			return
		}
		if nested, ok := v.x.([]Value); ok {
			for _, x := range nested { // each element: its own element type, count and items
				e.value(x)
			}
			return
		}
		for i := range n {
			e.value(v.index(i))
		}
	}
}
