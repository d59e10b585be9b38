//go:build unix && !linux

package kvcache

// adviseHugePages: huge pages are asked for on Linux only.
func adviseHugePages([]byte) {}
