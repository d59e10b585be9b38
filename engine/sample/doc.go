// Package sample picks the next token from a model's logits and finds stop strings
// in the output.
//
// A Sampler belongs to one sequence. Its chain is llama.cpp's default one:
//
//	penalties → top-k → top-p → min-p → temperature → draw
//
// The penalties look at the last RepeatLastN tokens of the sequence (prompt and
// output): the repetition penalty of llama.cpp (a positive logit is divided by it, a
// negative one multiplied) and OpenAI's presence and frequency penalties (subtract
// presence once, frequency once per occurrence). With Temperature <= 0 the sampler
// is greedy: the most likely token after the penalties, the lowest id on ties.
// Otherwise the filters cut the candidates and the draw picks one with probability
// softmax(logit/Temperature) using the sampler's own PCG generator seeded from
// Params.Seed, so the same seed and the same logits give the same tokens, whatever
// other sequences do. Sample reuses its buffers and does not allocate after the
// first call; top-k uses a selection instead of a full sort, and top-p sorts the
// best 256 tokens, then four times more, until they hold enough of the mass.
//
// A StopMatcher watches the growing output text:
//
//	m := sample.NewStopMatcher(req.Stop)
//	for each token {
//		text += piece
//		safe, stopped := m.Check(text)
//		send(text[shown:safe]); shown = safe
//		if stopped { finish "stop" }
//	}
//	// at the end of generation for another reason, send(text[shown:]).
//
// It never lets out the start of a stop string that later tokens may complete, and
// the output ends right before the first stop string.
package sample
