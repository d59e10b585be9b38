package registry

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// KeeperOptions configure a Keeper; the zero value announces with a 3 s TTL.
type KeeperOptions struct {
	TTL    time.Duration // how long an announcement lives; 0: 3 s. Renewed every TTL/3
	Logger *slog.Logger  // nil: slog.Default()
	Now    func() time.Time
}

// Keeper is the goroutine that announces this process and keeps a snapshot of every
// live node, so that routing a request costs no round trip. Create it with NewKeeper,
// start it with Start, stop it with Close (which withdraws the announcement).
type Keeper struct {
	st   Store
	ttl  time.Duration
	log  *slog.Logger
	now  func() time.Time
	self func() Node

	nodes atomic.Pointer[[]Node] // the last snapshot; replaced whole, never modified
	read  atomic.Int64           // when it was read (UnixNano, the Keeper's clock)

	once   sync.Once // halt
	closed sync.Once // Close's withdrawal
	stop   chan struct{}
	done   chan struct{}
	down   bool // the last round failed (owned by the goroutine: logs once per outage)
}

// NewKeeper returns a Keeper of st, not yet started.
func NewKeeper(st Store, o KeeperOptions) *Keeper {
	k := &Keeper{st: st, ttl: o.TTL, log: o.Logger, now: o.Now, stop: make(chan struct{}), done: make(chan struct{})}
	if k.ttl <= 0 {
		k.ttl = 3 * time.Second
	}
	if k.log == nil {
		k.log = slog.Default()
	}
	if k.now == nil {
		k.now = time.Now
	}
	k.nodes.Store(&[]Node{})
	return k
}

// Start announces self() at once and then every TTL/3, and refreshes the snapshot
// each time. self is called on the Keeper's goroutine.
func (k *Keeper) Start(self func() Node) {
	k.self = self
	k.round()
	go k.loop()
}

// Nodes returns the last snapshot of the announcements (this process's included);
// callers judge liveness with Live. The slice must not be modified.
func (k *Keeper) Nodes() []Node { return *k.nodes.Load() }

// Drain stops renewing and announces this process once more as draining, for ttl
// (the drain's time limit): the others forward nothing new here, but they know it is
// alive and let the requests they forwarded run to the end. Close withdraws it after.
func (k *Keeper) Drain(ttl time.Duration) {
	k.halt()
	if k.self == nil {
		return
	}
	n := k.self()
	n.Draining, n.Expires = true, k.now().Add(ttl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := k.st.Announce(ctx, n, ttl); err != nil {
		k.log.Warn("registry: cannot announce the drain", "error", err)
	}
}

// Current reports whether the snapshot was read within the last two renewals (2 ×
// TTL/3) before now: a node missing from a current snapshot has stopped announcing;
// from an old one (the store unreachable), nothing can be said.
func (k *Keeper) Current(now time.Time) bool {
	return now.Sub(time.Unix(0, k.read.Load())) < 2*k.ttl/3
}

// Close stops announcing and withdraws this process's announcement.
func (k *Keeper) Close() {
	k.halt()
	k.closed.Do(func() {
		if k.self == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		k.st.Withdraw(ctx, k.self().ID)
	})
}

// halt stops the announcing goroutine (once) and waits for it.
func (k *Keeper) halt() {
	k.once.Do(func() {
		close(k.stop)
		if k.self == nil {
			close(k.done)
		}
	})
	<-k.done
}

func (k *Keeper) loop() {
	defer close(k.done)
	t := time.NewTicker(k.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.round()
		}
	}
}

// round announces this node and reads every node.
func (k *Keeper) round() {
	ctx, cancel := context.WithTimeout(context.Background(), k.ttl/3)
	defer cancel()
	n := k.self()
	n.Expires = k.now().Add(k.ttl)
	err := k.st.Announce(ctx, n, k.ttl)
	var nodes []Node
	if err == nil {
		nodes, err = k.st.Nodes(ctx)
	}
	if err != nil {
		if !k.down {
			k.log.Warn("registry: cannot announce or read the nodes; routing uses the last snapshot", "error", err)
		}
		k.down = true
		return
	}
	if k.down {
		k.log.Info("registry: announcing again")
	}
	k.down = false
	k.nodes.Store(&nodes)
	k.read.Store(k.now().UnixNano())
}
