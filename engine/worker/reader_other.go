//go:build !linux

package worker

// readerThread does nothing here (reader_linux.go puts the reader's thread in the
// batch scheduling class).
func readerThread() (undo func()) { return func() {} }
