package main

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine/device"
	"github.com/lmlite/lmlite/engine/lease"
)

// serveEngineOptions finds the devices (one line on stderr: "devices: CPU only (…)"
// without NVML or a GPU, never an error) and, with `redis:` (rc, the process's
// client), shares the memory leases through lease.Redis under the node id.
func serveEngineOptions(cfg *configs.Config, memBudget int64, rc *redis.Client) engineOptions {
	opts := engineOptions{MemBudget: memBudget}
	inv := device.Probe()
	fmt.Fprintln(stderr, "lmlite: "+inv.Summary())
	host := memBudget
	if host <= 0 {
		host, _ = lease.HostBudget(0) // 0 when unknown: the engine says so
	}
	opts.Devices = inv.Capacities(host)
	if rc != nil {
		opts.Leases = lease.NewRedis(rc, cfg.Redis.KeyPrefix, cfg.Redis.NodeID)
	}
	return opts
}
