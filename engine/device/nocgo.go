//go:build !cgo

package device

// Probe reports CPU only: go-nvml needs cgo, and this build has none.
func Probe() Inventory { return Inventory{NVML: "built without cgo"} }
