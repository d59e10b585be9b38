package sse

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t *testing.T, r *Reader) ([]string, error) {
	t.Helper()
	var out []string
	for {
		d, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestReader(t *testing.T) {
	long := strings.Repeat("x", 100)
	cases := []struct {
		name, in string
		want     []string
	}{
		{"events", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}},
		{"no space, CRLF", "data:{}\r\n\r\n", []string{"{}"}},
		{"other fields skipped", ": comment\nevent: x\nid: 3\nretry: 5\ndata: y\n\n", []string{"y"}},
		{"last line without newline", "data: a\n\ndata: b", []string{"a", "b"}},
		{"empty data", "data:\n\n", []string{""}},
		{"a line longer than the buffer", "data: " + long + "\ndata: z\n", []string{long, "z"}},
		{"nothing", "", nil},
	}
	for _, c := range cases {
		for _, slow := range []bool{false, true} {
			var in io.Reader = strings.NewReader(c.in)
			if slow {
				in = iotest.OneByteReader(in) // events split across reads
			}
			got, err := readAll(t, NewReader(in, 16))
			if err != io.EOF || strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
				t.Errorf("%s (slow %v): %q, %v; want %q", c.name, slow, got, err, c.want)
			}
		}
	}
}

func TestReaderMaxLine(t *testing.T) {
	r := NewReader(strings.NewReader("data: ok\ndata: "+strings.Repeat("x", 200)+"\n"), 16)
	r.MaxLine = 64
	if d, err := r.Next(); err != nil || string(d) != "ok" {
		t.Fatalf("%q %v", d, err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("err = %v, want ErrLineTooLong", err)
	}
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n"), iotest.ErrReader(boom)), 16)
	if d, err := r.Next(); err != nil || string(d) != "a" {
		t.Fatalf("%q %v", d, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

// FuzzReader: any input yields data lines that came from "data:" lines, and never
// panics.
func FuzzReader(f *testing.F) {
	f.Add([]byte("data: {}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata:x"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(strings.NewReader(string(in)), 16)
		n := 0
		for {
			d, err := r.Next()
			if err != nil {
				break
			}
			if !strings.Contains(string(in), string(d)) {
				t.Fatalf("data %q not in the input", d)
			}
			n++
		}
		if n > strings.Count(string(in), "data:") {
			t.Fatalf("%d data lines from %d", n, strings.Count(string(in), "data:"))
		}
	})
}

func TestReaderEvents(t *testing.T) {
	long := strings.Repeat("x", 100)
	cases := []struct {
		name, in string
		want     []string
	}{
		{"events", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}},
		{"lines joined", "data: {\ndata:   \"a\" : 1\ndata: }\n\ndata: [DONE]\n\n", []string{"{\n  \"a\" : 1\n}", "[DONE]"}},
		{"no space, CRLF", "data:{}\r\n\r\n", []string{"{}"}},
		{"other fields skipped", ": comment\n\nevent: x\nid: 3\nretry: 5\ndata: y\n\n", []string{"y"}},
		{"last event without a blank line", "data: a\n\ndata: b", []string{"a", "b"}},
		{"empty data", "data:\n\n", []string{""}},
		{"a line longer than the buffer", "data: " + long + "\ndata: z\n\n", []string{long + "\nz"}},
		{"blank lines only", "\n\n\r\n", nil},
		{"nothing", "", nil},
	}
	for _, c := range cases {
		for _, slow := range []bool{false, true} {
			var in io.Reader = strings.NewReader(c.in)
			if slow {
				in = iotest.OneByteReader(in) // events split across reads
			}
			r := NewReader(in, 16)
			var got []string
			var err error
			for {
				var d []byte
				if d, err = r.NextEvent(); err != nil {
					break
				}
				got = append(got, string(d))
			}
			if err != io.EOF || strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
				t.Errorf("%s (slow %v): %q, %v; want %q", c.name, slow, got, err, c.want)
			}
		}
	}
}

func TestReaderEventMax(t *testing.T) {
	r := NewReader(strings.NewReader("data: ok\n\n"+strings.Repeat("data: 0123456789\n", 10)+"\n"), 16)
	r.MaxLine = 64
	if d, err := r.NextEvent(); err != nil || string(d) != "ok" {
		t.Fatalf("%q %v", d, err)
	}
	if _, err := r.NextEvent(); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("err = %v, want ErrLineTooLong", err)
	}
}

func TestReaderEventError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n"), iotest.ErrReader(boom)), 16)
	if d, err := r.NextEvent(); err != nil || string(d) != "a" {
		t.Fatalf("%q %v", d, err)
	}
	if _, err := r.NextEvent(); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

// FuzzReaderEvents: any input yields at most one event per data line, each line of
// an event's data from the input, and never panics.
func FuzzReaderEvents(f *testing.F) {
	f.Add([]byte("data: {}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\ndata: }\r\n\r\n: c\r\ndata:x"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(strings.NewReader(string(in)), 16)
		n := 0
		for {
			d, err := r.NextEvent()
			if err != nil {
				break
			}
			for _, l := range strings.Split(string(d), "\n") {
				if !strings.Contains(string(in), l) {
					t.Fatalf("data %q not in the input", l)
				}
			}
			n++
		}
		if n > strings.Count(string(in), "data:") {
			t.Fatalf("%d events from %d data lines", n, strings.Count(string(in), "data:"))
		}
	})
}
