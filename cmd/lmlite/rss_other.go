//go:build !unix

package main

// peakRSS is not measured on this system.
func peakRSS() int64 { return 0 }
