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
		{"draining", "", []Node{drain(node("b", 0, live, m(StateReady))), node("c", 9, live, m(StateUnloaded))}, nil, Forward, "c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Pick(t0, "self", Query{Model: "m", Local: c.local, Skip: c.skip}, c.nodes)
			if got.Where != c.want || got.Node.ID != c.node {
				t.Fatalf("Pick = %v %q, want %v %q", got.Where, got.Node.ID, c.want, c.node)
			}
		})
	}
}

func drain(n Node) Node { n.Draining = true; return n }

// TestPickPrefersTheWarmNode: a node whose announcement lists the request's prefix
// key wins among nodes where the model is ready, within WarmSlack more requests in
// flight; a cold process that serves the model forwards to a warm one on the same
// terms.
func TestPickPrefersTheWarmNode(t *testing.T) {
	live := t0.Add(time.Second)
	const k = 0xfeed
	m := func(state string, warm ...uint64) Model { return Model{ID: "m", State: state, Warm: warm} }
	cases := []struct {
		name      string
		local     string
		localWarm bool
		localLoad int64
		prefix    uint64
		nodes     []Node
		want      Where
		node      string
		warm      bool
	}{
		{"cold: fewest in flight", "", false, 0, k, []Node{node("b", 1, live, m(StateReady)), node("c", 0, live, m(StateReady))}, Forward, "c", false},
		{"warm beats the least loaded", "", false, 0, k, []Node{node("b", 1, live, m(StateReady)), node("c", 0, live, m(StateReady, 1, k))}, Forward, "c", true},
		{"warm beats the smaller id", "", false, 0, k, []Node{node("b", 0, live, m(StateReady)), node("c", 0, live, m(StateReady, k))}, Forward, "c", true},
		{"warm within the slack", "", false, 0, k, []Node{node("b", 0, live, m(StateReady)), node("c", WarmSlack, live, m(StateReady, k))}, Forward, "c", true},
		{"warm beyond the slack", "", false, 0, k, []Node{node("b", 0, live, m(StateReady)), node("c", WarmSlack+1, live, m(StateReady, k))}, Forward, "b", false},
		{"other key: cold", "", false, 0, k, []Node{node("b", 0, live, m(StateReady)), node("c", 0, live, m(StateReady, k+1))}, Forward, "b", false},
		{"no prefix: no preference", "", false, 0, 0, []Node{node("b", 0, live, m(StateReady)), node("c", 0, live, m(StateReady, 0))}, Forward, "b", false},
		{"warm but unloaded: ready wins", "", false, 0, k, []Node{node("b", 3, live, m(StateReady)), node("c", 0, live, m(StateUnloaded, k))}, Forward, "b", false},
		{"two warm: fewest in flight", "", false, 0, k, []Node{node("b", 2, live, m(StateReady, k)), node("c", 1, live, m(StateReady, k)), node("d", 0, live, m(StateReady))}, Forward, "c", true},
		{"warm but draining", "", false, 0, k, []Node{node("b", 0, live, m(StateReady)), drain(node("c", 0, live, m(StateReady, k)))}, Forward, "b", false},
		{"ready here, cold; warm there", StateReady, false, 0, k, []Node{node("b", 0, live, m(StateReady, k))}, Forward, "b", true},
		{"ready here, cold; warm there within the slack", StateReady, false, 1, k, []Node{node("b", 1+WarmSlack, live, m(StateReady, k))}, Forward, "b", true},
		{"ready here, cold; warm there but busier", StateReady, false, 1, k, []Node{node("b", 2+WarmSlack, live, m(StateReady, k))}, Local, "", false},
		{"ready here, warm too", StateReady, true, 0, k, []Node{node("b", 0, live, m(StateReady, k))}, Local, "", false},
		{"ready here, cold; nobody warm", StateReady, false, 0, k, []Node{node("b", 0, live, m(StateReady))}, Local, "", false},
		{"ready here, cold; warm there but loading", StateReady, false, 0, k, []Node{node("b", 0, live, m(StateLoading, k))}, Local, "", false},
		{"loading here; warm there", StateLoading, false, 0, k, []Node{node("b", 0, live, m(StateReady, k))}, Local, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Pick(t0, "self", Query{Model: "m", Local: c.local, Prefix: c.prefix, LocalWarm: c.localWarm, LocalInFlight: c.localLoad}, c.nodes)
			if got.Where != c.want || got.Node.ID != c.node || got.Warm != c.warm {
				t.Fatalf("Pick = %v %q warm %v, want %v %q warm %v", got.Where, got.Node.ID, got.Warm, c.want, c.node, c.warm)
			}
		})
	}
}

