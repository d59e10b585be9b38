package lease

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process Store. The zero value is ready; it is safe for concurrent
// use.
type Memory struct {
	mu      sync.Mutex
	devices map[string]map[string]Lease // guarded by mu: device → holder → lease
}

var _ Store = (*Memory)(nil)

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, now time.Time, l Lease, budget int64) (Lease, error) {
	if err := l.validate(); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.devices == nil {
		m.devices = map[string]map[string]Lease{}
	}
	dev := m.devices[l.Device]
	if dev == nil {
		dev = map[string]Lease{}
		m.devices[l.Device] = dev
	}
	var used int64
	for h, o := range dev {
		if o.expired(now) {
			delete(dev, h)
			continue
		}
		if h != l.Holder {
			used += o.Bytes
		}
	}
	if used+l.Bytes > budget {
		var reclaimable int64
		for h, o := range dev {
			if h != l.Holder && o.Idle && o.Priority < l.Priority {
				reclaimable += o.Bytes
			}
		}
		return Lease{}, &NoMemoryError{Device: l.Device, Want: l.Bytes, Budget: budget, Used: used, Reclaimable: reclaimable}
	}
	l.Expires = now.Add(l.TTL)
	dev[l.Holder] = l
	return l, nil
}

// Heartbeat implements Store.
func (m *Memory) Heartbeat(ctx context.Context, now time.Time, device, holder string, idle bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.devices[device][holder]
	if !ok || l.expired(now) {
		delete(m.devices[device], holder)
		return fmt.Errorf("%w: %s on %s", ErrNotHeld, holder, device)
	}
	l.Expires, l.Idle = now.Add(l.TTL), idle
	m.devices[device][holder] = l
	return nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, device, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.devices[device][holder]; !ok {
		return fmt.Errorf("%w: %s on %s", ErrNotHeld, holder, device)
	}
	delete(m.devices[device], holder)
	return nil
}

// List implements Store.
func (m *Memory) List(ctx context.Context, now time.Time, device string) ([]Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lease
	for _, l := range m.devices[device] {
		if !l.expired(now) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.Holder, b.Holder) })
	return out, nil
}

// Expire implements Store.
func (m *Memory) Expire(ctx context.Context, now time.Time) ([]Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lease
	for _, dev := range m.devices {
		for h, l := range dev {
			if l.expired(now) {
				out = append(out, l)
				delete(dev, h)
			}
		}
	}
	slices.SortFunc(out, func(a, b Lease) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Holder, b.Holder))
	})
	return out, nil
}
