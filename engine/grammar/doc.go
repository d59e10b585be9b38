// Package grammar constrains a model's output to JSON: a JSON Schema (OpenAI's
// structured outputs subset) or any JSON object, compiled once into a byte-level
// pushdown automaton, and token masks that tell the sampler which tokens may come
// next.
//
// # Use
//
//	g, err := grammar.CompileSchema(schema) // once per schema (cache it); or grammar.JSONObject()
//	v := grammar.NewVocab(pieces, eogTokens, 0) // once per model: each token's bytes
//	m := v.NewMatcher(g)                        // per sequence
//	for {
//		bits, n := m.Mask()       // the tokens allowed next (n of them; EOG where the output may end)
//		id := sample(logits, bits)
//		m.Accept(id)
//		if m.Done() { break }     // the JSON is complete: nothing may follow
//	}
//
// # How
//
// A Grammar is a graph of nodes, one per schema (object, array, string, format,
// number, literal set, anyOf). A Matcher's state is a small set of stacks of
// frames (one stack per live anyOf alternative), each frame a node and its phase
// (after '{', inside a key, after ':' ...). Feeding a byte steps the top frame:
// consume it, finish the frame, push a child value, or refuse. Object keys, enums
// and consts are tries over their JSON text, so the state stays a few fixed-size
// frames; counters that no bound can tell apart (a free string's length, an
// unbounded array's items) are not counted, so states repeat.
//
// A mask is found by walking a trie of the vocabulary's token bytes from the
// matcher's state, pruning a subtree at the first refused byte. A mask is a pure
// function of the grammar and the state: Vocab caches it under the grammar and the
// state's encoding, shared by all sequences of the model, bounded per grammar (a
// grammar that fills its quarter of the cache empties its own masks, never
// another's) and in all (the grammar used least recently goes). So the first visit
// of a state costs a walk; later ones a map lookup, without allocation. The same
// state gives the same mask whatever else runs, which keeps constrained sampling
// deterministic and batch-invariant.
//
// A fresh state's walk can be long (tens of milliseconds for an object of many
// optional properties over a 32,000-token vocabulary). MaskWithin bounds it: a
// budget of steps (trie nodes visited, times the live alternatives: the same count
// on every machine) past which it stops with ErrBudget, and a stop flag (ErrStopped)
// for a sequence that ended meanwhile. CachedMask is the lookup alone, for a caller
// that computes masks off its critical path (the engine's runner, in a goroutine per
// sequence, while the batch goes on).
//
// # What is enforced
//
// See CompileSchema. Properties come in the schema's order (as OpenAI's strict
// mode writes them); white space is at most one space after ':' and ','; numbers
// have at most 15 integer and fraction digits and a two-digit exponent; strings are
// valid UTF-8 without control characters or \u surrogates. Keywords the automaton
// cannot enforce are refused (ErrUnsupported), never ignored.
//
// # Bounded on any schema
//
// A schema is user input, so nothing here recurses without a bound. The decoder
// stops at 256 levels of JSON, the compiler at MaxNesting subschemas, MaxDepth
// objects, arrays and $refs, and MaxNodes nodes. A $ref, anyOf or allOf cycle that
// writes no byte ({"$ref": "#"}, a → b → a, anyOf [{"$ref": a}, ...]) is refused
// (ErrCycle), as is a schema whose every value must contain another (a required
// property that recurses): no finite value matches either. Recursion through an
// array's items or an optional property is fine. The compiler flattens anyOfs
// (nested ones and $refs become one list, at most MaxAlts, without repeats), so a
// matcher forks once where a value starts and never follows an anyOf into another;
// it also stops past maxPushDepth values entered for one byte, so that even a
// grammar built another way cannot overflow its stack. A grammar's wire form is
// checked for the same (flat anyOfs, shared nodes of the right kinds) when read.
//
// # Why not a library
//
// No maintained Go library compiles JSON Schema to token masks: the ones found
// (zerfoo's generate/grammar, beta, inside a large module, a new Grammar value per
// byte) or outside Go (llguidance, XGrammar, llama.cpp's GBNF) do not fit an
// allocation-free, deterministic step in this engine.
package grammar
