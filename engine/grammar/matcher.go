package grammar

import "encoding/binary"

// frame is one open value on a matcher's stack: its node, where in it the output is
// (phase), and a counter, an auxiliary value and a mask whose meaning depends on the
// node's kind. A stack of frames is a pushdown automaton's stack; its bytes are the
// whole state of one alternative, so equal stacks accept the same continuations.
type frame struct {
	node  int32
	phase uint8
	n     int32  // properties: the next position; arrays: items; strings: characters; numbers: digits
	aux   int32  // a trie node, UTF-8 bytes pending, hex digits pending
	m     uint64 // formats: the live alternatives
}

// Phases.
const (
	pStart uint8 = iota
	// objects
	oFirst     // after '{'
	oKeyNext   // after ','
	oKeyNextSp // after ", "
	oKey       // inside a declared key (aux: the key trie's node)
	oColon     // after a key
	oValue     // after ':'
	oValueSp   // after ": "
	oAfter     // after a value
	aFirst     // arrays: after '['
	aNext      // after ','
	aNextSp    // after ", "
	aAfter     // after an item
	sBody      // strings: inside
	sEsc       // after '\'
	sHex       // inside \uXXXX (aux: digits left)
	sUTF       // inside a multi-byte character (aux: bytes left<<16 | lo<<8 | hi of the next)
	nSign      // numbers: after '-'
	nZero      // after a leading 0
	nInt       // in the integer digits (n: count)
	nFrac0     // after '.'
	nFrac      // in the fraction digits
	nExp0      // after 'e'
	nExpSign   // after 'e+' or 'e-'
	nExp       // in the exponent digits
)

type action uint8

const (
	actReject    action = iota
	actConsume          // the byte is consumed, the frame stays
	actPop              // the byte is consumed and completes the frame
	actPopRefeed        // the frame was complete before the byte: pop it, feed the byte to its parent
	actPush             // push the child node and feed it the byte (the frame stays beneath)
	actReplace          // replace the frame by the child node and feed it the byte
)

// initFrame is the frame of a node about to be entered.
func (g *Grammar) initFrame(n int32) frame {
	f := frame{node: n}
	switch nd := &g.nodes[n]; nd.kind {
	case kLiteral:
		f.aux = nd.trie
	}
	return f
}

// step feeds byte c to frame f (depth: the stack's height) and says what happens.
func (g *Grammar) step(f *frame, c byte, depth int) (action, int32) {
	nd := &g.nodes[f.node]
	switch nd.kind {
	case kAny:
		switch {
		case c == '{':
			if depth > MaxDepth {
				return actReject, 0
			}
			return actReplace, g.anyObj
		case c == '[':
			if depth > MaxDepth {
				return actReject, 0
			}
			return actReplace, g.anyArr
		case c == '"':
			return actReplace, g.str
		case c == '-' || c >= '0' && c <= '9':
			return actReplace, g.num
		case c == 't' || c == 'f' || c == 'n':
			return actReplace, g.lits
		}
		return actReject, 0
	case kLiteral:
		return g.stepTrie(f, c)
	case kObject:
		return g.stepObject(f, nd, c)
	case kArray:
		return stepArray(f, nd, c)
	case kString:
		return stepString(f, nd, c)
	case kFormat:
		return stepFormat(f, nd, c)
	case kNumber, kInteger:
		return stepNumber(f, nd.kind == kInteger, c)
	case kDFA:
		return g.stepDFA(f, nd, c)
	}
	return actReject, 0
}

func (g *Grammar) stepTrie(f *frame, c byte) (action, int32) {
	t := &g.tries[f.aux]
	for _, e := range t.edges {
		if e.b == c {
			f.aux = e.to
			if to := &g.tries[e.to]; to.val >= 0 && len(to.edges) == 0 {
				return actPop, 0
			}
			return actConsume, 0
		}
	}
	if t.val >= 0 {
		return actPopRefeed, 0
	}
	return actReject, 0
}

