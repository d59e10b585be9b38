package respstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// The encodings both stores share. A list of items is
//
//	version (1 byte) | uvarint count | count × (uvarint len | id | uvarint len | JSON)
//
// and a whole record (bbolt's value; Redis keeps the fields in a hash instead) is
//
//	version (1 byte) | varint created | varint expires (Unix ms) | str model |
//	str previous | str response | str input items | str output items
//
// where str is uvarint len | bytes and the items are lists as above.

const (
	itemsVersion  = 1
	recordVersion = 1
)

var errCorrupt = errors.New("respstore: malformed stored record")

func appendStr(b []byte, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendString is appendStr of s (no conversion, which may allocate).
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendItems appends the encoding of items.
func appendItems(b []byte, items []Item) []byte {
	b = append(b, itemsVersion)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for i := range items {
		b = binary.AppendUvarint(b, uint64(len(items[i].ID)))
		b = append(b, items[i].ID...)
		b = appendStr(b, items[i].JSON)
	}
	return b
}

// reader reads what appendItems and appendRecord wrote; its first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

// str returns the next string's bytes (a subslice of r.b, not a copy).
func (r *reader) str() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errCorrupt
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errCorrupt
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// decodeItems decodes a list of items; their JSON are subslices of b.
func decodeItems(b []byte) ([]Item, error) {
	r := reader{b: b}
	if v := r.byte(); r.err == nil && v != itemsVersion {
		return nil, fmt.Errorf("%w: items version %d", errCorrupt, v)
	}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) { // every item takes at least 2 bytes
		r.err = errCorrupt
	}
	var items []Item
	if n > 0 && r.err == nil {
		items = make([]Item, 0, n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		id := r.str()
		items = append(items, Item{ID: string(id), JSON: r.str()})
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	if r.err != nil {
		return nil, r.err
	}
	return items, nil
}

// uvarintLen is the length of n's uvarint.
func uvarintLen(n int) int {
	return (bits.Len64(uint64(n)|1) + 6) / 7
}

// strLen is the length of appendStr of n bytes.
func strLen(n int) int { return uvarintLen(n) + n }

// itemsLen is the length of appendItems(items).
func itemsLen(items []Item) int {
	n := 1 + uvarintLen(len(items))
	for i := range items {
		n += strLen(len(items[i].ID)) + strLen(len(items[i].JSON))
	}
	return n
}

// appendRecord appends r's encoding (without its tenant and id, which are its key),
// growing b once: the encoding's length is known before it is written.
func appendRecord(b []byte, r *Record) []byte {
	in, out := itemsLen(r.Input), itemsLen(r.Output)
	b = slices.Grow(b, 1+2*binary.MaxVarintLen64+strLen(len(r.Model))+strLen(len(r.Previous))+
		strLen(len(r.Response))+strLen(in)+strLen(out))
	b = append(b, recordVersion)
	b = binary.AppendVarint(b, r.Created.UnixMilli())
	b = binary.AppendVarint(b, r.Expires.UnixMilli())
	b = appendString(b, r.Model)
	b = appendString(b, r.Previous)
	b = appendStr(b, r.Response)
	b = binary.AppendUvarint(b, uint64(in))
	b = appendItems(b, r.Input)
	b = binary.AppendUvarint(b, uint64(out))
	return appendItems(b, r.Output)
}

// recordView is a decoded record's fields, subslices of the encoding.
type recordView struct {
	created, expires        int64
	model, previous         []byte
	response, input, output []byte // input and output: item lists still encoded
}

func viewRecord(b []byte) (recordView, error) {
	r := reader{b: b}
	var v recordView
	if ver := r.byte(); r.err == nil && ver != recordVersion {
		return v, fmt.Errorf("%w: record version %d", errCorrupt, ver)
	}
	v.created, v.expires = r.varint(), r.varint()
	v.model, v.previous, v.response, v.input, v.output = r.str(), r.str(), r.str(), r.str(), r.str()
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return v, r.err
}

// record decodes the whole record of tenant and id (v's bytes are copied: bbolt's
// are only valid in their transaction).
func (v *recordView) record(tenant, id string) (Record, error) {
	rec := Record{Tenant: tenant, ID: id, Created: time.UnixMilli(v.created), Expires: time.UnixMilli(v.expires),
		Model: string(v.model), Previous: string(v.previous), Response: append([]byte(nil), v.response...)}
	var err error
	if rec.Input, err = decodeItems(append([]byte(nil), v.input...)); err != nil {
		return Record{}, err
	}
	if rec.Output, err = decodeItems(append([]byte(nil), v.output...)); err != nil {
		return Record{}, err
	}
	return rec, nil
}
