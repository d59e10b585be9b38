//go:build !unix

package model

import "time"

// cpuTime is not measured here: cpu-ms/op reads 0.
func cpuTime() time.Duration { return 0 }
