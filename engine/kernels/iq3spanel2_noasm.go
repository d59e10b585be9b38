//go:build !amd64 || purego

package kernels

func usesIQ3SAVX2Panel(wt Type, rows int) bool { return false }
