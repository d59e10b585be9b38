package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Loosen returns schema without the keywords the grammar cannot enforce: the
// unsupported list (oneOf, not, if, minProperties, ...), a pattern outside the
// supported subset, a multipleOf past MaxMultipleOf, lengths past MaxLength and counts
// past MaxItems, allOf of more than one schema, value keywords (minimum, pattern, ...)
// where the compiler would not apply them (no type, beside $ref or anyOf). It is for a schema that is not strict (OpenAI's strict:
// false), where such keywords are ignored rather than refused: the output keeps to
// every keyword that is left. It walks the schema's subschemas only (properties,
// items, additionalProperties, anyOf, allOf, $defs, definitions), so a property named
// like a keyword stays.
func Loosen(schema []byte) ([]byte, error) {
	root, err := decodeOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	loosen(root, 0)
	return json.Marshal(root)
}

func loosen(s any, depth int) {
	o, ok := s.(*object)
	if !ok || depth > MaxNesting {
		return
	}
	drop := func(k string) {
		delete(o.vals, k)
		o.keys = slices.DeleteFunc(o.keys, func(x string) bool { return x == k })
	}
	for _, k := range unsupported {
		drop(k)
	}
	if p, ok := o.vals["pattern"].(string); ok {
		if err := checkPattern(p); err != nil {
			drop("pattern")
		}
	}
	if m, ok := o.vals["multipleOf"].(json.Number); ok {
		if f, err := m.Float64(); err != nil || f <= 0 || f > MaxMultipleOf {
			drop("multipleOf")
		}
	}
	for _, k := range []string{"minLength", "maxLength", "minItems", "maxItems"} {
		if n, ok := o.vals[k].(json.Number); ok {
			if i, err := n.Int64(); err != nil || i > MaxLength || i > MaxItems {
				drop(k)
			}
		}
	}
	// Value keywords apply where the compiler reads them: beside a type (or an enum).
	_, typed := o.vals["type"]
	_, enum := o.vals["enum"]
	_, cnst := o.vals["const"]
	typed = typed || enum || cnst
	for _, k := range []string{"$ref", "allOf", "anyOf"} {
		if _, ok := o.vals[k]; ok {
			typed = false
		}
	}
	if _, ok := o.vals["properties"]; !typed && !ok {
		for _, k := range valueKeywords {
			drop(k)
		}
	}
	if l, ok := o.vals["allOf"].([]any); ok && len(l) > 1 {
		drop("allOf")
	}
	for _, k := range []string{"items", "additionalProperties"} {
		loosen(o.vals[k], depth+1)
	}
	for _, k := range []string{"anyOf", "allOf"} {
		if l, ok := o.vals[k].([]any); ok {
			for _, x := range l {
				loosen(x, depth+1)
			}
		}
	}
	for _, k := range []string{"properties", "$defs", "definitions"} {
		if m, ok := o.vals[k].(*object); ok {
			for _, x := range m.vals {
				loosen(x, depth+1)
			}
		}
	}
}
