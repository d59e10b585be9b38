package grammar

import (
	"errors"
	"strconv"
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
