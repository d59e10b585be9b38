package sse

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
)

// specEvent is one event as the SSE specification's parser dispatches it.
type specEvent struct {
	name, data string
}

// parseSpec parses a stream as the WHATWG specification says (lines end with CRLF,
// LF or CR; a leading space after the colon is dropped; data lines joined by LF and
// the last LF removed; comments ignored; an event with no data line is not
// dispatched). It is independent of Reader, which is lenient in other ways.
func parseSpec(s string) []specEvent {
	var out []specEvent
	var name, data string
	hasData := false
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			break // an unterminated last line is not dispatched
		}
		line := s[:i]
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++
		}
		s = s[i+1:]
		switch {
		case line == "":
			if hasData {
				out = append(out, specEvent{name, strings.TrimSuffix(data, "\n")})
			}
			name, data, hasData = "", "", false
		case line[0] == ':':
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				name = value
			case "data":
				data += value + "\n"
				hasData = true
			}
		}
	}
	return out
}

// lf is data with every line break made "\n", as a reader returns it.
func lf(s string) string {
	return strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(s)
}

func TestAppendEvent(t *testing.T) {
	cases := []struct {
		name, event, data, want string
	}{
		{"data only", "", `{"a":1}`, "data: {\"a\":1}\n\n"},
		{"named", "message_start", `{}`, "event: message_start\ndata: {}\n\n"},
		{"done", "", "[DONE]", "data: [DONE]\n\n"},
		{"empty data", "", "", "data: \n\n"},
		{"LF in data", "", "a\nb", "data: a\ndata: b\n\n"},
		{"CRLF in data", "x", "a\r\nb", "event: x\ndata: a\ndata: b\n\n"},
		{"CR in data", "", "a\rb", "data: a\ndata: b\n\n"},
		{"trailing LF", "", "a\n", "data: a\ndata: \n\n"},
		{"blank line in data is not an event boundary", "", "a\n\ndata: forged\n\nb", "data: a\ndata: \ndata: data: forged\ndata: \ndata: b\n\n"},
		{"leading space kept", "", " a", "data:  a\n\n"},
	}
	for _, c := range cases {
		got := string(AppendEvent([]byte("prefix"), c.event, []byte(c.data)))
		if got != "prefix"+c.want {
			t.Errorf("%s: %q, want %q", c.name, got, "prefix"+c.want)
		}
		ev := parseSpec(got[len("prefix"):])
		if len(ev) != 1 || ev[0] != (specEvent{c.event, lf(c.data)}) {
			t.Errorf("%s: parsed back as %q", c.name, ev)
		}
	}
}

// TestBeginEndInPlace: data rendered in place between Begin and End is framed as
// AppendEvent frames it, whatever precedes it in the buffer.
func TestBeginEndInPlace(t *testing.T) {
	for _, data := range []string{"{}", "a\nb\r\nc\rd", "\n", ""} {
		b, at := Begin([]byte("data: earlier\n\n"), "e")
		b = append(b, data...)
		b = End(b, at)
		want := "data: earlier\n\n" + string(AppendEvent(nil, "e", []byte(data)))
		if string(b) != want {
			t.Errorf("%q: %q, want %q", data, b, want)
		}
	}
}

func TestAppendComment(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"keep-alive", ": keep-alive\n\n"},
		{"a\nb", ": a\n: b\n\n"},
		{"a\r\nb\rc", ": a\n: b\n: c\n\n"},
	} {
		got := string(AppendComment(nil, c.text))
		if got != c.want {
			t.Errorf("%q: %q, want %q", c.text, got, c.want)
		}
		if ev := parseSpec("data: x\n\n" + got + "data: y\n\n"); len(ev) != 2 || ev[0].data != "x" || ev[1].data != "y" {
			t.Errorf("%q: a comment changed the events around it: %q", c.text, ev)
		}
	}
}

func TestAppendEventNameWithLineBreakPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for an event name with a line break")
		}
	}()
	AppendEvent(nil, "a\nb", nil)
}

// FuzzAppendEvent: whatever the data, a specification parser reads back exactly one
// event, with its name and its data (line breaks as "\n"); so does Reader, line by
// line, for data without white space at its lines' ends (which Reader trims).
func FuzzAppendEvent(f *testing.F) {
	for _, s := range []string{"", "{}", "a\nb", "a\r\n\r\nb", "\r", "data: x\n\nevent: y", ": c\n"} {
		f.Add("", s)
		f.Add("message_delta", s)
	}
	f.Fuzz(func(t *testing.T, name, data string) {
		if strings.ContainsAny(name, "\r\n") || strings.HasPrefix(name, " ") {
			return
		}
		b := AppendEvent(nil, name, []byte(data))
		ev := parseSpec(string(b))
		if len(ev) != 1 || ev[0] != (specEvent{name, lf(data)}) {
			t.Fatalf("AppendEvent(%q, %q) = %q, parsed back as %q", name, data, b, ev)
		}
		r := NewReader(bytes.NewReader(b), 64)
		got, err := r.NextEvent()
		if err != nil {
			t.Fatalf("Reader: %v", err)
		}
		want := lf(data)
		trimmed := true
		for line := range strings.SplitSeq(want, "\n") {
			trimmed = trimmed && strings.TrimRight(line, " \t") == line && !strings.HasPrefix(line, " ")
		}
		if trimmed && string(got) != want {
			t.Fatalf("Reader read %q back as %q", data, got)
		}
	})
}

// failing fails every write after the first n bytes.
type failing struct {
	bytes.Buffer
	n int
}

var errClosed = errors.New("closed")

func (f *failing) Write(p []byte) (int, error) {
	if f.Len()+len(p) > f.n {
		return 0, errClosed
	}
	return f.Buffer.Write(p)
}

func TestWriterFlushesAndStopsWhenGone(t *testing.T) {
	dst := &failing{n: 40}
	w := NewWriter(bufio.NewWriterSize(dst, 4096))
	if !w.Event("", []byte(`{"a":1}`)) || dst.String() != "data: {\"a\":1}\n\n" {
		t.Fatalf("first event not flushed: %q", dst.String())
	}
	if !w.Comment("ping") || !strings.HasSuffix(dst.String(), ": ping\n\n") {
		t.Fatalf("comment not flushed: %q", dst.String())
	}
	if w.Event("big", bytes.Repeat([]byte("x"), 64)) || !w.Gone() {
		t.Fatal("a failed write did not make the writer gone")
	}
	before := dst.String()
	dst.n = 1 << 20 // the destination would take it now; the writer must not
	if w.Write([]byte("data: late\n\n")) || dst.String() != before {
		t.Errorf("wrote after gone: %q", dst.String())
	}
	w.Reset(bufio.NewWriter(dst))
	if w.Gone() || !w.Write(nil) {
		t.Error("Reset did not make the writer new")
	}
}

// BenchmarkFrame: the framing of one chat chunk (a 200-byte JSON line) by Begin/End
// against appending the same bytes without looking for line breaks (how the gateway
// framed events before this package).
func BenchmarkFrame(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1700000000,"model":"tiny","choices":[{"index":0,"delta":{"content":"hello "},"logprobs":null,"finish_reason":null}]}`)
	buf := make([]byte, 0, 512)
	b.Run("Begin/End", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var at int
			buf, at = Begin(buf[:0], "")
			buf = End(append(buf, data...), at)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = append(buf[:0], "data: "...)
			buf = append(append(buf, data...), "\n\n"...)
		}
	})
}