// TestPickAnAdapter: a request naming a LoRA adapter goes only to a node announcing
// the adapter on its base model (a node with the base alone is passed over, warm or
// not), and AdapterBase finds the base from the live announcements.
func TestPickAnAdapter(t *testing.T) {
	live, dead := t0.Add(time.Second), t0
	const k = 0xfeed
	m := func(state string, adapters ...string) Model {
		return Model{ID: "m", State: state, Adapters: adapters, Warm: []uint64{k}}
	}
	cases := []struct {
		name  string
		local string
		nodes []Node
		want  Where
		node  string
	}{
		{"not here, base alone there", "", []Node{node("b", 0, live, m(StateReady))}, Nowhere, ""},
		{"not here, adapter there", "", []Node{node("b", 0, live, m(StateReady)), node("c", 5, live, m(StateReady, "x", "ft"))}, Forward, "c"},
		{"not here, another adapter there", "", []Node{node("b", 0, live, m(StateReady, "x"))}, Nowhere, ""},
		{"base unloaded here, adapter ready there", StateUnloaded, []Node{node("b", 0, live, m(StateReady)), node("c", 0, live, m(StateReady, "ft"))}, Forward, "c"},
		{"ready here, cold; warm base without the adapter", StateReady, []Node{node("b", 0, live, m(StateReady))}, Local, ""},
		{"ready here, cold; warm with the adapter", StateReady, []Node{node("b", 0, live, m(StateReady, "ft"))}, Forward, "b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Pick(t0, "self", Query{Model: "m", Adapter: "ft", Local: c.local, Prefix: k}, c.nodes)
			if got.Where != c.want || got.Node.ID != c.node {
				t.Fatalf("Pick = %v %q, want %v %q", got.Where, got.Node.ID, c.want, c.node)
			}
		})
	}
	nodes := []Node{node("b", 0, dead, Model{ID: "old", Adapters: []string{"ft"}}), node("c", 0, live, Model{ID: "x"}, Model{ID: "m", Adapters: []string{"ft"}})}
	if base, ok := AdapterBase(t0, nodes, "ft", "acme"); !ok || base != "m" {
		t.Fatalf("AdapterBase(ft) = %q %v, want m (the live node's)", base, ok)
	}
	if base, ok := AdapterBase(t0, nodes, "nope", "acme"); ok {
		t.Fatalf("AdapterBase(nope) = %q, want none", base)
	}
	// A private adapter is there for its owner alone.
	nodes = []Node{node("c", 0, live, Model{ID: "m", Adapters: []string{"ft", "mine"}, Owners: map[string]string{"mine": "beta"}})}
	for _, c := range []struct {
		id, tenant string
		ok         bool
	}{{"mine", "beta", true}, {"mine", "acme", false}, {"ft", "acme", true}} {
		if _, ok := AdapterBase(t0, nodes, c.id, c.tenant); ok != c.ok {
			t.Errorf("AdapterBase(%s) for %s: %v, want %v", c.id, c.tenant, ok, c.ok)
		}
	}
}

