package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors, matched with errors.Is.
var (
	// ErrNoMemory: a load does not fit its device's budget, even after unloading every
	// idle lease of lower priority. The error is a *NoMemoryError with the numbers; the
	// engine wraps it with engine.ErrNoMemory.
	ErrNoMemory = errors.New("lease: not enough device memory")
	// ErrNotHeld: a heartbeat or release for a lease that is gone (released, or
	// expired because its holder stopped beating): the holder must acquire again.
	ErrNotHeld = errors.New("lease: lease not held")
	ErrInvalid = errors.New("lease: invalid lease")
	// ErrRedis: the Redis store failed (unreachable, an error reply, a reply of the
	// wrong shape), so it made no decision about the lease; the error wraps Redis's.
	ErrRedis = errors.New("lease: redis")
)

// Lease is one holder's claim on bytes of a device's memory.
type Lease struct {
	Device   string        // "host", or "gpu:0", ...
	Holder   string        // unique per device: e.g. "model-id/replica@process"
	Bytes    int64         // weights + KV pool
	Priority int           // higher keeps its memory
	TTL      time.Duration // the lease expires TTL after its last heartbeat
	Idle     bool          // the holder serves nothing now and may be unloaded for a higher priority
	Expires  time.Time     // set by the store: last heartbeat + TTL
	Node     string        // set by the Redis store's List: the holding process's node id
}

func (l Lease) expired(now time.Time) bool { return !now.Before(l.Expires) }

func (l Lease) validate() error {
	if l.Device == "" || l.Holder == "" || l.Bytes < 0 || l.TTL <= 0 {
		return fmt.Errorf("%w: device %q holder %q bytes %d ttl %v", ErrInvalid, l.Device, l.Holder, l.Bytes, l.TTL)
	}
	return nil
}

// NoMemoryError is the error of a load that does not fit.
type NoMemoryError struct {
	Device      string
	Want        int64 // bytes asked for
	Budget      int64 // the device's budget
	Used        int64 // bytes of the live leases of other holders
	Reclaimable int64 // of those, bytes held idle at a lower priority
}

func (e *NoMemoryError) Error() string {
	return fmt.Sprintf("%v: %s needs %d bytes; budget %d, leased %d, of which %d idle at a lower priority",
		ErrNoMemory, e.Device, e.Want, e.Budget, e.Used, e.Reclaimable)
}

func (e *NoMemoryError) Unwrap() error { return ErrNoMemory }

// Store keeps the leases of the devices of one machine. An in-process Memory store
// serves one process; a Redis store (a sorted set per device scored by expiry, a hash
// per lease, Acquire as one script) serves several. All times are explicit.
type Store interface {
	// Acquire records l (its Expires becomes now + l.TTL) if the bytes of the
	// device's live leases, l's own earlier lease excluded, plus l.Bytes fit in
	// budget; otherwise it returns a *NoMemoryError and changes nothing.
	Acquire(ctx context.Context, now time.Time, l Lease, budget int64) (Lease, error)
	// Heartbeat extends a live lease to now + its TTL and records whether its holder
	// is idle; ErrNotHeld if the lease is gone.
	Heartbeat(ctx context.Context, now time.Time, device, holder string, idle bool) error
	// Release removes a lease; ErrNotHeld if it is gone.
	Release(ctx context.Context, device, holder string) error
	// List returns the live leases of a device, by holder.
	List(ctx context.Context, now time.Time, device string) ([]Lease, error)
	// Expire removes every lease expired at now and returns them.
	Expire(ctx context.Context, now time.Time) ([]Lease, error)
}

// Victims is the pure decision of a load that needs want.Bytes on a device of budget
// bytes whose live leases are leases (want's own earlier lease, if any, is ignored):
// nil when it fits; otherwise the idle leases of priority lower than want's to unload
// to make room (lowest priority first, then the largest, then by holder), trimmed of
// any it does not need; otherwise a *NoMemoryError.
func Victims(now time.Time, budget int64, leases []Lease, want Lease) ([]Lease, error) {
	var used, reclaimable int64
	var cands []Lease
	for _, l := range leases {
		if l.expired(now) || l.Device != want.Device || l.Holder == want.Holder {
			continue
		}
		used += l.Bytes
		if l.Idle && l.Priority < want.Priority {
			reclaimable += l.Bytes
			cands = append(cands, l)
		}
	}
	need := used + want.Bytes - budget // bytes to free
	if need <= 0 {
		return nil, nil
	}
	if reclaimable < need {
		return nil, &NoMemoryError{Device: want.Device, Want: want.Bytes, Budget: budget, Used: used, Reclaimable: reclaimable}
	}
	slices.SortFunc(cands, func(a, b Lease) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Holder, b.Holder))
	})
	var chosen []Lease
	var freed int64
	for _, l := range cands {
		if freed >= need {
			break
		}
		chosen = append(chosen, l)
		freed += l.Bytes
	}
	// Keep nobody unloaded for nothing: drop chosen leases, highest priority first,
	// while the rest still make room.
	for i := len(chosen) - 1; i >= 0; i-- {
		if freed-chosen[i].Bytes >= need {
			freed -= chosen[i].Bytes
			chosen = append(chosen[:i], chosen[i+1:]...)
		}
	}
	return chosen, nil
}

// Acquire leases want.Bytes on want.Device from store, unloading victims first when
// the load does not fit: unload is called for each victim (the owner unloads the idle
// model; for a holder in another process it asks that process to) and the victim's
// lease is released. It fails fast with a *NoMemoryError when even the victims would
// not make room.
func Acquire(ctx context.Context, store Store, now time.Time, budget int64, want Lease, unload func(Lease) error) (Lease, error) {
	if err := want.validate(); err != nil {
		return Lease{}, err
	}
	leases, err := store.List(ctx, now, want.Device)
	if err != nil {
		return Lease{}, err
	}
	victims, err := Victims(now, budget, leases, want)
	if err != nil {
		return Lease{}, err
	}
	for _, v := range victims {
		if err := unload(v); err != nil {
			return Lease{}, fmt.Errorf("lease: unloading %s for %s: %w", v.Holder, want.Holder, err)
		}
		if err := store.Release(ctx, v.Device, v.Holder); err != nil && !errors.Is(err, ErrNotHeld) {
			return Lease{}, err
		}
	}
	return store.Acquire(ctx, now, want, budget)
}
