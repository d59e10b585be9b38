// Package spec holds the pure parts of the engine's speculative decoding: where
// drafts come from and how long they are. The engine's runner (engine/runner.go,
// engine/speculate.go) verifies them.
//
// A decoding sequence may draft k tokens it guesses will follow; the batch step then
// computes k+1 positions of it (its last token and the drafts) beside the other
// sequences' work, through the same kernels, and the runner samples each position's
// row in order, exactly as plain decoding would sample that position, accepting the
// sampled token and going on while it equals the draft. The first mismatch ends the
// step with the sampled token (the target's own), so every step gives at least the
// one token plain decoding would, and the output (ids, text, logprobs, finish
// reason) is bit-identical with drafts on or off: the kernels give a position the
// same bits whatever the batch, and each sampled position consumes the sampler's
// random stream exactly as plain decoding does (one position sampled per accepted
// token, in order), so no draw needs to depend on drafts.
//
// Draft sources: Predicted, the request's prediction (OpenAI's Predicted Outputs),
// followed while the output follows it and re-aligned at the output's last n-gram
// after it departs; and Lookup, prompt lookup over the sequence's own prompt and
// output so far. Neither shares state between sequences, let alone tenants. Pool,
// the third (Config.Pool), is a replica's per-tenant n-gram pool: the outputs of a
// tenant's recent requests, bounded (PoolTokens per tenant, MaxTenants tenants),
// from which only that tenant's requests draft.
//
// Length: Adapt, per sequence, grows the draft on full hits, cuts it to what was
// accepted plus one on partial hits, and pauses drafting with a doubling back-off
// after repeated full misses, so a sequence whose output does not repeat soon stops
// paying for verification. A drafted position's cost is Config.DraftCost, or with
// Config.Measure the slope of Steps, the replica's decode step times fitted as a
// line in their tokens, over a step's time; in a step shared with other sequences
// a draft must pay for the time it adds to all of them (BestFor).
package spec
