package sample

import "math"

// Logprob is a token and its log-probability.
type Logprob struct {
	ID      int32
	Logprob float32
}

// LogSumExp returns log Σ exp(logits): logit − LogSumExp is a token's
// log-probability under the model's own distribution (before penalties,
// temperature and filters). NaN logits count as -Inf. The sum runs in float64 in id
// order, so the result depends on the logits alone.
func LogSumExp(logits []float32) float64 {
	maxL := math.Inf(-1)
	for _, l := range logits {
		if l == l {
			maxL = max(maxL, float64(l))
		}
	}
	if math.IsInf(maxL, 0) {
		return maxL
	}
	sum := 0.0
	for _, l := range logits {
		if l == l {
			sum += math.Exp(float64(l) - maxL)
		}
	}
	return maxL + math.Log(sum)
}

// TopLogprobs fills top (its length is how many are wanted) with the most likely
// tokens of logits, most likely first, ties to the lower id, and their
// log-probabilities given lse = LogSumExp(logits). Entries beyond the vocabulary
// get ID -1. It does not allocate.
func TopLogprobs(logits []float32, lse float64, top []Logprob) {
	k := len(top)
	if k == 0 {
		return
	}
	n := 0
	for i, l := range logits {
		if l != l {
			l = float32(math.Inf(-1))
		}
		c := candidate{int32(i), l}
		if n == k && !less(c, candidate{top[k-1].ID, top[k-1].Logprob}) {
			continue
		}
		// Insert c in order; top holds raw logits while it is built.
		j := min(n, k-1)
		for j > 0 && less(c, candidate{top[j-1].ID, top[j-1].Logprob}) {
			top[j] = top[j-1]
			j--
		}
		top[j] = Logprob{c.id, c.logit}
		if n < k {
			n++
		}
	}
	for i := range top[:n] {
		top[i].Logprob = float32(float64(top[i].Logprob) - lse)
	}
	for i := n; i < k; i++ {
		top[i] = Logprob{-1, float32(math.Inf(-1))}
	}
}
