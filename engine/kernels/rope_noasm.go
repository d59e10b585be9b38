//go:build !amd64 || purego

package kernels

func ropeHead(v, cos, sin []float32, neox bool) { ropeHeadGeneric(v, cos, sin, 0, neox) }
