package main

import (
	"context"
	"fmt"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine/device"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/internal/rediscli"
)

// serveEngineOptions finds the devices (one line on stderr: "devices: CPU only (…)"
// without NVML or a GPU, never an error) and, with `redis:`, connects the shared
// memory-lease store. close closes the Redis client, after the engine.
func serveEngineOptions(cfg *configs.Config, memBudget int64) (engineOptions, func(), error) {
	opts := engineOptions{MemBudget: memBudget}
	inv := device.Probe()
	fmt.Fprintln(stderr, "lmlite: "+inv.Summary())
	host := memBudget
	if host <= 0 {
		host, _ = lease.HostBudget(0) // 0 when unknown: the engine says so
	}
	opts.Devices = inv.Capacities(host)
	if cfg.Redis == nil {
		return opts, func() {}, nil
	}
	c, err := rediscli.New(rediscli.Options{URL: cfg.Redis.URL, Name: cfg.Redis.NodeID})
	if err != nil {
		return opts, nil, fmt.Errorf("redis: %w", err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		return opts, nil, fmt.Errorf("redis: %w", err)
	}
	opts.Leases = lease.NewRedis(c, cfg.Redis.KeyPrefix, cfg.Redis.NodeID)
	return opts, func() { c.Close() }, nil
}
