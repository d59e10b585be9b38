package grammar

// formats are the string formats the grammar enforces, each as fixed-length
// alternatives of byte classes (at most 64 alternatives: a matcher tracks the live
// ones in a bit mask). Dates stop at day 28 so that every date is a real one; times
// have no fractional seconds.
var formats = map[string][][]byteSet{}

func init() {
	date := product([]string{"dddd-"}, []string{"0[1-9]", "1[0-2]"}, []string{"-"}, []string{"0[1-9]", "1d", "2[0-8]"})
	tz := []string{"Z", "[+-][01]d:[0-5]d", "[+-]2[0-3]:[0-5]d"}
	clock := product([]string{"[01]d", "2[0-3]"}, []string{":[0-5]d:[0-5]d"})
	time := product(clock, tz)
	formats["date"] = compilePatterns(date)
	formats["time"] = compilePatterns(time)
	formats["date-time"] = compilePatterns(product(date, []string{"T"}, time))
	formats["uuid"] = compilePatterns([]string{"hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh"})
	for name, alts := range formats {
		if len(alts) > 64 {
			panic("grammar: format " + name + " has more than 64 alternatives")
		}
	}
}

// product concatenates one alternative of each part, in every combination.
func product(parts ...[]string) []string {
	out := []string{""}
	for _, p := range parts {
		var next []string
		for _, a := range out {
			for _, b := range p {
				next = append(next, a+b)
			}
		}
		out = next
	}
	return out
}

// compilePatterns turns patterns into byte classes: d is a digit, h a lower-case hex
// digit, [..] a set of bytes and ranges, anything else itself.
func compilePatterns(pats []string) [][]byteSet {
	var out [][]byteSet
	for _, p := range pats {
		var seq []byteSet
		for i := 0; i < len(p); i++ {
			var s byteSet
			switch c := p[i]; c {
			case 'd':
				s.add('0', '9')
			case 'h':
				s.add('0', '9')
				s.add('a', 'f')
			case '[':
				i++
				for ; p[i] != ']'; i++ {
					if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
						s.add(p[i], p[i+2])
						i += 2
					} else {
						s.add(p[i], p[i])
					}
				}
			default:
				s.add(c, c)
			}
			seq = append(seq, s)
		}
		out = append(out, seq)
	}
	return out
}
