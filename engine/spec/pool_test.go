package spec

import (
	"fmt"
	"slices"
	"testing"
)

// TestPoolTenants: a tenant drafts from its own earlier outputs (the most recent
// occurrence, up to the end of that output), never from another tenant's, and a
// request without a tenant neither adds nor drafts.
func TestPoolTenants(t *testing.T) {
	p := NewPool(0, 0)
	p.Add("a", []int32{1, 2, 3, 4, 5})
	p.Add("a", []int32{7, 2, 3, 9})
	p.Add("b", []int32{1, 2, 3, 6, 6, 6})
	p.Add("", []int32{1, 2, 3, 8})
	for _, c := range []struct {
		tenant string
		seq    []int32
		k      int
		want   []int32
	}{
		{"a", []int32{0, 2, 3}, 4, []int32{9}},       // the most recent "2 3", up to its output's end
		{"a", []int32{1, 2, 3}, 4, []int32{4, 5}},    // the 3-gram "1 2 3" beats the later bigram
		{"b", []int32{0, 2, 3}, 2, []int32{6, 6}},    // b's own
		{"b", []int32{7, 2, 3}, 4, []int32{6, 6, 6}}, // never a's "7 2 3 9"
		{"c", []int32{1, 2, 3}, 4, nil},              // a tenant with no outputs
		{"", []int32{1, 2, 3}, 4, nil},               // no tenant, no pool
		{"a", []int32{5, 7}, 4, nil},                 // no n-gram spans two outputs
		{"b", []int32{4, 5}, 4, nil},                 // a's text, asked by b
		{"a", []int32{2, 3}, 0, nil},                 // k 0
	} {
		if got := p.Lookup(nil, c.tenant, c.seq, c.k); !slices.Equal(got, c.want) {
			t.Errorf("Lookup(%q, %v, %d) = %v, want %v", c.tenant, c.seq, c.k, got, c.want)
		}
	}
}

// TestPoolBounded: a tenant keeps its last tokens only, the pool its most recently
// used tenants only, so its size never passes tenants × tokens.
func TestPoolBounded(t *testing.T) {
	p := NewPool(100, 3)
	for i := range 50 {
		out := make([]int32, 37)
		for j := range out {
			out[j] = int32(i*1000 + j)
		}
		p.Add(fmt.Sprint("t", i%5), out)
		if n, tenants := p.Size(); n > 300 || tenants > 3 {
			t.Fatalf("after %d outputs: %d tokens, %d tenants", i+1, n, tenants)
		}
	}
	// t4 added last: its latest output is there, its oldest ones are gone.
	if got := p.Lookup(nil, "t4", []int32{49000, 49001}, 2); !slices.Equal(got, []int32{49002, 49003}) {
		t.Fatalf("latest output: %v", got)
	}
	if got := p.Lookup(nil, "t4", []int32{4000, 4001}, 2); got != nil {
		t.Fatalf("an old output is still drafted: %v", got)
	}
	// t0 and t1 were used least recently: dropped.
	if got := p.Lookup(nil, "t0", []int32{45000, 45001}, 2); got != nil {
		t.Fatalf("a dropped tenant drafts: %v", got)
	}
	// An output longer than the bound keeps its end.
	p.Add("t4", make([]int32, 500))
	if n, _ := p.Size(); n > 300 {
		t.Fatalf("%d tokens after a long output", n)
	}
}
