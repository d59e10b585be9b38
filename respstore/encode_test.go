package respstore

import (
	"reflect"
	"testing"
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
