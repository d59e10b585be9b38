package configs

import (
	"errors"
	"strings"
	"testing"
)

// TestKVCacheTypes: kv_cache_type_k / kv_cache_type_v take llama.cpp's names
// (cmd/lmlite's TestEngineModelConfig: they reach the engine's configuration);
// anything else is a config error naming the
// field and the allowed names, and so are cache types on an upstream model.
func TestKVCacheTypes(t *testing.T) {
	c, err := Parse([]byte("models: [{id: m, path: a, kv_cache_type_k: q8_0, kv_cache_type_v: q4_0}, {id: n, path: b}]\nplans: {p: {}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if m := c.Models[0]; m.KVCacheTypeK != "q8_0" || m.KVCacheTypeV != "q4_0" {
		t.Fatalf("K %q V %q", m.KVCacheTypeK, m.KVCacheTypeV)
	}
	if m := c.Models[1]; m.KVCacheTypeK != "" || m.KVCacheTypeV != "" {
		t.Fatalf("default K %q V %q, want \"\" (f16)", m.KVCacheTypeK, m.KVCacheTypeV)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"models: [{id: m, path: a, kv_cache_type_k: q8}]\nplans: {p: {}}\n", "models[0].kv_cache_type_k"},
		{"models: [{id: m, path: a, kv_cache_type_v: F16}]\nplans: {p: {}}\n", "models[0].kv_cache_type_v"},
		{"models: [{id: m, path: a, kv_cache_type_v: q4_1}]\nplans: {p: {}}\n", "q8_0"},
		{"models: [{id: m, upstream: {base_url: 'http://x'}, kv_cache_type_k: q8_0}]\nplans: {p: {}}\n", "embedded"},
	} {
		cfg, err := Parse([]byte(bad.yaml))
		if err == nil {
			err = cfg.Validate()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: err = %v, want ErrInvalid naming %q", bad.yaml, err, bad.want)
		}
	}
}
