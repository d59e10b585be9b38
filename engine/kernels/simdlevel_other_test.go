//go:build !amd64 || purego

package kernels

// simdLevelTable is empty without the assembly: requireSIMD skips every level.
var simdLevelTable []simdLevel
