package model

import (
	"math"
	"sort"
)

// TokenProb is a token and its probability.
type TokenProb struct {
	ID int32
	P  float64
}

// Probs returns softmax(logits) in float64.
func Probs(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp(float64(v) - mx)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// TopProbs returns the k most likely tokens of a logits row with their
// probabilities, most likely first (ties: lower id first).
func TopProbs(logits []float32, k int) []TokenProb {
	p := Probs(logits)
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	k = min(k, len(idx))
	out := make([]TokenProb, k)
	for i := range out {
		out[i] = TokenProb{ID: int32(idx[i]), P: p[idx[i]]}
	}
	return out
}
