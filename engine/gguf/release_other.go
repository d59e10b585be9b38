//go:build !linux

package gguf

// Release does nothing here (outside Linux): the mapping keeps its pages.
func (f *File) Release(b []byte) {}
