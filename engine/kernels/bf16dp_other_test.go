//go:build !amd64 || purego

package kernels

// setBF16DP: no VDPBF16PS kernels here.
func setBF16DP(on bool) (was bool) { return false }
