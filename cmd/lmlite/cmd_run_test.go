package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/tokenizer"
	"github.com/lmlite/lmlite/internal/testenv"
)

// Must-show 1 of the engine core: llama2.c's greedy run of stories260K. The expected
// text holds 200 generated tokens (llama2.c samples at each of its 200 steps, BOS being
// the input of the first); the ids file holds the first 199 of them. One generation of
// 200 tokens, printed as ids (`run --ids`), is checked against both: its first 199 ids
// against the ids file, the text of all 200 (the model's tokenizer) against the text
// file. A shorter run printing text checks that `run` prints the text of those ids.
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
	if err := cmdRun([]string{"--model", model, "--prompt", "", "--max-tokens", "200", "--temperature", "0", "--ids"}, &out); err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(out.String())
	if len(fields) != 200 {
		t.Fatalf("run --ids --max-tokens 200 printed %d ids, want 200:\n%s", len(fields), out.String())
	}
	if got, want := strings.Join(fields[:199], " "), strings.TrimSpace(string(wantIDs)); got != want {
		t.Errorf("ids differ:\n got %s\nwant %s", got, want)
	}
	ids := make([]int32, len(fields))
	for i, f := range fields {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("run --ids printed %q", f)
		}
		ids[i] = int32(id)
	}
	tok := stories260KTokenizer(t, model)
	if got := tok.Decode(ids); got != string(wantText) {
		t.Errorf("text of the ids differs:\n got %q\nwant %q", got, string(wantText))
	}

	// The text `run` prints is the text of the ids it generates.
	const n = 24
	out.Reset()
	if err := cmdRun([]string{"--model", model, "--prompt", "", "--max-tokens", strconv.Itoa(n), "--temperature", "0"}, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), tok.Decode(ids[:n])+"\n"; got != want {
		t.Errorf("run --max-tokens %d printed %q, want the text of the first %d ids %q", n, got, n, want)
	}
}

// stories260KTokenizer is the tokenizer of the model at path, read from its GGUF file
// as the engine reads it.
func stories260KTokenizer(t *testing.T, path string) *tokenizer.Tokenizer {
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestRunErrors(t *testing.T) {
	model := testenv.SharedFile(t, "models/stories260K.gguf")
	notGGUF := t.TempDir() + "/x.gguf"
	os.WriteFile(notGGUF, []byte("definitely not a model file"), 0o644)
	cases := []struct {
		args []string
		kind error
		want string
	}{
		{[]string{"--model", "/nonexistent/m.gguf"}, fs.ErrNotExist, "no such file"},
		{[]string{"--model", notGGUF}, gguf.ErrFormat, "not a GGUF file"},
		{[]string{"--model", model, "--prompt", strings.Repeat("Once upon a time ", 200), "--temperature", "0"}, engine.ErrTooLong, "max_model_len 512"},
	}
	for _, c := range cases {
		err := cmdRun(c.args, &bytes.Buffer{})
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("run %v: error %v, want %v on one line containing %q", c.args[:2], err, c.kind, c.want)
		}
	}
}
