package sched

import (
	"testing"
)

// TestDrafts: a decode with a draft is granted what the step's budget, the KV blocks
// and the sequence's MaxTokens allow, after every other sequence's work; Apply counts
// one token and Accept the accepted drafts, and the draft is asked for again each
// step.
func TestDrafts(t *testing.T) {
	// Blocks of 4 tokens; 2 sequences of prompt 6. StepTokens 12.
	s, err := New(Config{MaxModelLen: 24, MaxConcurrency: 2, StepTokens: 12, BlockSize: 4, Blocks: 7})
	if err != nil {
		t.Fatal(err)
	}
	now := base
	for id := ID(1); id <= 2; id++ {
		if err := s.Enqueue(now, Request{ID: id, Tenant: "a", Prompt: 6, MaxTokens: 10}); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Plan(now, nil) // both prefill: 12 tokens
	s.Apply(now, st)
	q1, _ := s.Seq(1)
	q2, _ := s.Seq(2)
	if !q1.Decoding() || !q2.Decoding() {
		t.Fatal("prefills not done")
	}
	// Both at Len 7 (2 blocks each). Sequence 1 drafts 8: budget 12-2 = 10 allows 8,
	// MaxTokens 10-1-1 = 8 too, the blocks: 7 - (2+2) free = 3 more blocks, enough
	// for 7+8 = 15 tokens (4 blocks: 2 more).
	s.SetDraft(1, 8)
	st = s.Plan(now, nil)
	want := []Work{{ID: 1, Start: 6, N: 9, Sample: true, Draft: 8}, {ID: 2, Start: 6, N: 1, Sample: true}}
	if !sameWork(st.Work, want) {
		t.Fatalf("work %+v, want %+v", st.Work, want)
	}
	s.Apply(now, st)
	if q1.Len != 8 || q1.Computed != 7 || q1.Generated != 2 || q1.Draft != 0 {
		t.Fatalf("after Apply: %+v", *q1)
	}
	s.Accept(1, 3) // 3 of 8 drafts accepted
	if q1.Len != 11 || q1.Computed != 10 || q1.Generated != 5 || !q1.Decoding() {
		t.Fatalf("after Accept: %+v", *q1)
	}
	if got := s.Received("a"); got != 2+4+1 { // the first tokens, then 1+3 and 1
		t.Fatalf("tenant received %d tokens, want 7", got)
	}
	// MaxTokens caps the draft: 10 - 5 - 1 = 4 for sequence 1.
	s.SetDraft(1, 8)
	// Sequence 2 drafts too; the blocks left: 7 - blocks(11)=3 - blocks(8)=2 = 2:
	// sequence 1 gets 4 (Len 15: 4 blocks, 1 more), sequence 2 one block's worth.
	s.SetDraft(2, 8)
	st = s.Plan(now, nil)
	want = []Work{{ID: 1, Start: 10, N: 5, Sample: true, Draft: 4}, {ID: 2, Start: 7, N: 5, Sample: true, Draft: 4}}
	if !sameWork(st.Work, want) {
		t.Fatalf("capped work %+v, want %+v", st.Work, want)
	}
	s.Apply(now, st)
	s.Accept(1, 4)
	if q1.Generated != 10 || q1.Len != 16 {
		t.Fatalf("after accepting all: %+v", *q1)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	// A sequence one token from its end drafts nothing and its work is Last.
	s.SetDraft(1, 8)
	st = s.Plan(now, nil)
	for _, w := range st.Work {
		if w.ID == 1 && (w.Draft != 0 || !w.Last) {
			t.Fatalf("last token's work %+v", w)
		}
	}
}

func sameWork(a, b []Work) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
