package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/internal/testenv"
)

// TestScoreStories260K scores llama2.c's greedy sequence: at every step the most
// likely next token is the one the sequence continues with.
func TestScoreStories260K(t *testing.T) {
	m, err := model.Open(testenv.SharedFile(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	raw, err := os.ReadFile(testenv.SharedFile(t, "models/stories260K.expected-greedy-200.ids.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{1}
	for _, f := range strings.Fields(string(raw)) {
		id, _ := strconv.Atoi(f)
		ids = append(ids, int32(id))
	}
	steps, err := score(m, ids, 5, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != len(ids) {
		t.Fatalf("%d steps for %d ids", len(steps), len(ids))
	}
	for i := 0; i+1 < len(ids); i++ {
		top := steps[i].Top
		if len(top) != 5 || top[0][0].(int32) != ids[i+1] {
			t.Fatalf("step %d: top %v, want %d first", i, top, ids[i+1])
		}
		for j := 1; j < len(top); j++ {
			if top[j][1].(float64) > top[j-1][1].(float64) {
				t.Fatalf("step %d not sorted: %v", i, top)
			}
		}
	}
	if _, err := score(m, ids, 5, 100, 0, nil); !errors.Is(err, model.ErrContextFull) {
		t.Fatalf("200 ids in a context of 100: %v", err)
	}
}

func TestScoreBadInput(t *testing.T) {
	run := commands["score"].run
	for _, args := range [][]string{
		{"--model", "/nonexistent.gguf", "--ids", "1"},
		{"--model", "cmd_score.go", "--ids", "1"},
		{"--ids", "1"},
		{"--model", "x.gguf", "--ids", "1,a"},
	} {
		if err := run(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
