package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// MaxMultipleOf is the largest multipleOf (an integer's, or a number's numerator in
// lowest terms) the grammar enforces: its remainder automaton has that many states.
const MaxMultipleOf = 1000

// maxInt is the largest integer part a number may have (maxIntDigits digits).
var maxInt = int64(999_999_999_999_999)

// numberKeywords are the keywords of numeric bounds.
var numberKeywords = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}

// numberDFA compiles an integer or number schema with bounds or multipleOf into an
// automaton of its text; ok is false when it has none (the plain nodes do).
//
// Integers are exact: the digits of every integer in [lo, hi] (the classic range
// construction, digit by digit, for each length), intersected with the remainder
// automaton of multipleOf. Numbers with bounds are sound, not complete: no exponent;
// an integer value in the bounds; or a fraction (at most 14 digits, ending in a
// non-zero one) after an integer part I whose whole interval (I, I+1), or (-I-1, -I)
// after '-', lies within the bounds. A number's multipleOf p/q (in lowest terms) is
// met by integer multiples of p only.
func (b *builder) numberDFA(s map[string]any, integer bool, path string) (*dfa, bool, error) {
	has := false
	for _, k := range numberKeywords {
		if _, ok := s[k]; ok {
			has = true
		}
	}
	if !has {
		return nil, false, nil
	}
	rat := func(k string) (*big.Rat, error) {
		v, ok := s[k]
		if !ok {
			return nil, nil
		}
		n, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%w: %s/%s is not a number", ErrSchema, path, k)
		}
		r, ok := new(big.Rat).SetString(n.String())
		if !ok {
			return nil, fmt.Errorf("%w: %s/%s is not a number", ErrSchema, path, k)
		}
		return r, nil
	}
	var bounds [4]*big.Rat
	for i, k := range numberKeywords[:4] {
		if ex, ok := s[k].(bool); ok && i >= 2 {
			// Draft 4 (OpenAPI 3.0): a boolean makes minimum or maximum exclusive.
			if ex {
				bounds[i], bounds[i-2] = bounds[i-2], nil
			}
			continue
		}
		r, err := rat(k)
		if err != nil {
			return nil, false, err
		}
		bounds[i] = r
	}
	minR, maxR, exMinR, exMaxR := bounds[0], bounds[1], bounds[2], bounds[3]
	// The integers allowed: [ilo, ihi]; the integer parts of fractions: [flo, fhi]
	// for positive ones (I.F in (I, I+1)), [nlo, nhi] for negative ones (-I.F).
	ilo, ihi := -maxInt, maxInt
	flo, fhi := int64(0), maxInt
	nlo, nhi := int64(0), maxInt
	if minR != nil {
		c := ceil(minR)
		ilo, flo = max(ilo, c), max(flo, c)
		nhi = min(nhi, floor(new(big.Rat).Neg(minR))-1)
	}
	if exMinR != nil {
		ilo = max(ilo, floor(exMinR)+1)
		flo = max(flo, ceil(exMinR))
		nhi = min(nhi, floor(new(big.Rat).Neg(exMinR))-1)
	}
	if maxR != nil {
		ihi = min(ihi, floor(maxR))
		fhi = min(fhi, floor(maxR)-1)
		nlo = max(nlo, ceil(new(big.Rat).Neg(maxR)))
	}
	if exMaxR != nil {
		ihi = min(ihi, ceil(exMaxR)-1)
		fhi = min(fhi, floor(exMaxR)-1)
		nlo = max(nlo, ceil(new(big.Rat).Neg(exMaxR)))
	}
	mult := int64(0)
	if m, err := rat("multipleOf"); err != nil {
		return nil, false, err
	} else if m != nil {
		if m.Sign() <= 0 {
			return nil, false, fmt.Errorf("%w: %s/multipleOf is not positive", ErrSchema, path)
		}
		p := m.Num()
		if !p.IsInt64() || p.Int64() > MaxMultipleOf {
			return nil, false, fmt.Errorf("%w: %s/multipleOf %s: the grammar enforces multiples of integers up to %d (a number's: of its numerator in lowest terms)",
				ErrUnsupported, path, m.RatString(), MaxMultipleOf)
		}
		mult = p.Int64()
	}
	var a nfa
	var alts []frag
	if ilo <= ihi {
		alts = append(alts, a.intRange(ilo, ihi))
	}
	if !integer && mult == 0 {
		frac := a.cat(a.bytes("."), a.cat(a.repeat(func() frag { return a.set(digits) }, 0, maxFracDigits-1), a.set(nonZero)))
		if flo <= fhi {
			alts = append(alts, a.cat(a.natRange(flo, fhi), frac))
		}
		if nlo <= nhi {
			frac2 := a.cat(a.bytes("."), a.cat(a.repeat(func() frag { return a.set(digits) }, 0, maxFracDigits-1), a.set(nonZero)))
			alts = append(alts, a.cat(a.bytes("-"), a.cat(a.natRange(nlo, nhi), frac2)))
		}
	}
	if len(alts) == 0 {
		return nil, false, fmt.Errorf("%w: %s: no %s meets the bounds", ErrSchema, path, map[bool]string{true: "integer", false: "number"}[integer])
	}
	d, err := a.determinize(a.alt(alts...))
	if err != nil {
		if errors.Is(err, errEmpty) {
			return nil, false, fmt.Errorf("%w: %s: no value meets the bounds", ErrSchema, path)
		}
		return nil, false, fmt.Errorf("%w at %s", err, path)
	}
	if mult > 1 {
		if d, err = intersect(d, remainderDFA(int(mult))); err != nil {
			if errors.Is(err, errEmpty) {
				return nil, false, fmt.Errorf("%w: %s: no multiple of %d meets the bounds", ErrSchema, path, mult)
			}
			return nil, false, fmt.Errorf("%w: multipleOf with the bounds at %s", err, path)
		}
	}
	return d, true, nil
}

