package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/respstore"
)

// openResponses opens the stored responses of /v1/responses: in Redis when the
// configuration shares one (rc; any process continues any conversation), otherwise
// in data_dir/responses.db. close releases what it opened.
func openResponses(cfg *configs.Config, rc *redis.Client) (s respstore.Store, close func() error, err error) {
	o := respstore.Options{Retention: cfg.Responses.Retention}
	if cfg.Redis != nil && rc != nil {
		return respstore.NewRedis(rc, cfg.Redis.KeyPrefix, o), func() error { return nil }, nil
	}
	b, err := respstore.OpenBolt(filepath.Join(cfg.DataDir, "responses.db"), o)
	if err != nil {
		return nil, nil, err
	}
	return b, b.Close, nil
}

// sweepResponses removes the expired stored responses now and every `every` after,
// until stop is called (which returns once the sweeper has stopped).
func sweepResponses(s respstore.Store, every time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if n, err := s.Sweep(ctx, time.Now()); err != nil && ctx.Err() == nil {
				log.Warn("sweeping the expired stored responses", "err", err)
			} else if n > 0 {
				log.Info("swept expired stored responses", "responses", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
