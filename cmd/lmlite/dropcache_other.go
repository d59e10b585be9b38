//go:build !linux

package main

import "errors"

func dropFromPageCache(string) error {
	return errors.New("dropping a file from the page cache needs Linux (posix_fadvise)")
}

// settleOutOfCache is Linux's: elsewhere the file stays as the writes cached it.
func settleOutOfCache(string) error { return nil }
