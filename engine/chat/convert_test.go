package chat_test

import (
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/chat"
)

// TestMessageMirrorsEngine fails to compile when chat.Message and engine.Message
// drift apart: the engine converts one into the other.
func TestMessageMirrorsEngine(t *testing.T) {
	m := chat.Message(engine.Message{Role: "user", Content: "hi"})
	tpl, err := chat.New("", chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tpl.Render([]chat.Message{m}, false)
	if err != nil || out != "<|im_start|>user\nhi<|im_end|>\n" {
		t.Errorf("got %q, %v", out, err)
	}
}
