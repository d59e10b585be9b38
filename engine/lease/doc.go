// Package lease coordinates device memory between the models that use it (model-boss's
// GPUBoss): before a model loads, it leases its bytes (weights + KV pool) on a device.
//
// A Lease carries a priority, a TTL and an idle flag; its holder beats (Heartbeat)
// well within the TTL, and a lease whose holder stops beating expires and no longer
// counts. Each device has a budget: for host memory HostBudget (MemTotal minus a
// margin) unless the Block's MemoryBudget overrides it.
//
// Victims is the pure decision: whether a load fits, and if not, which idle leases of
// lower priority to unload to make room (lowest priority first, then the largest,
// trimmed of any not needed), or a *NoMemoryError (ErrNoMemory) with the numbers.
// Acquire composes it with a Store and the caller's unload function.
//
// Store is the interface of the lease table, with explicit times. Memory is the
// in-process implementation; Redis serves several processes through one Redis in
// model-boss's layout (docs/REDIS.md lists its keys): a sorted set per device (member
// holder, score expiry in ms), a hash per lease (bytes, priority, ttl, idle, node), a
// heartbeat key per lease that Redis expires TTL after the last beat, Acquire as one
// Lua script (drop the dead, sum the rest, compare with the budget, add), Heartbeat
// refusing any lease that is expired by its score or its heartbeat key, and a preempt
// channel per node: Redis.Unload asks another process to give up an idle victim,
// Redis.Listen serves those requests. The same tests run against both stores.
//
// The package does not import engine; the engine wraps ErrNoMemory with
// engine.ErrNoMemory. (The engine's Block calls Victims inside its own lifecycle
// decision and then Store.Acquire.) Sketch of a program loading a model:
//
//	budget, err := lease.HostBudget(0) // or cfg.MemoryBudget
//	want := lease.Lease{Device: lease.HostDevice, Holder: id + "@" + proc,
//		Bytes: weights + kvBytes, Priority: cfg.Priority, TTL: 30 * time.Second}
//	l, err := lease.Acquire(ctx, store, now, budget, want, func(v lease.Lease) error {
//		return unloadIfIdle(v.Holder) // refuses if it is busy again
//	})
//	if errors.Is(err, lease.ErrNoMemory) {
//		return fmt.Errorf("%w: %w", engine.ErrNoMemory, err)
//	}
//	// every TTL/3, from the goroutine that owns the model:
//	err = store.Heartbeat(ctx, now, l.Device, l.Holder, idle)
//	// on unload:
//	store.Release(ctx, l.Device, l.Holder)
//	// Block.GC:
//	expired, _ := store.Expire(ctx, now)
package lease
