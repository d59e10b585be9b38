//go:build !linux

package respstore

import "os"

// datasync makes f's written data durable; without fdatasync, a full fsync.
func datasync(f *os.File) error { return f.Sync() }
