package model

import "github.com/lmlite/lmlite/engine/gguf"

// ReadConfig reads a model's hyperparameters from its metadata without loading its
// tensors (the runtime sizes KV memory from it before a load).
func ReadConfig(f *gguf.File) (Config, error) { return readConfig(f) }
