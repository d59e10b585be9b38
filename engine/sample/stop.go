package sample

import "strings"

// StopMatcher finds stop strings in a growing output text. It tells how much of the
// text can be shown: a stream never shows the start of a stop string that the next
// tokens might complete, and the output ends before the first stop string. The zero
// value (no stop strings) lets everything through.
//
// A StopMatcher belongs to one sequence: the text it is given must only grow
// (each call sees the previous text plus what was generated since).
type StopMatcher struct {
	stops   []string
	longest int
	from    int    // matches cannot start before this offset: earlier text was searched
	matched string // the stop string that ended the text ("" until one did)
}

// NewStopMatcher returns a matcher for stops; empty strings are ignored.
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s == "" {
			continue
		}
		m.stops = append(m.stops, s)
		m.longest = max(m.longest, len(s))
	}
	return m
}

// Check looks at text, all the output so far. With stopped, the output is
// text[:safe] and generation ends. Otherwise text[:safe] can be shown: what follows
// could still become a stop string.
func (m *StopMatcher) Check(text string) (safe int, stopped bool) {
	if m == nil || len(m.stops) == 0 {
		return len(text), false
	}
	if m.from > len(text) {
		m.from = 0 // not the same sequence's text: search it all
	}
	first := -1
	for _, s := range m.stops {
		if i := strings.Index(text[m.from:], s); i >= 0 && (first < 0 || m.from+i < first) {
			first, m.matched = m.from+i, s
		}
	}
	if first >= 0 {
		return first, true
	}
	// No match: only a suffix shorter than the longest stop string can still
	// become one. Hold back the longest suffix that is a prefix of a stop string.
	safe = len(text)
	for start := max(0, len(text)-m.longest+1); start < len(text); start++ {
		if m.isPrefix(text[start:]) {
			safe = start
			break
		}
	}
	m.from = max(0, len(text)-m.longest+1)
	return safe, false
}

// Matched is the stop string that ended the text (Check returned stopped), the first
// in the text; "" when none did.
func (m *StopMatcher) Matched() string {
	if m == nil {
		return ""
	}
	return m.matched
}

// isPrefix reports whether tail is a proper prefix of a stop string.
func (m *StopMatcher) isPrefix(tail string) bool {
	for _, s := range m.stops {
		if len(tail) < len(s) && strings.HasPrefix(s, tail) {
			return true
		}
	}
	return false
}
