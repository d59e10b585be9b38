package spec

// Pool is a model replica's per-tenant n-gram pool (Config.Pool): the outputs of a
// tenant's recent requests, from which its later requests draft (Lookup, as prompt
// lookup does over a sequence's own text), so that a tenant whose requests repeat
// each other (templated answers, code in a house style) drafts from its history.
// Each tenant has its own tokens: one tenant's text never drafts for another (no
// lookup reads another tenant's tokens). It is bounded: a tenant keeps its last
// PoolTokens output tokens, and the pool its MaxTenants most recently used tenants
// (the least recently used one is dropped for a new one), so it holds at most
// MaxTenants × PoolTokens tokens (4 bytes each: 1 MiB with the defaults). A request
// without a tenant ("") neither adds to nor drafts from it. Not safe for concurrent
// use: the replica's loop owns it.
type Pool struct {
	tokens, tenants int
	by              map[string]*tenantNGrams
	clock           uint64
}

type tenantNGrams struct {
	toks []int32 // outputs, each followed by sep; at most the pool's tokens
	used uint64  // the pool's clock at its last use
}

// sep ends each output in a tenant's tokens, so that no n-gram spans two requests
// (no token is negative).
const sep = -1

// Pool's default bounds.
const (
	PoolTokens = 4096
	MaxTenants = 64
)

// NewPool is an empty pool keeping tokens output tokens per tenant for at most
// tenants tenants (0: the defaults).
func NewPool(tokens, tenants int) *Pool {
	if tokens <= 0 {
		tokens = PoolTokens
	}
	if tenants <= 0 {
		tenants = MaxTenants
	}
	return &Pool{tokens: tokens, tenants: tenants, by: map[string]*tenantNGrams{}}
}

// Add records out, the output of a finished request of tenant, keeping the tenant's
// last tokens only (its oldest outputs go first).
func (p *Pool) Add(tenant string, out []int32) {
	if tenant == "" || len(out) < MinNGram {
		return
	}
	t := p.tenant(tenant, true)
	if len(out)+1 > p.tokens {
		out = out[len(out)+1-p.tokens:]
	}
	if drop := len(t.toks) + len(out) + 1 - p.tokens; drop > 0 {
		t.toks = append(t.toks[:0], t.toks[drop:]...)
	}
	t.toks = append(append(t.toks, out...), sep)
}

// Lookup appends to dst up to k tokens that followed the most recent occurrence, in
// tenant's pool, of seq's last n tokens (n from MaxNGram down to MinNGram: the
// longest that occurs wins), up to the end of that output; dst is unchanged when
// none occurs. It reads tenant's tokens only.
func (p *Pool) Lookup(dst []int32, tenant string, seq []int32, k int) []int32 {
	if tenant == "" || k <= 0 {
		return dst
	}
	t := p.tenant(tenant, false)
	if t == nil {
		return dst
	}
	for n := min(MaxNGram, len(seq)); n >= MinNGram; n-- {
		key := seq[len(seq)-n:]
		for i := len(t.toks) - n - 1; i >= 0; i-- { // a token follows: at most sep
			if t.toks[i] != key[0] || !equal(t.toks[i:i+n], key) {
				continue
			}
			follow := t.toks[i+n:]
			for j, tok := range follow[:min(k, len(follow))] {
				if tok == sep {
					follow = follow[:j]
					break
				}
			}
			return append(dst, follow[:min(k, len(follow))]...)
		}
	}
	return dst
}

// Size is the tokens the pool holds, and its tenants.
func (p *Pool) Size() (tokens, tenants int) {
	for _, t := range p.by {
		tokens += len(t.toks)
	}
	return tokens, len(p.by)
}

// tenant is tenant's tokens, marked used; with add, made (dropping the least
// recently used tenant when the pool is full), else nil if it has none.
func (p *Pool) tenant(tenant string, add bool) *tenantNGrams {
	p.clock++
	t := p.by[tenant]
	if t == nil && add {
		if len(p.by) >= p.tenants {
			var oldest string
			for id, o := range p.by {
				if oldest == "" || o.used < p.by[oldest].used {
					oldest = id
				}
			}
			delete(p.by, oldest)
		}
		t = &tenantNGrams{}
		p.by[tenant] = t
	}
	if t != nil {
		t.used = p.clock
	}
	return t
}