func (g *Grammar) stepObject(f *frame, nd *node, c byte) (action, int32) {
	switch f.phase {
	case pStart:
		if c == '{' {
			f.phase = oFirst
			return actConsume, 0
		}
	case oFirst, oKeyNext, oKeyNextSp:
		if c == ' ' && f.phase == oKeyNext {
			f.phase = oKeyNextSp
			return actConsume, 0
		}
		if c == '}' && f.phase == oFirst && (nd.props == nil || nd.canClose[f.n]) {
			return actPop, 0
		}
		if c == '"' {
			if nd.props == nil {
				f.phase = oColon
				return actPush, g.str
			}
			if t := nd.keyTrie[f.n]; t >= 0 {
				f.phase, f.aux = oKey, t
				return actConsume, 0
			}
		}
	case oKey:
		for _, e := range g.tries[f.aux].edges {
			if e.b == c {
				f.aux = e.to
				if v := g.tries[e.to].val; v >= 0 {
					f.phase, f.n = oColon, v
				}
				return actConsume, 0
			}
		}
	case oColon:
		if c == ':' {
			f.phase = oValue
			return actConsume, 0
		}
	case oValue, oValueSp:
		if c == ' ' && f.phase == oValue {
			f.phase = oValueSp
			return actConsume, 0
		}
		f.phase = oAfter
		if nd.props == nil {
			return actPush, nd.addl
		}
		v := nd.props[f.n]
		f.n++
		return actPush, v
	case oAfter:
		if c == ',' && (nd.props == nil || nd.keyTrie[f.n] >= 0) {
			f.phase = oKeyNext
			return actConsume, 0
		}
		if c == '}' && (nd.props == nil || nd.canClose[f.n]) {
			return actPop, 0
		}
	}
	return actReject, 0
}

func stepArray(f *frame, nd *node, c byte) (action, int32) {
	switch f.phase {
	case pStart:
		if c == '[' {
			f.phase = aFirst
			return actConsume, 0
		}
	case aFirst:
		if c == ']' {
			if nd.minItems == 0 {
				return actPop, 0
			}
			return actReject, 0
		}
		if nd.maxItems == 0 {
			return actReject, 0
		}
		f.phase, f.n = aAfter, 1
		return actPush, nd.items
	case aNext, aNextSp:
		if c == ' ' && f.phase == aNext {
			f.phase = aNextSp
			return actConsume, 0
		}
		f.phase = aAfter
		if nd.maxItems >= 0 || int(f.n) < nd.minItems {
			f.n++ // without an upper bound, counting past minItems changes nothing: the state stays the same
		}
		return actPush, nd.items
	case aAfter:
		if c == ',' && (nd.maxItems < 0 || int(f.n) < nd.maxItems) {
			f.phase = aNext
			return actConsume, 0
		}
		if c == ']' && int(f.n) >= nd.minItems {
			return actPop, 0
		}
	}
	return actReject, 0
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func stepString(f *frame, nd *node, c byte) (action, int32) {
	room := nd.maxLen < 0 || int(f.n) < nd.maxLen
	// Count characters only while a bound can still tell them apart, so that a free
	// string's state stays the same (and its masks cached) however long it grows.
	count := int32(0)
	if nd.maxLen >= 0 || int(f.n) < nd.minLen {
		count = 1
	}
	switch f.phase {
	case pStart:
		if c == '"' {
			f.phase = sBody
			return actConsume, 0
		}
	case sBody:
		switch {
		case c == '"':
			if int(f.n) >= nd.minLen {
				return actPop, 0
			}
		case c < 0x20 || c == 0x7f:
			// Control characters must be escaped; DEL is refused too (invisible).
		case !room:
		case c == '\\':
			f.phase = sEsc
			f.n += count
			return actConsume, 0
		case c < 0x80:
			f.n += count
			return actConsume, 0
		default:
			// The first byte of a multi-byte character: how many follow, and the
			// range of the next (UTF-8 without overlongs or surrogates).
			var left, lo, hi int32
			switch {
			case c >= 0xC2 && c <= 0xDF:
				left, lo, hi = 1, 0x80, 0xBF
			case c == 0xE0:
				left, lo, hi = 2, 0xA0, 0xBF
			case c >= 0xE1 && c <= 0xEC || c == 0xEE || c == 0xEF:
				left, lo, hi = 2, 0x80, 0xBF
			case c == 0xED:
				left, lo, hi = 2, 0x80, 0x9F
			case c == 0xF0:
				left, lo, hi = 3, 0x90, 0xBF
			case c >= 0xF1 && c <= 0xF3:
				left, lo, hi = 3, 0x80, 0xBF
			case c == 0xF4:
				left, lo, hi = 3, 0x80, 0x8F
			default:
				return actReject, 0
			}
			f.phase, f.aux = sUTF, left<<16|lo<<8|hi
			f.n += count
			return actConsume, 0
		}
	case sEsc:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.phase = sBody
			return actConsume, 0
		case 'u':
			f.phase, f.aux = sHex, 4
			return actConsume, 0
		}
	case sHex:
		// No surrogates (\uD800-\uDFFF): a lone one is not a character, and a pair
		// would count as two against maxLength.
		if isHex(c) && !(f.aux == 4 && (c == 'd' || c == 'D')) {
			f.aux--
			if f.aux == 0 {
				f.phase = sBody
			}
			return actConsume, 0
		}
	case sUTF:
		left, lo, hi := f.aux>>16, byte(f.aux>>8), byte(f.aux)
		if c >= lo && c <= hi {
			left--
			if left == 0 {
				f.phase = sBody
			} else {
				f.aux = left<<16 | 0x80<<8 | 0xBF
			}
			return actConsume, 0
		}
	}
	return actReject, 0
}

