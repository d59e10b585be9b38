package tokenizer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
)

// TestStories260KGreedy decodes llama2.c's greedy run of stories260K (BOS then the
// generated ids) with the stream decoder to exactly its text.
//
// The shared data disagree by one token: the text is llama2.c's 200-step output
// (200 pieces after BOS, ending in " she") while the ids file holds 199 ids. So the
// test checks that the text encodes to BOS + the ids + what the ids file lacks, that
// decoding that whole sequence gives the text exactly, and that decoding BOS + the
// ids file gives the text up to the missing piece.
func TestStories260KGreedy(t *testing.T) {
	tok := cachedTokenizer(t, testenv.SharedFile(t, "models/stories260K.gguf"))
	raw, err := os.ReadFile(testenv.SharedFile(t, "models/stories260K.expected-greedy-200.ids.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, err := os.ReadFile(testenv.SharedFile(t, "models/stories260K.expected-greedy-200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := string(wantBytes)
	ids := []int32{tok.BOS()}
	for _, f := range strings.Fields(string(raw)) {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, int32(v))
	}
	if tok.BOS() != 1 || tok.VocabSize() != 512 || !tok.AddBOS() {
		t.Fatalf("BOS %d, %d tokens, AddBOS %v", tok.BOS(), tok.VocabSize(), tok.AddBOS())
	}
	streamDecode := func(prompt, ids []int32) string {
		d := tok.NewDecoder()
		d.Prime(prompt)
		var sb strings.Builder
		for _, id := range ids {
			sb.WriteString(d.Next(id))
		}
		return sb.String() + d.Flush()
	}

	full := tok.Encode(want, true, false)
	if len(full) < len(ids) || fmtIDs(full[:len(ids)]) != fmtIDs(ids) {
		t.Fatalf("Encode(text) does not start with BOS + the ids file:\n got %s\nwant %s...", fmtIDs(full), fmtIDs(ids))
	}
	if got := streamDecode(nil, full); got != want {
		t.Errorf("stream decode of the text's ids:\n got %q\nwant %q", got, want)
	}
	if got := tok.Decode(full); got != want {
		t.Errorf("Decode of the text's ids:\n got %q\nwant %q", got, want)
	}
	got := streamDecode(nil, ids)
	rest := streamDecode(ids, full[len(ids):]) // the continuation keeps its space
	if got+rest != want {
		t.Errorf("stream decode of BOS + ids file:\n got %q\nwant %q (the text without %q)", got, strings.TrimSuffix(want, rest), rest)
	}
	if len(full) != len(ids) {
		t.Logf("note: the ids file has %d ids; the text has %d more token(s) %v = %q", len(ids)-1, len(full)-len(ids), full[len(ids):], rest)
	}
}

// TestStreamDecoderUTF8 splits multi-byte characters across byte tokens and checks
// that no piece ever ends inside a character, and that Flush gives what is left.
func TestStreamDecoderUTF8(t *testing.T) {
	tok := testSPM(t)
	for _, s := range []string{"héllo wörld", "日本語のテキスト", "emoji 🙂🙃 end", "a\u0301b", "x"} {
		ids := tok.Encode(s, true, false)
		d := tok.NewDecoder()
		var got strings.Builder
		for _, id := range ids {
			p := d.Next(id)
			if !utf8Valid(p) {
				t.Errorf("%q: piece %q is not whole UTF-8", s, p)
			}
			got.WriteString(p)
		}
		got.WriteString(d.Flush())
		if got.String() != s {
			t.Errorf("stream decode of %q = %q", s, got.String())
		}
	}
	// A character cut short at the end of the stream is flushed as its bytes.
	d := tok.NewDecoder()
	e2, e3 := tok.byteTokens[0xE2], tok.byteTokens[0x82]
	if p := d.Next(e2) + d.Next(e3); p != "" {
		t.Errorf("incomplete character emitted early: %q", p)
	}
	if p := d.Flush(); p != "\xe2\x82" {
		t.Errorf("Flush = %q", p)
	}
	// Bytes that can never be a character pass at once.
	if p := d.Next(tok.byteTokens[0x80]); p != "\x80" {
		t.Errorf("stray continuation byte: %q", p)
	}
}

// TestStreamDecoderPrime: after a prompt the first piece keeps its space; at the
// start of a text (after BOS) SentencePiece's prefix space is dropped.
func TestStreamDecoderPrime(t *testing.T) {
	tok := testSPM(t)
	prompt := tok.Encode("once upon", true, false)
	gen := tok.Encode("a time", false, false) // "▁a ▁time": the continuation
	d := tok.NewDecoder()
	d.Prime(prompt)
	var sb strings.Builder
	for _, id := range gen {
		sb.WriteString(d.Next(id))
	}
	if sb.String() != " a time" {
		t.Errorf("continuation = %q, want %q", sb.String(), " a time")
	}
	if got := tok.Decode(append(prompt, gen...)); got != "once upon a time" {
		t.Errorf("Decode = %q", got)
	}
	d = tok.NewDecoder()
	d.Prime([]int32{tok.BOS()}) // a control token gives no text: still at the start
	if got := d.Next(gen[0]); got != "a" {
		t.Errorf("after BOS only: %q", got)
	}
}

func TestPiece(t *testing.T) {
	spm, bpe := testSPM(t), testBPE(t)
	for _, c := range []struct {
		tok  *Tokenizer
		text string // the token's raw text
		want string
	}{
		{spm, "▁time", " time"}, {spm, "<0x41>", "A"}, {spm, "<0xE2>", "\xe2"}, {spm, "<s>", ""},
		{spm, "<unk>", ""}, {spm, "<user>", "<user>"}, {bpe, "Ġthe", " the"}, {bpe, "Ã¶", "ö"},
		{bpe, "Ċ", "\n"}, {bpe, "<|endoftext|>", ""},
	} {
		id, ok := c.tok.ID(c.text)
		if !ok {
			t.Fatalf("no token %q", c.text)
		}
		if got := c.tok.Piece(id); got != c.want {
			t.Errorf("Piece(%q) = %q, want %q", c.text, got, c.want)
		}
	}
	if spm.Piece(-1) != "" || spm.Piece(int32(spm.VocabSize())) != "" {
		t.Error("Piece of an id out of range is not empty")
	}
}

func TestCompleteLen(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 3}, {"é", 2}, {"a\xc3", 1}, {"a\xe2\x82", 1}, {"\xe2\x82\xac", 3},
		{"\xf0\x9f\x99", 0}, {"\xf0\x9f\x99\x82", 4}, {"\x80\x80", 2}, {"a\xe0\x80", 3}, // E0 80 can never complete
		{"\xff", 1},
	} {
		if got := completeLen(c.in); got != c.want {
			t.Errorf("completeLen(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// TestConcurrentUse encodes and decodes with one Tokenizer from several goroutines
// (run with -race): the results equal the serial ones.
func TestConcurrentUse(t *testing.T) {
	for name, tok := range map[string]*Tokenizer{"spm": testSPM(t), "bpe": testBPE(t)} {
		texts := []string{"hello world", "once upon a time", "héllo wörld 日本", "the <user> thing", "  spaces\n\n"}
		want := make([]string, len(texts))
		for i, s := range texts {
			want[i] = fmtIDs(tok.Encode(s, true, true))
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8*len(texts))
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i, s := range texts {
					ids := tok.Encode(s, true, true)
					if got := fmtIDs(ids); got != want[i] {
						errs <- fmt.Sprintf("%s: Encode(%q) = %s, want %s", name, s, got, want[i])
					}
					tok.Decode(ids)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	}
}
