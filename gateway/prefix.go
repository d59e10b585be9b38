package gateway

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/lmlite/lmlite/policies"
)

// Prefix-warm routing: a gateway forwarding a request cannot tokenize it for a model
// it does not hold, so the prefix cache's own block keys (kvcache: a hash chain over
// the salt and the tokens) are out of its reach. Every gateway can compute the prefix
// key instead: a hash of the request's cache salt (the tenant, unless its plan shares
// the prefix cache) and the head of its prompt as text. A process announces the keys
// of the prompts it served lately on each model (registry.Model.Warm), and
// registry.Pick prefers a process holding the request's key: the same head of text
// under the same salt renders, on that model, to the same leading tokens, whose
// blocks that process's cache holds unless it has evicted them since.

// prefixBytes is the head of the prompt the key covers. A shorter prompt has no key:
// it is a block or two of the cache, not worth a hop.
const prefixBytes = 256

// Warm keys: each model keeps the keys of the prompts served within warmTTL, at most
// warmMax (the most recent).
const (
	warmTTL = 10 * time.Minute
	warmMax = 256
)

// prefixKey is the request's prefix key (0: the prompt is shorter than prefixBytes):
// FNV-1a over the salt, the kind of request and the first prefixBytes bytes of the
// prompt (chat: each message's role and text, separated by zero bytes). A request
// with a prompt_cache_key has that key's cacheKeyHash instead: the requests of a
// tenant that share a key go to the process that served the key last, whatever the
// length of their prompts.
func prefixKey(pol *policies.Policy, in *input) uint64 {
	if in.p != nil && in.p.PromptCacheKey != "" {
		return cacheKeyHash(pol.Tenant, in.p.PromptCacheKey)
	}
	salt := pol.Tenant
	if pol.SharePrefix {
		salt = ""
	}
	h := fnv{offset}
	h.str("lmlite/prefix\x00")
	h.str(salt)
	h.byte(0)
	h.byte(byte(in.kind))
	n := 0 // bytes of the prompt hashed
	add := func(s string) {
		if n+len(s) > prefixBytes {
			s = s[:prefixBytes-n]
		}
		h.str(s)
		n += len(s)
	}
	if in.kind == kindChat {
		for _, m := range in.msgs {
			if add(m.Role); n < prefixBytes {
				add("\x00")
			}
			if add(m.Content); n < prefixBytes {
				add("\x00")
			}
			if n >= prefixBytes {
				break
			}
		}
	} else {
		add(in.prompt)
	}
	if n < prefixBytes {
		return 0
	}
	return max(h.h, 1)
}

// cacheKeyHash is the affinity of a tenant's prompt_cache_key (never 0): the tenant
// is always hashed with it, whether or not its plan shares the prefix cache, so no
// two tenants' keys share an affinity by their text. It keeps a key's requests on one
// replica of a model (engine.Request.Affinity) and, with peers, on one process
// (prefixKey).
func cacheKeyHash(tenant, key string) uint64 {
	h := sha256.New()
	h.Write([]byte("lmlite/prompt_cache_key\x00"))
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return max(binary.LittleEndian.Uint64(h.Sum(sum[:0])), 1)
}

const (
	offset = 14695981039346656037
	prime  = 1099511628211
)

type fnv struct{ h uint64 }

func (f *fnv) byte(c byte) { f.h = (f.h ^ uint64(c)) * prime }
func (f *fnv) str(s string) {
	for i := 0; i < len(s); i++ {
		f.byte(s[i])
	}
}

// warmKeys is the prefix keys this process served lately, by model.
type warmKeys struct {
	mu sync.Mutex
	by map[string]map[uint64]time.Time // model → key → when last served
}

// add notes that the model served a prompt with key k at now.
func (w *warmKeys) add(model string, k uint64, now time.Time) {
	if k == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by == nil {
		w.by = map[string]map[uint64]time.Time{}
	}
	m := w.by[model]
	if m == nil {
		m = map[uint64]time.Time{}
		w.by[model] = m
	}
	if _, ok := m[k]; !ok && len(m) >= warmMax {
		var oldest uint64
		var at time.Time
		for key, t := range m {
			if at.IsZero() || t.Before(at) {
				oldest, at = key, t
			}
		}
		delete(m, oldest)
	}
	m[k] = now
}

// has reports whether the model served a prompt with key k within warmTTL of now.
func (w *warmKeys) has(model string, k uint64, now time.Time) bool {
	if k == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.by[model][k]
	return ok && now.Sub(t) < warmTTL
}

// list returns the model's keys served within warmTTL of now, sorted, forgetting
// the older ones.
func (w *warmKeys) list(model string, now time.Time) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.by[model]
	var out []uint64
	for k, t := range m {
		if now.Sub(t) >= warmTTL {
			delete(m, k)
			continue
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// drop forgets the model's keys (it unloaded: its cache is gone).
func (w *warmKeys) drop(model string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.by, model)
}