func stepFormat(f *frame, nd *node, c byte) (action, int32) {
	switch f.phase {
	case pStart:
		if c == '"' {
			f.phase = sBody
			f.m = 1<<len(nd.alts) - 1
			if len(nd.alts) == 64 {
				f.m = ^uint64(0)
			}
			return actConsume, 0
		}
	case sBody:
		var live uint64
		for i, alt := range nd.alts {
			if f.m&(1<<i) == 0 {
				continue
			}
			if c == '"' && int(f.n) == len(alt) {
				return actPop, 0
			}
			if int(f.n) < len(alt) && alt[f.n].has(c) {
				live |= 1 << i
			}
		}
		if live != 0 {
			f.m = live
			f.n++
			return actConsume, 0
		}
	}
	return actReject, 0
}

func stepNumber(f *frame, integer bool, c byte) (action, int32) {
	digit := c >= '0' && c <= '9'
	switch f.phase {
	case pStart, nSign:
		switch {
		case c == '-' && f.phase == pStart:
			f.phase = nSign
			return actConsume, 0
		case c == '0':
			f.phase = nZero
			return actConsume, 0
		case digit:
			f.phase, f.n = nInt, 1
			return actConsume, 0
		}
		return actReject, 0
	case nZero, nInt:
		if digit && f.phase == nInt {
			if f.n >= maxIntDigits {
				return actReject, 0
			}
			f.n++
			return actConsume, 0
		}
		if !integer && c == '.' {
			f.phase = nFrac0
			return actConsume, 0
		}
		if !integer && (c == 'e' || c == 'E') {
			f.phase = nExp0
			return actConsume, 0
		}
		if digit {
			return actReject, 0 // no leading zeros
		}
		return actPopRefeed, 0
	case nFrac0:
		if digit {
			f.phase, f.n = nFrac, 1
			return actConsume, 0
		}
		return actReject, 0
	case nFrac:
		if digit {
			if f.n >= maxFracDigits {
				return actReject, 0
			}
			f.n++
			return actConsume, 0
		}
		if c == 'e' || c == 'E' {
			f.phase = nExp0
			return actConsume, 0
		}
		return actPopRefeed, 0
	case nExp0:
		if c == '+' || c == '-' {
			f.phase = nExpSign
			return actConsume, 0
		}
		fallthrough
	case nExpSign:
		if digit {
			f.phase, f.n = nExp, 1
			return actConsume, 0
		}
		return actReject, 0
	case nExp:
		if digit {
			if f.n >= maxExpDigits {
				return actReject, 0
			}
			f.n++
			return actConsume, 0
		}
		return actPopRefeed, 0
	}
	return actReject, 0
}

// final reports whether frame f may end where it is (without another byte).
func (g *Grammar) final(f *frame) bool {
	switch g.nodes[f.node].kind {
	case kLiteral:
		return g.tries[f.aux].val >= 0
	case kDFA:
		return g.dfas[g.nodes[f.node].dfa].states[f.aux].final
	case kNumber, kInteger:
		switch f.phase {
		case nZero, nInt, nFrac, nExp:
			return true
		}
	}
	return false
}

