//go:build !unix

package kvcache

import "fmt"

func mapWarmFile(path string, floats int) ([]uint16, func() error, bool, error) {
	return nil, nil, false, fmt.Errorf("%w: a warm file needs a unix system", ErrConfig)
}
