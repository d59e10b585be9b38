package genmodel

import "github.com/lmlite/lmlite/engine/kernels"

// TensorTypeForTest exposes tensorType (untied output) to the external tests.
func TensorTypeForTest(ftype, name string, layer, layers, cols int) kernels.Type {
	return tensorType(ftype, name, layer, layers, cols, false)
}
