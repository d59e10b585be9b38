package grammar

import (
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
)

// TestSchemaCacheCompilesOnce: the same schema text gives the same Grammar, another
// text another one, an invalid schema its error (not cached), and the cache is
// emptied, not grown, past its bound.
func TestSchemaCacheCompilesOnce(t *testing.T) {
	var c SchemaCache
	a := []byte(`{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],"additionalProperties":false}`)
	g1, err := c.Compile(a)
	if err != nil {
		t.Fatal(err)
	}
	if g2, _ := c.Compile(append([]byte(nil), a...)); g2 != g1 {
		t.Error("the same text compiled twice")
	}
	if g3, _ := c.Compile([]byte(`{"type":"string"}`)); g3 == g1 {
		t.Error("another schema got the first one's grammar")
	}
	if _, err := c.Compile([]byte(`{"type":`)); !errors.Is(err, ErrSchema) {
		t.Errorf("invalid schema: %v, want ErrSchema", err)
	}
	for i := range maxCached + 10 {
		if _, err := c.Compile([]byte(`{"const":` + strconv.Itoa(i) + `}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.m); n > maxCached {
		t.Errorf("cache holds %d schemas, bound %d", n, maxCached)
	}
}

// walkOutput feeds out to a fresh matcher of g token by token (single bytes),
// computing each state's mask on the way, and returns the steps the walks took.
func walkOutput(t *testing.T, v *Vocab, g *Grammar, out string) int64 {
	t.Helper()
	m := v.NewMatcher(g)
	var steps int64
	for i := 0; i < len(out); i++ {
		_, n, s, err := m.MaskWithin(0, nil)
		if err != nil || n == 0 {
			t.Fatalf("byte %d: %d tokens, %v", i, n, err)
		}
		steps += s
		if !m.Accept(v.byteToken(out[i])) {
			t.Fatalf("byte %d (%q) refused", i, out[i])
		}
	}
	return steps
}

// TestMaskCacheHitsRepeatedStates: a second sequence through the same states of the
// same grammar finds every mask in the cache (no walk, counted as hits), and a free
// string's body is one state however long it grows.
func TestMaskCacheHitsRepeatedStates(t *testing.T) {
	v, _ := testVocab()
	g := mustCompile(t, `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a","b"]}`)
	out := `{"a":"xxxxxxxx","b":12}`
	if steps := walkOutput(t, v, g, out); steps == 0 {
		t.Fatal("the first sequence walked nothing")
	}
	first := v.MaskCacheStats()
	if first.Masks >= len(out) {
		t.Errorf("%d masks cached for %d bytes: the string's body should repeat one state", first.Masks, len(out))
	}
	if steps := walkOutput(t, v, g, out); steps != 0 {
		t.Errorf("the second sequence walked %d steps, want every mask from the cache", steps)
	}
	second := v.MaskCacheStats()
	if hits := second.Hits - first.Hits; hits != uint64(len(out)) {
		t.Errorf("second sequence: %d hits, want %d", hits, len(out))
	}
	if second.Misses != first.Misses || second.Masks != first.Masks {
		t.Errorf("second sequence: misses %d→%d, masks %d→%d", first.Misses, second.Misses, first.Masks, second.Masks)
	}
}

// TestMaskCacheBoundPerGrammar: one grammar that visits many fresh states (a tenant's
// fresh schemas) fills its own share of the cache and empties its own masks, never
// another grammar's; the cache stays within its bound.
func TestMaskCacheBoundPerGrammar(t *testing.T) {
	base, _ := testVocab()
	v := NewVocab(base.pieces, []int32{int32(len(base.pieces) - 1)}, 64*len(base.pieces)/8) // room for ~64 masks, 16 per grammar
	steady := mustCompile(t, `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`)
	walkOutput(t, v, steady, `{"a":1}`)
	kept := v.MaskCacheStats().Masks
	// The flood: an object of 40 optional properties, each position a new state.
	flood := `{"type":"object","properties":{`
	out := `{`
	for i := range 40 {
		if i > 0 {
			flood += ","
			out += ","
		}
		flood += `"k` + strconv.Itoa(i) + `":{"type":"integer"}`
		out += `"k` + strconv.Itoa(i) + `":1`
	}
	walkOutput(t, v, mustCompile(t, flood+`},"additionalProperties":false}`), out+"}")
	if st := v.MaskCacheStats(); st.Bytes > v.cache.limit {
		t.Errorf("cache holds %d bytes, bound %d", st.Bytes, v.cache.limit)
	}
	before := v.MaskCacheStats()
	if steps := walkOutput(t, v, steady, `{"a":1}`); steps != 0 {
		t.Errorf("the steady grammar's masks were evicted by the flood: %d steps walked again (%d masks were cached)", steps, kept)
	}
	if after := v.MaskCacheStats(); after.Misses != before.Misses {
		t.Errorf("steady grammar: %d misses after the flood", after.Misses-before.Misses)
	}
}

// TestMaskWithinBudget: a walk over its budget stops with ErrBudget and caches
// nothing; the matcher is unchanged (the same mask comes without a budget), and the
// steps a budget allows are the steps the walk takes, on every run; a stopped walk
// ends with ErrStopped.
func TestMaskWithinBudget(t *testing.T) {
	v, _ := testVocab()
	g := mustCompile(t, `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`)
	m := v.NewMatcher(g)
	for _, c := range []byte(`{"a":"`) {
		m.Feed(c)
	}
	_, _, spent, err := m.MaskWithin(10, nil)
	if !errors.Is(err, ErrBudget) || spent <= 10 {
		t.Fatalf("budget 10: spent %d, %v; want ErrBudget", spent, err)
	}
	if v.MaskCacheStats().Masks != 0 {
		t.Error("an unfinished mask was cached")
	}
	var stop atomic.Bool
	stop.Store(true)
	if _, _, _, err := m.MaskWithin(0, &stop); !errors.Is(err, ErrStopped) {
		t.Errorf("stopped: %v, want ErrStopped", err)
	}
	bits, n, steps, err := m.MaskWithin(0, nil)
	if err != nil || n == 0 {
		t.Fatalf("no budget: %d tokens, %v", n, err)
	}
	fresh := v.NewMatcher(g)
	for _, c := range []byte(`{"a":"`) {
		fresh.Feed(c)
	}
	v2, _ := testVocab()
	fresh.v = v2 // an empty cache: the same walk again
	bits2, n2, steps2, err := fresh.MaskWithin(steps, nil)
	if err != nil || n2 != n || steps2 != steps || !slices.Equal(bits, bits2) {
		t.Errorf("budget = its own steps (%d): %d tokens in %d steps, %v; want %d", steps, n2, steps2, err, n)
	}
}
