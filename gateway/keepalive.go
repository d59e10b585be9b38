package gateway

import (
	"math"
	"sync"
	"time"
)

// A request's "lmlite": {"keep_alive": D} says how long its model should stay loaded
// once the request ends. The engine honours whatever it is given, and the last
// request to end on a model sets it (engine.Request.KeepAlive); the gateway decides
// what it is given, so that no tenant can unload what another uses:
//
//   - longer than the model's idle_timeout: up to max_keep_alive (0: no longer);
//   - shorter: only for a plan with allow_short_keep_alive (else ignored), and not
//     below min_keep_alive;
//   - never shorter than what other tenants' uses of the model still keep it loaded
//     for: each use keeps it for what its own request decided, counted from its end
//     (keepAlives). A request without keep_alive passes the longest of that and the
//     idle timeout, so a request of another tenant cannot cut short an extension.
//
// A shorter keep_alive thus affects only its tenant's own use. One case is left: a
// request of another tenant that starts after a shortening request was submitted and
// ends before it ends is not seen by it; the model then stays min_keep_alive after
// that request rather than its idle timeout.

// forever is a stay without end (idle_timeout < 0: never unloaded for idleness).
const forever = time.Duration(math.MaxInt64)

// keepAsk is what decideKeepAlive decides from.
type keepAsk struct {
	Given  bool          // the request has lmlite.keep_alive
	Asked  time.Duration // its value (≥ 0)
	Idle   time.Duration // the model's idle timeout (forever: never)
	Max    time.Duration // max_keep_alive; 0: no longer than Idle
	Min    time.Duration // min_keep_alive
	Short  bool          // the plan allows a shorter keep_alive
	Others time.Duration // how long other tenants' uses still keep the model (0: none)
}

// decideKeepAlive returns how long the request's own use keeps its model once it
// ends (own: what other tenants' requests will count it for) and the value for
// engine.Request.KeepAlive (0: the model's idle timeout).
func decideKeepAlive(a keepAsk) (own, eng time.Duration) {
	own = a.Idle
	if a.Given {
		switch {
		case a.Asked > a.Idle:
			own = min(a.Asked, max(a.Max, a.Idle))
		case a.Asked < a.Idle && a.Short:
			own = min(max(a.Asked, a.Min), a.Idle)
		}
	}
	k := max(own, a.Others)
	if k == a.Idle {
		return own, 0
	}
	return own, max(k, time.Nanosecond)
}

// keepAlives remembers, per model, until when each tenant's last use keeps it
// loaded, and each tenant's requests in flight on it, for decideKeepAlive's Others.
// Entries past their time with nothing in flight are dropped when the model is next
// used, so it holds at most the tenants that used a model recently.
type keepAlives struct {
	mu   sync.Mutex // guards uses
	uses map[string]map[string]*keepUse
}

// keepUse is one tenant's use of one model.
type keepUse struct {
	until    time.Time     // its last request's end plus its own stay
	always   bool          // that stay is forever
	inFlight int           // its requests in flight
	pending  time.Duration // the longest own stay of those in flight
}

// begin notes that a request of tenant starts on model at now and returns how long
// the other tenants' uses keep the model from now: the rest of each one's stay, or
// the whole own stay of a request in flight.
func (k *keepAlives) begin(model, tenant string, now time.Time, own time.Duration) (others time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.uses == nil {
		k.uses = map[string]map[string]*keepUse{}
	}
	m := k.uses[model]
	if m == nil {
		m = map[string]*keepUse{}
		k.uses[model] = m
	}
	for t, u := range m {
		left := max(u.until.Sub(now), 0)
		if u.always {
			left = forever
		}
		if left == 0 && u.inFlight == 0 {
			delete(m, t)
			continue
		}
		if t == tenant {
			continue
		}
		others = max(others, left)
		if u.inFlight > 0 {
			others = max(others, u.pending)
		}
	}
	u := m[tenant]
	if u == nil {
		u = &keepUse{}
		m[tenant] = u
	}
	if u.inFlight == 0 {
		u.pending = 0
	}
	u.inFlight++
	u.pending = max(u.pending, own)
	return others
}

// end notes that a request begun with own ended at now (done: it ran; else it was
// refused before running and leaves the tenant's stay as it was).
func (k *keepAlives) end(model, tenant string, now time.Time, own time.Duration, done bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	u := k.uses[model][tenant]
	if u == nil {
		return
	}
	u.inFlight--
	if !done {
		return
	}
	u.until, u.always = now.Add(min(own, 100*365*24*time.Hour)), own == forever
}
