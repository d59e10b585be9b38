package configs

import (
	"errors"
	"testing"
)

// TestModelDevice: device is host, gpu:N or empty (cmd/lmlite's
// TestEngineModelConfig: it reaches the engine's config).
func TestModelDevice(t *testing.T) {
	for _, tc := range []struct {
		dev string
		ok  bool
	}{{"", true}, {"host", true}, {"gpu:0", true}, {"gpu:12", true}, {"gpu:", false}, {"gpu:x", false}, {"cuda:0", false}, {"gpu:-1", false}} {
		c, err := Parse([]byte("models: [{id: m, path: a.gguf, device: \"" + tc.dev + "\"}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Validate()
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("device %q: %v", tc.dev, err)
		}
	}
}
