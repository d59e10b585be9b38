//go:build !unix

package kvcache

import "fmt"

func mapWarmFile(path string, floats int) ([]uint16, func() error, error) {
	return nil, nil, fmt.Errorf("%w: a warm file needs a unix system", ErrConfig)
}
