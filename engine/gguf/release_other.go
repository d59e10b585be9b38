//go:build !linux

package gguf

import "bytes"

// Release does nothing here (outside Linux): the mapping keeps its pages.
func (f *File) Release(b []byte) {}

// Copy returns a copy of b (a part of the file's data) to change in place, on
// the heap here.
func (f *File) Copy(b []byte) []byte { return bytes.Clone(b) }
