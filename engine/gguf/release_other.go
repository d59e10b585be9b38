//go:build !unix

package gguf

// Release does nothing where the file is read into memory rather than mapped.
func (f *File) Release(b []byte) {}
