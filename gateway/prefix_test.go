package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/policies"
)

// TestPrefixKey: the key covers the salt and the first 256 bytes of the prompt: a
// prompt sharing them has the same key whatever follows, another tenant's (or a
// shorter prompt) does not, and a plan sharing the prefix cache shares the key.
func TestPrefixKey(t *testing.T) {
	sys := strings.Repeat("be brief. ", 30) // 300 bytes
	chat := func(msgs ...string) *input {
		in := &input{kind: kindChat}
		for i := 0; i+1 < len(msgs); i += 2 {
			in.msgs = append(in.msgs, engine.Message{Role: msgs[i], Content: msgs[i+1]})
		}
		return in
	}
	acme, other := &policies.Policy{Tenant: "acme"}, &policies.Policy{Tenant: "other"}
	sharedA, sharedB := &policies.Policy{Tenant: "acme", SharePrefix: true}, &policies.Policy{Tenant: "other", SharePrefix: true}
	k := prefixKey(acme, chat("system", sys, "user", "one"))
	if k == 0 {
		t.Fatal("a 300-byte system prompt has no key")
	}
	for _, c := range []struct {
		name string
		pol  *policies.Policy
		in   *input
		same bool
	}{
		{"same head, another question", acme, chat("system", sys, "user", "two"), true},
		{"same head, more turns", acme, chat("system", sys, "user", "one", "assistant", "x", "user", "y"), true},
		{"another tenant", other, chat("system", sys, "user", "one"), false},
		{"another role", acme, chat("user", sys, "user", "one"), false},
		{"head differs at byte 200", acme, chat("system", sys[:200]+"X"+sys[201:], "user", "one"), false},
		{"a completion of the same text", acme, &input{kind: kindCompletion, prompt: "system\x00" + sys}, false},
	} {
		if got := prefixKey(c.pol, c.in); (got == k) != c.same || got == 0 {
			t.Errorf("%s: key %x, first %x, want same %v", c.name, got, k, c.same)
		}
	}
	if prefixKey(acme, chat("system", sys[:200], "user", "one")) != 0 {
		t.Error("a prompt under 256 bytes has a key")
	}
	if a, b := prefixKey(sharedA, chat("system", sys)), prefixKey(sharedB, chat("system", sys)); a != b || a == 0 || a == k {
		t.Errorf("shared prefix cache: keys %x and %x (tenant's %x)", a, b, k)
	}
}

// TestPromptCacheKeyIsThePrefixKey: a request with a prompt_cache_key has the key's
// hash as its prefix key (so peers route it to the process that served the key),
// whatever its prompt, short prompts included; never another tenant's, shared prefix
// cache or not.
func TestPromptCacheKeyIsThePrefixKey(t *testing.T) {
	keyed := func(key, text string) *input {
		return &input{kind: kindChat, p: &commonParams{PromptCacheKey: key}, msgs: []engine.Message{{Role: "user", Content: text}}}
	}
	acme, other := &policies.Policy{Tenant: "acme"}, &policies.Policy{Tenant: "other"}
	shared, sharedOther := &policies.Policy{Tenant: "acme", SharePrefix: true}, &policies.Policy{Tenant: "other", SharePrefix: true}
	k := prefixKey(acme, keyed("conv-1", "hi"))
	if k == 0 || k != cacheKeyHash("acme", "conv-1") {
		t.Fatalf("key %x", k)
	}
	if got := prefixKey(acme, keyed("conv-1", strings.Repeat("another prompt ", 40))); got != k {
		t.Errorf("another prompt, same key: %x, want %x", got, k)
	}
	if prefixKey(acme, keyed("conv-2", "hi")) == k || prefixKey(other, keyed("conv-1", "hi")) == k {
		t.Error("another key or another tenant has the same prefix key")
	}
	if prefixKey(shared, keyed("conv-1", "hi")) == prefixKey(sharedOther, keyed("conv-1", "hi")) {
		t.Error("two tenants sharing the prefix cache share a prompt_cache_key's affinity")
	}
}

// TestWarmKeys: a key is warm for warmTTL after it was served, per model, at most
// warmMax per model (the oldest goes), and a model's keys go when it unloads.
func TestWarmKeys(t *testing.T) {
	var w warmKeys
	t0 := time.Unix(1000, 0)
	w.add("m", 7, t0)
	w.add("m", 0, t0) // no key: nothing
	if !w.has("m", 7, t0.Add(warmTTL-time.Second)) || w.has("m", 7, t0.Add(warmTTL)) || w.has("x", 7, t0) || w.has("m", 0, t0) {
		t.Fatal("has: wrong answers")
	}
	if l := w.list("m", t0); len(l) != 1 || l[0] != 7 {
		t.Fatalf("list = %v", l)
	}
	if l := w.list("m", t0.Add(warmTTL)); len(l) != 0 {
		t.Fatalf("list after the TTL = %v", l)
	}
	for i := range warmMax + 10 {
		w.add("m", uint64(i+1), t0.Add(time.Duration(i)*time.Millisecond))
	}
	l := w.list("m", t0)
	if len(l) != warmMax || l[0] != 11 || w.has("m", 10, t0) || !w.has("m", warmMax+10, t0) {
		t.Fatalf("after %d keys: %d kept, first %d", warmMax+10, len(l), l[0])
	}
	w.drop("m")
	if w.has("m", warmMax+10, t0) {
		t.Fatal("a dropped model's key is still warm")
	}
}
