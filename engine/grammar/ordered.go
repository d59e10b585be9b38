package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// object is a decoded JSON object that keeps its keys' order: an object schema's
// properties are written in the order the schema gives them.
type object struct {
	keys []string
	vals map[string]any
}

// MarshalJSON writes the object with its keys in order.
func (o *object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kt, err := canonical(k)
		if err != nil {
			return nil, err
		}
		vt, err := canonical(o.vals[k])
		if err != nil {
			return nil, err
		}
		buf.WriteString(kt)
		buf.WriteByte(':')
		buf.WriteString(vt)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// decodeOrdered decodes one JSON value: objects as *object, arrays as []any,
// numbers as json.Number. Nothing but white space may follow it.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the schema")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > 256 {
		return nil, fmt.Errorf("nested deeper than 256")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch d := t.(type) {
	case json.Delim:
		switch d {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected %v", d)
	}
	return t, nil
}
