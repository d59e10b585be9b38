package respstore

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Decoding never panics on any bytes, and what decodes encodes to the same items.
func FuzzDecodeItems(f *testing.F) {
	f.Add(appendItems(nil, []Item{{ID: "msg_1", JSON: []byte(`{"type":"message"}`)}, {ID: "fc_2", JSON: []byte(`{}`)}}))
	f.Add(appendItems(nil, nil))
	f.Add([]byte{itemsVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		items, err := decodeItems(b)
		if err != nil {
			return
		}
		again, err := decodeItems(appendItems(nil, items))
		if err != nil || !reflect.DeepEqual(again, items) {
			t.Fatalf("%q: re-encoded %q (%v)", items, again, err)
		}
	})
}

// A record decodes to what was encoded.
func TestRecordRoundTrip(t *testing.T) {
	r := Record{Model: "m", Previous: "resp_0", Response: []byte(`{"id":"resp_1"}`),
		Input: []Item{{ID: "msg_1", JSON: []byte(`{"a":1}`)}}, Output: []Item{{ID: "msg_2", JSON: []byte(`{"b":2}`)}}}
	v, err := viewRecord(appendRecord(nil, &r))
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.record("t", "resp_1")
	if err != nil {
		t.Fatal(err)
	}
	r.Tenant, r.ID, r.Created, r.Expires = "t", "resp_1", got.Created, got.Expires
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("got %+v, want %+v", got, r)
	}
}

// appendRecordV1 is appendRecord as first written (each item list encoded on its
// own, then copied): the format every stored record has.
func appendRecordV1(b []byte, r *Record) []byte {
	b = append(b, recordVersion)
	b = binary.AppendVarint(b, r.Created.UnixMilli())
	b = binary.AppendVarint(b, r.Expires.UnixMilli())
	b = appendStr(b, []byte(r.Model))
	b = appendStr(b, []byte(r.Previous))
	b = appendStr(b, r.Response)
	b = appendStr(b, appendItems(nil, r.Input))
	return appendStr(b, appendItems(nil, r.Output))
}

// testRecord is a record whose strings and item lists are n bytes or items long
// about, so that their lengths' uvarints take one to three bytes.
func testRecord(n int) Record {
	var items []Item
	for i := range n % 300 {
		items = append(items, Item{ID: "msg_" + strconv.Itoa(i), JSON: bytes.Repeat([]byte("x"), i*7%200)})
	}
	return Record{Created: time.UnixMilli(1_800_000_000_000 + int64(n)), Expires: time.UnixMilli(1_800_100_000_000),
		Model: strings.Repeat("m", n%140), Previous: strings.Repeat("p", n%129),
		Response: bytes.Repeat([]byte("r"), n*13), Input: items, Output: items[:len(items)/2]}
}

// appendRecord writes the bytes it always wrote (records stored before read the
// same), growing its buffer once.
func TestAppendRecordSameBytesOneAllocation(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 129, 200, 299, 1300, 20000} {
		r := testRecord(n)
		if got, want := appendRecord(nil, &r), appendRecordV1(nil, &r); !bytes.Equal(got, want) {
			t.Fatalf("n=%d: %d bytes differ from the format's %d", n, len(got), len(want))
		}
		if raceEnabled {
			continue
		}
		if a := testing.AllocsPerRun(10, func() { appendRecord(nil, &r) }); a != 1 {
			t.Errorf("n=%d: %v allocations, want 1", n, a)
		}
	}
}
