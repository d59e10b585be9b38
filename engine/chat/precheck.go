package chat

import (
	"fmt"
	"strings"
)

// checkTagChars rejects templates whose tags ({{ }} and {% %}, outside string
// literals) hold characters that Jinja's expression syntax has no use for: bytes
// outside printable ASCII, and "!" not followed by "=". gonja's lexer can loop
// forever or panic on some of them (fuzzing found "{% !0. ..."), and a loop cannot
// be stopped from outside, so such templates must never reach it. Chat templates
// write their identifiers in ASCII; text between tags and inside strings may be
// anything.
func checkTagChars(src string) error {
	line := 1
	fail := func(what string) error {
		return fmt.Errorf("%w: line %d: %s inside a tag", ErrTemplate, line, what)
	}
	i := 0
	for i < len(src) {
		// Text: find the next tag or comment.
		j := strings.Index(src[i:], "{")
		if j < 0 {
			return nil
		}
		line += strings.Count(src[i:i+j], "\n")
		i += j
		if i+1 >= len(src) {
			return nil
		}
		switch src[i+1] {
		case '#':
			k := strings.Index(src[i+2:], "#}")
			if k < 0 {
				return nil // unclosed comment: the parser reports it
			}
			line += strings.Count(src[i:i+2+k], "\n")
			i += 2 + k + 2
			continue
		case '{', '%':
		default:
			i++
			continue
		}
		end := "}}"
		if src[i+1] == '%' {
			end = "%}"
		}
		i += 2
		depth := 0
		var quote byte
	tag:
		for i < len(src) {
			c := src[i]
			if c == '\n' {
				line++
			}
			switch {
			case quote != 0:
				if c == '\\' {
					i++
				} else if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"':
				quote = c
			case depth == 0 && strings.HasPrefix(src[i:], end):
				i += 2
				break tag
			case c == '(' || c == '[' || c == '{':
				depth++
			case c == ')' || c == ']' || c == '}':
				depth = max(depth-1, 0)
			case c == '!':
				if i+1 >= len(src) || src[i+1] != '=' {
					return fail(`"!" without "="`)
				}
			case c == '\t' || c == '\n' || c == '\r':
			case c < 0x20 || c > 0x7e:
				return fail(fmt.Sprintf("byte %#x", c))
			}
			i++
		}
	}
	return nil
}
