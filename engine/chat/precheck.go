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

// rewriteLiterals rewrites two escapes inside the string literals of tags that
// gonja gets wrong:
//
//   - a backslash-newline is removed, as Python does in the literals of jinja2
//     (they are decoded with Python's escapes, where a backslash at the end of a
//     line continues the string on the next without a newline); gonja would keep
//     a "\n". Templates break long literals so (Mistral Small 3.1's default
//     system prompt in llama.cpp's copy);
//   - an escaped backslash (\\) becomes \x5c, the same character: gonja's lexer
//     takes the quote after "\\" for an escaped one, so 'a\\' never ends (Kimi's
//     template writes '"\\b"' and '\\u00').
func rewriteLiterals(src string) string {
	if !strings.Contains(src, "\\\n") && !strings.Contains(src, "\\\r\n") && !strings.Contains(src, `\\`) {
		return src
	}
	var out strings.Builder
	out.Grow(len(src))
	i := 0
	for i < len(src) {
		j := strings.Index(src[i:], "{")
		if j < 0 || i+j+1 >= len(src) {
			break
		}
		out.WriteString(src[i : i+j])
		i += j
		end := ""
		switch src[i+1] {
		case '#':
			k := strings.Index(src[i+2:], "#}")
			if k < 0 {
				out.WriteString(src[i:])
				return out.String()
			}
			out.WriteString(src[i : i+2+k+2])
			i += 2 + k + 2
			continue
		case '{':
			end = "}}"
		case '%':
			end = "%}"
		default:
			out.WriteByte('{')
			i++
			continue
		}
		out.WriteString(src[i : i+2])
		i += 2
		depth := 0
		var quote byte
		for i < len(src) {
			c := src[i]
			if quote != 0 {
				switch {
				case c == '\\' && strings.HasPrefix(src[i+1:], "\n"):
					i += 2
					continue
				case c == '\\' && strings.HasPrefix(src[i+1:], "\r\n"):
					i += 3
					continue
				case c == '\\' && i+1 < len(src) && src[i+1] == '\\':
					out.WriteString(`\x5c`)
					i += 2
					continue
				case c == '\\' && i+1 < len(src):
					out.WriteString(src[i : i+2])
					i += 2
					continue
				case c == quote:
					quote = 0
				}
				out.WriteByte(c)
				i++
				continue
			}
			if depth == 0 && strings.HasPrefix(src[i:], end) {
				out.WriteString(end)
				i += 2
				break
			}
			switch c {
			case '\'', '"':
				quote = c
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				depth = max(depth-1, 0)
			}
			out.WriteByte(c)
			i++
		}
	}
	out.WriteString(src[i:])
	return out.String()
}