// state is a matcher's set of live alternatives, each a stack of frames. A stack
// of height 0 is a finished output.
type state struct {
	stacks [][]frame
}

// Matcher follows one output through a Grammar, byte by byte or token by token. It
// reuses its memory: once grown, feeding bytes and looking up cached masks does not
// allocate. A Matcher is for one goroutine.
type Matcher struct {
	g     *Grammar
	v     *Vocab
	st    state
	next  [][]frame
	free  [][]frame
	pre   int32 // bytes of the prefix written so far; len(prefix)+1 once the value opened
	post  int32 // bytes of the suffix written (once the value finished)
	ended bool  // an end-of-generation token was accepted
	dead  bool  // a byte was refused: the matcher accepts nothing more

	// Mask computation (see vocab.go).
	levels []*Matcher
	key    []byte
}

// NewMatcher returns a matcher at the start of g's output, over no vocabulary (bytes
// only: Feed, Accepting, Done). Use Vocab.NewMatcher for token masks.
func NewMatcher(g *Grammar) *Matcher {
	m := &Matcher{g: g}
	m.reset()
	return m
}

func (m *Matcher) reset() {
	m.st.stacks = m.st.stacks[:0]
	m.pre, m.post, m.ended, m.dead = 0, 0, false, false
	if len(m.g.prefix) == 0 {
		m.open()
	}
}

// open starts the value: one stack holding the root (forked if it is an anyOf).
func (m *Matcher) open() {
	m.pre = int32(len(m.g.prefix)) + 1
	m.st.stacks = m.expand(m.st.stacks[:0], m.alloc(), m.g.root, 0)
}

// expand pushes node n onto s, forking s for each alternative of an anyOf. depth
// counts the calls above it: past maxPushDepth the alternative is dropped, so that no
// grammar can recurse without bound (compiled anyOfs are flat: see flatten).
func (m *Matcher) expand(out [][]frame, s []frame, n int32, depth int) [][]frame {
	nd := &m.g.nodes[n]
	if depth > maxPushDepth {
		m.release(s)
		return out
	}
	if nd.kind == kAnyOf {
		for i, alt := range nd.anyOf {
			t := s
			if i < len(nd.anyOf)-1 {
				t = m.clone(s)
			}
			out = m.expand(out, t, alt, depth+1)
		}
		return out
	}
	if len(out) >= maxStacks {
		m.release(s)
		return out
	}
	return append(out, append(s, m.g.initFrame(n)))
}

func (m *Matcher) alloc() []frame {
	if k := len(m.free); k > 0 {
		s := m.free[k-1]
		m.free = m.free[:k-1]
		return s[:0]
	}
	return make([]frame, 0, 8)
}

func (m *Matcher) release(s []frame) { m.free = append(m.free, s) }

func (m *Matcher) clone(s []frame) []frame { return append(m.alloc(), s...) }

// Feed advances the matcher by one byte and reports whether the grammar allows it.
// After a refused byte the matcher is dead: it accepts nothing more.
func (m *Matcher) Feed(c byte) bool {
	if m.dead || m.ended {
		return false
	}
	g := m.g
	if m.pre <= int32(len(g.prefix)) {
		if g.prefix[m.pre] != c {
			m.dead = true
			return false
		}
		m.pre++
		if m.pre == int32(len(g.prefix)) {
			m.open()
		}
		return true
	}
	if m.post > 0 || m.valueDone() && len(g.suffix) > 0 && m.suffixStarts(c) {
		if m.post == 0 {
			// The value is complete and the suffix begins: settle on the finished stack.
			m.st.stacks = m.st.stacks[:0]
		}
		if int(m.post) >= len(g.suffix) || g.suffix[m.post] != c {
			m.dead = true
			return false
		}
		m.post++
		return true
	}
	next := m.next[:0]
	for _, s := range m.st.stacks {
		next = m.feedStack(next, s, c, 0)
	}
	m.st.stacks, m.next = next, m.st.stacks[:0]
	if len(m.st.stacks) == 0 {
		m.dead = true
		return false
	}
	return true
}

