package registry

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is the in-process Store: one process alone, or several in one test. The
// zero value is ready to use; Now (nil: time.Now) is its clock.
type Memory struct {
	Now func() time.Time

	mu    sync.Mutex      // guards nodes
	nodes map[string]item // by node id
}

type item struct {
	n    Node
	gone time.Time // the store forgets n at gone (announce time + ttl)
}

func (m *Memory) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Announce records n until the earlier of n.Expires and ttl from now.
func (m *Memory) Announce(_ context.Context, n Node, ttl time.Duration) error {
	n.Models = slices.Clone(n.Models)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nodes == nil {
		m.nodes = map[string]item{}
	}
	m.nodes[n.ID] = item{n: n, gone: m.now().Add(ttl)}
	return nil
}

// Withdraw forgets node id.
func (m *Memory) Withdraw(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.nodes, id)
	return nil
}

// Nodes returns the announcements not yet forgotten, by id.
func (m *Memory) Nodes(context.Context) ([]Node, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Node, 0, len(m.nodes))
	for id, it := range m.nodes {
		if !it.gone.After(now) {
			delete(m.nodes, id)
			continue
		}
		out = append(out, it.n)
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
