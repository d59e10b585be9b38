package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
)

// Must-show 1 of the engine core: llama2.c's greedy run of stories260K. The expected
// text holds 200 generated tokens (llama2.c samples at each of its 200 steps, BOS being
// the input of the first); the ids file holds the first 199 of them. Both are checked
// with the generated-token count that each one holds.
func TestRunStories260KGreedy(t *testing.T) {
	model := testenv.SharedFile(t, "models/stories260K.gguf")
	wantText, err := os.ReadFile(testenv.SharedFile(t, "models/stories260K.expected-greedy-200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wantIDs, err := os.ReadFile(testenv.SharedFile(t, "models/stories260K.expected-greedy-200.ids.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cmdRun([]string{"--model", model, "--prompt", "", "--max-tokens", "200", "--temperature", "0"}, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(wantText)+"\n" {
		t.Errorf("text differs:\n got %q\nwant %q", got, string(wantText)+"\n")
	}
	out.Reset()
	if err := cmdRun([]string{"--model", model, "--prompt", "", "--max-tokens", "199", "--temperature", "0", "--ids"}, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), strings.TrimSpace(string(wantIDs)); got != want {
		t.Errorf("ids differ:\n got %s\nwant %s", got, want)
	}
}

func TestRunErrors(t *testing.T) {
	model := testenv.SharedFile(t, "models/stories260K.gguf")
	notGGUF := t.TempDir() + "/x.gguf"
	os.WriteFile(notGGUF, []byte("definitely not a model file"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--model", "/nonexistent/m.gguf"}, "no such file"},
		{[]string{"--model", notGGUF}, "not a GGUF file"},
		{[]string{"--model", model, "--prompt", strings.Repeat("Once upon a time ", 200), "--temperature", "0"}, "max_model_len 512"},
	}
	for _, c := range cases {
		err := cmdRun(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("run %v: error %v, want one line containing %q", c.args[:2], err, c.want)
		}
	}
}