var digits, nonZero = func() (byteSet, byteSet) {
	var d, nz byteSet
	d.add('0', '9')
	nz.add('1', '9')
	return d, nz
}()

func floor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return clampInt(q)
}

func ceil(r *big.Rat) int64 {
	q := new(big.Int).Neg(new(big.Int).Div(new(big.Int).Neg(r.Num()), r.Denom()))
	return clampInt(q)
}

// clampInt clamps q to ±(maxInt+1), outside every range that can be written.
func clampInt(q *big.Int) int64 {
	if q.Cmp(big.NewInt(maxInt+1)) > 0 {
		return maxInt + 1
	}
	if q.Cmp(big.NewInt(-maxInt-1)) < 0 {
		return -maxInt - 1
	}
	return q.Int64()
}

// intRange is a fragment of the integers lo..hi (|lo|, |hi| <= maxInt), written as
// JSON writes them (no leading zeros, no "-0").
func (a *nfa) intRange(lo, hi int64) frag {
	var alts []frag
	if hi >= 0 {
		alts = append(alts, a.natRange(max(lo, 0), hi))
	}
	if lo < 0 {
		// -hi' .. -lo' with hi' = -lo, lo' = max(1, -hi)
		alts = append(alts, a.cat(a.bytes("-"), a.natRange(max(1, -hi), -lo)))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return a.alt(alts...)
}

// natRange is a fragment of the natural numbers lo..hi (0 <= lo <= hi), by length.
func (a *nfa) natRange(lo, hi int64) frag {
	var alts []frag
	for n := len(strconv.FormatInt(lo, 10)); n <= len(strconv.FormatInt(hi, 10)); n++ {
		first := int64(1)
		for i := 1; i < n; i++ {
			first *= 10
		}
		if n == 1 {
			first = 0
		}
		last := first*10 - 1
		if n == 1 {
			last = 9
		}
		l, h := max(lo, first), min(hi, last)
		if l <= h {
			alts = append(alts, a.sameLen(strconv.FormatInt(l, 10), strconv.FormatInt(h, 10)))
		}
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return a.alt(alts...)
}

// sameLen is a fragment of the digit strings from l to h, of the same length.
func (a *nfa) sameLen(l, h string) frag {
	if l == "" {
		return a.empty()
	}
	if l[0] == h[0] {
		return a.cat(a.bytes(l[:1]), a.sameLen(l[1:], h[1:]))
	}
	rest := len(l) - 1
	any := func(lo, hi byte) frag {
		var s byteSet
		s.add(lo, hi)
		f := a.set(s)
		for i := 0; i < rest; i++ {
			f = a.cat(f, a.set(digits))
		}
		return f
	}
	if l[1:] == strings.Repeat("0", rest) && h[1:] == strings.Repeat("9", rest) {
		return any(l[0], h[0])
	}
	alts := []frag{a.cat(a.bytes(l[:1]), a.sameLen(l[1:], strings.Repeat("9", rest)))}
	if l[0]+1 <= h[0]-1 {
		alts = append(alts, any(l[0]+1, h[0]-1))
	}
	alts = append(alts, a.cat(a.bytes(h[:1]), a.sameLen(strings.Repeat("0", rest), h[1:])))
	return a.alt(alts...)
}

// remainderDFA is the automaton of the integer texts (an optional '-', digits) that
// are multiples of m: a state per remainder.
func remainderDFA(m int) *dfa {
	d := &dfa{states: make([]dstate, m+2)}
	var minus byteSet
	minus.add('-', '-')
	rem := func(r int) int32 { return int32(2 + r) }
	d.states[0].edges = append(d.states[0].edges, dedge{minus, 1})
	for _, from := range []int{0, 1} {
		for c := byte('0'); c <= '9'; c++ {
			var s byteSet
			s.add(c, c)
			d.states[from].edges = append(d.states[from].edges, dedge{s, rem(int(c-'0') % m)})
		}
	}
	for r := 0; r < m; r++ {
		for c := byte('0'); c <= '9'; c++ {
			var s byteSet
			s.add(c, c)
			d.states[rem(r)].edges = append(d.states[rem(r)].edges, dedge{s, rem((r*10 + int(c-'0')) % m)})
		}
	}
	d.states[rem(0)].final = true
	return d
}
