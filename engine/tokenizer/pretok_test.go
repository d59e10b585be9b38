package tokenizer

import (
	"fmt"
	"testing"

	"github.com/dlclark/regexp2"
)

// FuzzMatchers checks the hand-written matchers against the expressions they stand
// for, run by regexp2: every text splits into the same pieces.
func FuzzMatchers(f *testing.F) {
	for _, s := range []string{
		"", "Hello world", "it's I'LL we'Ve 'x '", "  two  spaces   \n\n  x", "\t\tx\r\n\r\n \n",
		"123456 1.5 ١٢٣٤ Ⅻ½", "!!!\n\n?? (a) [b]", "日本語 テスト 한국어", "🙂🙃 a\u00a0b\u3000c\u2028",
		"x  ", " ", "\n", "a\u0301b", "\x00\x7f\xff",
	} {
		f.Add(s)
	}
	res := map[string]*regexp2.Regexp{}
	for e := range matchers {
		res[e] = regexp2.MustCompile(e, regexp2.None)
	}
	f.Fuzz(func(t *testing.T, s string) {
		runes := []rune(s)
		for e, m := range matchers {
			want := fmt.Sprint(regexStage{res[e]}.split(runes, 0, nil))
			if got := fmt.Sprint(m.split(runes, 0, nil)); got != want {
				t.Fatalf("%q with %s:\n got %s\nwant %s", s, e, got, want)
			}
		}
	})
}
