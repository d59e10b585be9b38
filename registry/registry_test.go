package registry

import (
	"context"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func node(id string, inFlight int64, expires time.Time, models ...Model) Node {
	return Node{ID: id, Addr: "http://" + id, InFlight: inFlight, Expires: expires, Models: models}
}

func TestPick(t *testing.T) {
	live, dead := t0.Add(time.Second), t0
	m := func(state string) Model { return Model{ID: "m", State: state} }
	cases := []struct {
		name, local string
		nodes       []Node
		skip        []string
		want        Where
		node        string
	}{
		{"ready here", StateReady, []Node{node("b", 0, live, m(StateReady))}, nil, Local, ""},
		{"loading here", StateLoading, []Node{node("b", 0, live, m(StateReady))}, nil, Local, ""},
		{"unloaded here, ready there", StateUnloaded, []Node{node("b", 0, live, m(StateReady))}, nil, Forward, "b"},
		{"unloaded here, loading there: load here", StateUnloaded, []Node{node("b", 0, live, m(StateLoading))}, nil, Local, ""},
		{"unloaded here, unloaded there", StateUnloaded, []Node{node("b", 0, live, m(StateUnloaded))}, nil, Local, ""},
		{"failed here, unloaded there", StateFailed, []Node{node("b", 0, live, m(StateUnloaded))}, nil, Forward, "b"},
		{"failed here, failed there", StateFailed, []Node{node("b", 0, live, m(StateFailed))}, nil, Local, ""},
		{"not here, nowhere", "", nil, nil, Nowhere, ""},
		{"not here, other model there", "", []Node{node("b", 0, live, Model{ID: "x", State: StateReady})}, nil, Nowhere, ""},
		{"not here, unloaded there", "", []Node{node("b", 0, live, m(StateUnloaded))}, nil, Forward, "b"},
		{"not here, failed there", "", []Node{node("b", 0, live, m(StateFailed))}, nil, Nowhere, ""},
		{"not here, there but dead", "", []Node{node("b", 0, dead, m(StateReady))}, nil, Nowhere, ""},
		{"not here, dead ready, live unloaded", "", []Node{node("b", 0, dead, m(StateReady)), node("c", 9, live, m(StateUnloaded))}, nil, Forward, "c"},
		{"ready beats loading beats unloaded", "", []Node{node("b", 0, live, m(StateUnloaded)), node("c", 0, live, m(StateLoading)), node("d", 50, live, m(StateReady))}, nil, Forward, "d"},
		{"loading beats unloaded", "", []Node{node("b", 0, live, m(StateUnloaded)), node("c", 7, live, m(StateLoading))}, nil, Forward, "c"},
		{"fewest in flight", "", []Node{node("b", 3, live, m(StateReady)), node("c", 1, live, m(StateReady)), node("d", 2, live, m(StateReady))}, nil, Forward, "c"},
		{"tie: smallest id", "", []Node{node("d", 1, live, m(StateReady)), node("c", 1, live, m(StateReady))}, nil, Forward, "c"},
		{"never itself", "", []Node{node("self", 0, live, m(StateReady))}, nil, Nowhere, ""},
		{"skipped node", "", []Node{node("b", 0, live, m(StateReady)), node("c", 5, live, m(StateUnloaded))}, []string{"b"}, Forward, "c"},
		{"no address", "", []Node{{ID: "b", Expires: live, Models: []Model{m(StateReady)}}}, nil, Nowhere, ""},
		{"unknown state", "", []Node{node("b", 0, live, m("odd"))}, nil, Nowhere, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Pick(t0, "self", "m", c.local, c.nodes, c.skip...)
			if got.Where != c.want || got.Node.ID != c.node {
				t.Fatalf("Pick = %v %q, want %v %q", got.Where, got.Node.ID, c.want, c.node)
			}
		})
	}
}

// stores runs f against the in-process store and against Redis.
func stores(t *testing.T, f func(t *testing.T, st Store, advance func(time.Duration))) {
	t.Run("memory", func(t *testing.T) {
		now := t0
		f(t, &Memory{Now: func() time.Time { return now }}, func(d time.Duration) { now = now.Add(d) })
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{})
		c, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		f(t, NewRedis(c, "rt:"), time.Sleep)
	})
}

func TestStoreAnnounceExpireWithdraw(t *testing.T) {
	stores(t, func(t *testing.T, st Store, advance func(time.Duration)) {
		ctx := context.Background()
		a := node("a", 2, t0.Add(time.Hour), Model{ID: "m", State: StateReady, Tiers: []string{"fast"}})
		b := node("b", 0, t0.Add(time.Hour), Model{ID: "x", State: StateUnloaded, Embed: true})
		if err := st.Announce(ctx, a, 150*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := st.Announce(ctx, b, time.Hour); err != nil {
			t.Fatal(err)
		}
		ns, err := st.Nodes(ctx)
		if err != nil || len(ns) != 2 || ns[0].ID != "a" || ns[1].ID != "b" {
			t.Fatalf("nodes %+v %v", ns, err)
		}
		if m, ok := ns[0].Model("m"); !ok || m.State != StateReady || len(m.Tiers) != 1 || ns[0].InFlight != 2 || !ns[0].Expires.Equal(a.Expires) {
			t.Fatalf("a read back as %+v", ns[0])
		}
		if m, _ := ns[1].Model("x"); !m.Embed {
			t.Fatalf("b read back as %+v", ns[1])
		}
		// a stops announcing: gone after its TTL, whatever its Expires said.
		advance(300 * time.Millisecond)
		if ns, _ = st.Nodes(ctx); len(ns) != 1 || ns[0].ID != "b" {
			t.Fatalf("after a's TTL: %+v", ns)
		}
		// Announcing again replaces.
		b.Models[0].State = StateReady
		st.Announce(ctx, b, time.Hour)
		if ns, _ = st.Nodes(ctx); len(ns) != 1 || ns[0].Models[0].State != StateReady {
			t.Fatalf("after b announced again: %+v", ns)
		}
		if err := st.Withdraw(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if ns, _ = st.Nodes(ctx); len(ns) != 0 {
			t.Fatalf("after withdraw: %+v", ns)
		}
	})
}

func TestKeeperAnnouncesAndWithdraws(t *testing.T) {
	st := &Memory{}
	other := node("b", 0, time.Now().Add(time.Hour), Model{ID: "m", State: StateReady})
	st.Announce(context.Background(), other, time.Hour)
	k := NewKeeper(st, KeeperOptions{TTL: 300 * time.Millisecond})
	state := StateLoading
	states := make(chan string, 1)
	states <- state
	k.Start(func() Node {
		select {
		case s := <-states:
			state = s
		default:
		}
		return Node{ID: "a", Addr: "http://a", Models: []Model{{ID: "m", State: state}}}
	})
	ns := k.Nodes()
	if len(ns) != 2 || ns[0].ID != "a" || ns[0].Models[0].State != StateLoading || !Live(&ns[0], time.Now()) {
		t.Fatalf("after Start: %+v", ns)
	}
	states <- StateReady
	deadline := time.Now().Add(5 * time.Second)
	for k.Nodes()[0].Models[0].State != StateReady {
		if time.Now().After(deadline) {
			t.Fatal("the keeper never announced the new state")
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.Close()
	if ns, _ := st.Nodes(context.Background()); len(ns) != 1 || ns[0].ID != "b" {
		t.Fatalf("after Close: %+v", ns)
	}
}