// valueDone reports whether the value may end here (some alternative is complete or
// only holds frames that may end).
func (m *Matcher) valueDone() bool {
	for _, s := range m.st.stacks {
		ok := true
		for i := range s {
			if !m.g.final(&s[i]) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// suffixStarts reports whether c, the suffix's first byte, cannot continue the value:
// then it starts the suffix. (Suffixes start with markup that JSON cannot continue
// with, such as '<' or a newline.)
func (m *Matcher) suffixStarts(c byte) bool {
	if m.g.suffix[0] != c {
		return false
	}
	for _, s := range m.st.stacks {
		if len(s) == 0 {
			continue
		}
		f := s[len(s)-1]
		if a, _ := m.g.step(&f, c, len(s)); a != actReject && a != actPopRefeed {
			return false
		}
	}
	return true
}

// feedStack feeds c to stack s (which it owns) and appends what survives to out.
// depth counts the pushes of this byte so far (see expand).
func (m *Matcher) feedStack(out [][]frame, s []frame, c byte, depth int) [][]frame {
	for {
		if len(s) == 0 {
			m.release(s)
			return out
		}
		top := &s[len(s)-1]
		act, child := m.g.step(top, c, len(s))
		switch act {
		case actConsume:
			return append(out, s)
		case actPop:
			return append(out, s[:len(s)-1])
		case actPopRefeed:
			s = s[:len(s)-1]
		case actPush, actReplace:
			if act == actReplace {
				s = s[:len(s)-1]
			}
			return m.pushFeed(out, s, child, c, depth+1)
		default:
			m.release(s)
			return out
		}
	}
}

// pushFeed pushes node n onto s (forking at an anyOf) and feeds c to the new top.
func (m *Matcher) pushFeed(out [][]frame, s []frame, n int32, c byte, depth int) [][]frame {
	nd := &m.g.nodes[n]
	if depth > maxPushDepth {
		m.release(s)
		return out
	}
	if nd.kind == kAnyOf {
		for i, alt := range nd.anyOf {
			t := s
			if i < len(nd.anyOf)-1 {
				t = m.clone(s)
			}
			out = m.pushFeed(out, t, alt, c, depth+1)
		}
		return out
	}
	if len(out) >= maxStacks {
		m.release(s)
		return out
	}
	return m.feedStack(out, append(s, m.g.initFrame(n)), c, depth)
}

// Accepting reports whether the output may end here: the value is complete (or may
// end, as a number may) and the suffix written.
func (m *Matcher) Accepting() bool {
	if m.dead {
		return false
	}
	if m.pre <= int32(len(m.g.prefix)) {
		return false
	}
	if len(m.g.suffix) > 0 {
		return int(m.post) == len(m.g.suffix)
	}
	return m.valueDone()
}

// Done reports whether the output is complete and nothing may follow: the end of
// generation is the only continuation.
func (m *Matcher) Done() bool {
	if m.dead || m.ended {
		return true
	}
	if m.pre <= int32(len(m.g.prefix)) {
		return false
	}
	if len(m.g.suffix) > 0 {
		return int(m.post) == len(m.g.suffix)
	}
	for _, s := range m.st.stacks {
		if len(s) > 0 {
			return false
		}
	}
	return true
}

// Dead reports whether the matcher refused a byte.
func (m *Matcher) Dead() bool { return m.dead }

// copyFrom makes m the same state as src, reusing m's memory.
func (m *Matcher) copyFrom(src *Matcher) {
	for _, s := range m.st.stacks {
		m.release(s)
	}
	m.st.stacks = m.st.stacks[:0]
	for _, s := range src.st.stacks {
		m.st.stacks = append(m.st.stacks, m.clone(s))
	}
	m.pre, m.post, m.ended, m.dead = src.pre, src.post, src.ended, src.dead
}

// appendKey appends an encoding of the matcher's state: equal encodings accept the
// same continuations.
func (m *Matcher) appendKey(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(m.pre))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.post))
	for _, s := range m.st.stacks {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
		for _, f := range s {
			b = binary.LittleEndian.AppendUint32(b, uint32(f.node))
			b = append(b, f.phase)
			b = binary.LittleEndian.AppendUint32(b, uint32(f.n))
			b = binary.LittleEndian.AppendUint32(b, uint32(f.aux))
			b = binary.LittleEndian.AppendUint64(b, f.m)
		}
	}
	return b
}
