package sample

import (
	"strings"
	"testing"
)

// stream feeds pieces to a matcher as a generation loop would and returns what was
// shown, the snapshots of the shown text after each piece, and whether it stopped.
func stream(m *StopMatcher, pieces []string) (shown string, steps []string, stopped bool) {
	text := ""
	for _, p := range pieces {
		text += p
		safe, stop := m.Check(text)
		shown = text[:safe]
		steps = append(steps, shown)
		if stop {
			return shown, steps, true
		}
	}
	return shown, steps, false
}

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		pieces  []string
		steps   []string
		stopped bool
	}{
		{"no stops", nil, []string{"a", "b"}, []string{"a", "ab"}, false},
		{"empty stop ignored", []string{""}, []string{"a", "b"}, []string{"a", "ab"}, false},
		{"held back then released", []string{"STOP"}, []string{"Hi ", "ST", "AR"}, []string{"Hi ", "Hi ", "Hi STAR"}, false},
		{"held back then stopped", []string{"STOP"}, []string{"Hi ", "ST", "O", "P and more"}, []string{"Hi ", "Hi ", "Hi ", "Hi "}, true},
		{"stop inside one piece", []string{"\n\n"}, []string{"one", " two\n\nthree"}, []string{"one", "one two"}, true},
		{"stop at the start", []string{"</s>"}, []string{"</s>x"}, []string{""}, true},
		{"earliest of several", []string{"cd", "bcx", "b"}, []string{"a", "bcd"}, []string{"a", "a"}, true},
		{"longest pending prefix", []string{"abab"}, []string{"xab", "a"}, []string{"x", "x"}, false},
		{"overlapping prefix restarts", []string{"aab"}, []string{"aa", "a", "b"}, []string{"", "a", "a"}, true},
		{"short stop ends while a longer one is pending", []string{"aba", "b"}, []string{"ab", "ab"}, []string{"a"}, true},
		{"unicode", []string{"終わり"}, []string{"はい。", "終", "わり"}, []string{"はい。", "はい。", "はい。"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, steps, stopped := stream(NewStopMatcher(tc.stops), tc.pieces)
			if stopped != tc.stopped || strings.Join(steps, "|") != strings.Join(tc.steps, "|") {
				t.Errorf("steps %q stopped %v, want %q %v", steps, stopped, tc.steps, tc.stopped)
			}
		})
	}
	var nilMatcher *StopMatcher
	if safe, stop := nilMatcher.Check("abc"); safe != 3 || stop {
		t.Errorf("nil matcher: %d %v", safe, stop)
	}
}

// TestStopMatcherMatched: Matched names the stop string that ended the text, the
// earliest in it (the first listed of two at one offset), and "" while none has.
func TestStopMatcherMatched(t *testing.T) {
	tests := []struct {
		stops   []string
		pieces  []string
		matched string
	}{
		{[]string{"STOP"}, []string{"Hi ", "ST", "AR"}, ""},
		{[]string{"STOP", "\n"}, []string{"Hi ", "ST", "OP\n"}, "STOP"},
		{[]string{"cd", "bcx", "b"}, []string{"a", "bcd"}, "b"},
		{[]string{"ab", "a"}, []string{"xab"}, "ab"},
		{[]string{"aba", "b"}, []string{"ab", "ab"}, "b"},
	}
	for _, tc := range tests {
		m := NewStopMatcher(tc.stops)
		stream(m, tc.pieces)
		if got := m.Matched(); got != tc.matched {
			t.Errorf("stops %q, pieces %q: matched %q, want %q", tc.stops, tc.pieces, got, tc.matched)
		}
	}
	var nilMatcher *StopMatcher
	if nilMatcher.Matched() != "" {
		t.Error("nil matcher matched")
	}
}

// FuzzStopMatcher checks the matcher against a direct search: what is shown only
// grows, is always a prefix of the final output, and the output ends right before
// the first stop string present once generation stops.
func FuzzStopMatcher(f *testing.F) {
	f.Add("Hello STOP world", "STOP", "\n\n", uint8(3))
	f.Add("aaab", "aab", "b", uint8(1))
	f.Add("日本語です", "です", "", uint8(2))
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string, chunk uint8) {
		size := int(chunk%8) + 1
		var pieces []string
		for i := 0; i < len(text); i += size {
			pieces = append(pieces, text[i:min(i+size, len(text))])
		}
		stops := []string{stop1, stop2}
		shown, steps, stopped := stream(NewStopMatcher(stops), pieces)

		// Reference: generation stops after the first piece with which any stop
		// string is present; the output ends at the earliest one present then.
		want, wantStop, acc := text, false, ""
		for _, p := range pieces {
			acc += p
			first := -1
			for _, s := range stops {
				if i := strings.Index(acc, s); s != "" && i >= 0 && (first < 0 || i < first) {
					first = i
				}
			}
			if first >= 0 {
				want, wantStop = acc[:first], true
				break
			}
		}
		if stopped != wantStop {
			t.Fatalf("stopped %v, want %v", stopped, wantStop)
		}
		if stopped && shown != want {
			t.Fatalf("output %q, want %q", shown, want)
		}
		prev := ""
		for _, s := range steps {
			if !strings.HasPrefix(s, prev) || !strings.HasPrefix(want, s) && !strings.HasPrefix(text, s) {
				t.Fatalf("shown text went %q -> %q", prev, s)
			}
			if !strings.HasPrefix(want, s) {
				t.Fatalf("showed %q, beyond the output %q", s, want)
			}
			prev = s
		}
	})
}