// TestPickTier: down the tiers, the first one here is served here; the first one
// only elsewhere goes to the best node with a model of it the plan allows.
func TestPickTier(t *testing.T) {
	live, dead := t0.Add(time.Second), t0
	tm := func(id, state string, tiers ...string) Model { return Model{ID: id, State: state, Tiers: tiers} }
	noBig := func(id string) bool { return id != "big" }
	cases := []struct {
		name  string
		tiers []string
		local []bool
		allow func(string) bool
		nodes []Node
		want  Where
		node  string
		model string
	}{
		{"here", []string{"deep"}, []bool{true}, nil, []Node{node("b", 0, live, tm("big", StateReady, "deep"))}, Local, "", ""},
		{"only there", []string{"deep"}, []bool{false}, nil, []Node{node("b", 0, live, tm("big", StateReady, "deep"))}, Forward, "b", "big"},
		{"nowhere", []string{"deep"}, []bool{false}, nil, []Node{node("b", 0, live, tm("small", StateReady, "fast"))}, Nowhere, "", ""},
		{"better tier there", []string{"deep", "balanced", "fast"}, []bool{false, false, true}, nil, []Node{node("b", 0, live, tm("big", StateReady, "deep"))}, Forward, "b", "big"},
		{"better tier here", []string{"deep", "balanced", "fast"}, []bool{true, false, false}, nil, []Node{node("b", 0, live, tm("small", StateReady, "fast"))}, Local, "", ""},
		{"step down to a tier there", []string{"deep", "balanced", "fast"}, []bool{false, false, false}, nil, []Node{node("b", 0, live, tm("small", StateReady, "fast"))}, Forward, "b", "small"},
		{"plan forbids the model there", []string{"deep", "fast"}, []bool{false, true}, noBig, []Node{node("b", 0, live, tm("big", StateReady, "deep"))}, Local, "", ""},
		{"dead node", []string{"deep"}, []bool{false}, nil, []Node{node("b", 0, dead, tm("big", StateReady, "deep"))}, Nowhere, "", ""},
		{"failed there", []string{"deep"}, []bool{false}, nil, []Node{node("b", 0, live, tm("big", StateFailed, "deep"))}, Nowhere, "", ""},
		{"ready beats unloaded", []string{"deep"}, []bool{false}, nil, []Node{node("b", 0, live, tm("big", StateUnloaded, "deep")), node("c", 5, live, tm("big2", StateReady, "deep"))}, Forward, "c", "big2"},
		{"the node's best model", []string{"deep"}, []bool{false}, nil, []Node{node("b", 0, live, tm("x", StateUnloaded, "deep"), tm("y", StateReady, "deep"))}, Forward, "b", "y"},
		{"never itself", []string{"deep"}, []bool{false}, nil, []Node{node("self", 0, live, tm("big", StateReady, "deep"))}, Nowhere, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := PickTier(t0, "self", TierQuery{Tiers: c.tiers, Local: c.local, Allow: c.allow}, c.nodes)
			if got.Where != c.want || got.Node.ID != c.node || got.Model != c.model {
				t.Fatalf("PickTier = %v %q %q, want %v %q %q", got.Where, got.Node.ID, got.Model, c.want, c.node, c.model)
			}
		})
	}
	// A warm node wins within the tier, as in Pick.
	const k = 7
	nodes := []Node{node("b", 0, live, tm("big", StateReady, "deep")), node("c", 1, live, Model{ID: "big", State: StateReady, Tiers: []string{"deep"}, Warm: []uint64{k}})}
	if got := PickTier(t0, "self", TierQuery{Tiers: []string{"deep"}, Local: []bool{false}, Prefix: k}, nodes); got.Node.ID != "c" || !got.Warm {
		t.Fatalf("PickTier with a warm node = %+v", got)
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
	if !k.Current(time.Now()) || k.Current(time.Now().Add(300*time.Millisecond)) {
		t.Fatal("Current: the snapshot just read is not current, or one 300 ms old still is")
	}
	states <- StateReady
	deadline := time.Now().Add(5 * time.Second)
	for k.Nodes()[0].Models[0].State != StateReady {
		if time.Now().After(deadline) {
			t.Fatal("the keeper never announced the new state")
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.Drain(time.Hour)
	ns = nil
	all, _ := st.Nodes(context.Background())
	for _, n := range all {
		if n.ID == "a" {
			ns = append(ns, n)
		}
	}
	if len(ns) != 1 || !ns[0].Draining || !Live(&ns[0], time.Now().Add(time.Minute)) || Serving(&ns[0], time.Now()) {
		t.Fatalf("after Drain: %+v", ns)
	}
	k.Close()
	if ns, _ := st.Nodes(context.Background()); len(ns) != 1 || ns[0].ID != "b" {
		t.Fatalf("after Close: %+v", ns)
	}
}
