//go:build unix && !linux

package gguf

func adviseHugePages([]byte) {}
