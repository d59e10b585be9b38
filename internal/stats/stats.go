// Package stats holds the small statistics the benchmarks and load tests share.
package stats

import "slices"

// Median of xs (the mean of the two middle values for an even count; 0 for none).
// xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
