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
// A Grammar is a graph of nodes, one per schema (object, array, string, number,
// literal set, anyOf, and automata for strings and numbers with patterns, formats
// or bounds). A Matcher's state is a small set of stacks of
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
// cannot enforce are refused (ErrUnsupported) in a strict schema; Loosen drops them
// from one that is not strict, and the rest is enforced.
//
// Bounds, patterns and formats are automata (automaton.go): a string's or number's
// text as a DFA over bytes, built from an NFA (Thompson's construction) by the
// subset construction, trimmed so that every state can still finish, at most 32,768
// states each and 131,072 per grammar (ErrUnsupported past them). A frame's state is
// the DFA's, so masks are cached as for any node.
//
//   - integer minimum, maximum, exclusiveMinimum, exclusiveMaximum: exact. The digits
//     of [lo, hi] (the classic range construction, per length and digit; negatives
//     as '-' and the range of their magnitudes; an open side up to 15 digits; no
//     leading zeros, no "-0").
//   - integer multipleOf m (m <= MaxMultipleOf, 1000): exact, the range automaton
//     intersected with m remainder states over the decimal digits. A fractional m =
//     p/q in lowest terms: multiples of p (every integer multiple of p/q is one).
//   - number with bounds: sound, not complete. No exponent; an integer within the
//     bounds; or I.F (at most 15 fraction digits, the last not 0) where the whole
//     interval (I, I+1) lies within them, and -I.F where (-I-1, -I) does. So
//     {"minimum": 0, "maximum": 1} allows 0, 1 and 0.x, and exclusive bounds are
//     never met by a fraction equal to them. A number's multipleOf p/q: integer
//     multiples of p only (in the bounds).
//   - pattern: parsed by regexp/syntax (Perl flags) and compiled whole, as if
//     anchored (^ and $ at the ends allowed; a match of the whole string is a match
//     of the search JSON Schema asks for). Literals, classes ([a-z], [^...], \d \w
//     \s and negations, Unicode classes), . (no line terminator, as ECMA-262), groups,
//     |, * + ? {m,n} (counts up to 1000). Lookaheads (?=R) and (?!R) at the start (as
//     zod's email pattern has) are automata too (intersected, or complemented and
//     intersected). Refused, naming the schema path: backreferences, other
//     lookarounds, ^ or $ inside, \b. \d, \w and \s are ASCII (Go's); \S so
//     allows the Unicode spaces ECMA-262 counts as \s (a known gap).
//     Each character is written as JSON does: its UTF-8 bytes, or \" \\ \n \t ...
//     and \u00XX for the other control characters.
//   - format: date (days up to 28), time and date-time (no fraction of seconds), uuid
//     (lower-case), duration (RFC 3339 appendix A, at most 4 digits per component),
//     email (a dot-atom local part of at most 3 parts of 16 letters, digits, _ + -;
//     a domain of 1 to 3 labels of up to 32 bytes and a top-level label of 2 to 12
//     letters), hostname (1 to 4 RFC 1123 labels of up to 50 bytes), ipv4 (dotted
//     decimal, no leading zeros), ipv6 (RFC 4291 text, lower-case, with ::, no
//     embedded IPv4 or zone). Each accepts only valid strings, not every valid one.
//     Other formats are annotations.
//   - minLength, maxLength (at most MaxLength, 4096, in characters): counted by the
//     string node; with a pattern or format, a length automaton intersected with it.
//   - minItems, maxItems (at most MaxItems, 4096): counted by the array node.
//   - A value keyword where it would not apply (minimum, pattern, ... with no type,
//     or beside anyOf or $ref) is refused; an enum or const beside a type or value
//     keywords keeps the values that meet them.
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
