//go:build !unix

package kvcache

func anonMap(n int) ([]uint16, func() error) { return make([]uint16, n), nil }
