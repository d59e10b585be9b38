//go:build !amd64 || purego

package kernels

func attnLanes(k []uint16, q []float32, lanes *[8]float32) { attnLanesGeneric(k, q, lanes) }
func attnMad(acc, v []uint16, s float32)                   { attnMadGeneric(acc, v, s) }
func attnScale(acc []uint16, s float32)                    { attnScaleGeneric(acc, s) }
