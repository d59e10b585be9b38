// Package jsonenc appends JSON values to byte slices without reflection or
// allocation, for the hot paths that build JSON by hand (the gateway's responses, the
// ledger's entries).
package jsonenc

import "unicode/utf8"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, and
// U+2028/U+2029 are escaped so that the output is safe in any JSON consumer.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case '\u2028':
				b = append(b, `\u2028`...)
			case '\u2029':
				b = append(b, `\u2029`...)
			default:
				b = append(b, `\ufffd`...)
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
