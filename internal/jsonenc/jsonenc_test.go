package jsonenc

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzAppendString: the output is valid JSON that decodes to the input (with
// invalid UTF-8 replaced by U+FFFD, as encoding/json does).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "hello", "a\"b\\c", "\n\t\r\x00\x1f", "é中😀", "\xff\xfe", "\u2028\u2029", "<script>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = string([]rune(s)) // replaces each invalid byte by U+FFFD
		}
		if got != want {
			t.Fatalf("%q -> %s -> %q", s, b, got)
		}
	})
}
