package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// identifierKey is the key under which the gateway hashes end-user identifiers (user,
// safety_identifier) into the ledger (gateway.Options.IdentifierKey). It must outlive
// the process, or the same user's hashes would differ after every restart: with Redis
// it is one key for every process sharing it (set once, SET NX, then read by all);
// without, it is kept in dataDir/identifier-key (0600), made on the first start.
func identifierKey(ctx context.Context, dataDir string, rc *redis.Client, keyPrefix string) ([]byte, error) {
	fresh := func() (string, error) {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", err
		}
		return hex.EncodeToString(raw[:]), nil
	}
	decode := func(s string) ([]byte, bool) {
		b, err := hex.DecodeString(strings.TrimSpace(s))
		return b, err == nil && len(b) == 32
	}
	if rc != nil {
		k, err := fresh()
		if err != nil {
			return nil, err
		}
		key := keyPrefix + "identifier-key"
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := rc.SetNX(ctx, key, k, 0).Err(); err != nil {
			return nil, fmt.Errorf("identifier key in redis: %w", err)
		}
		v, err := rc.Get(ctx, key).Result()
		if err != nil {
			return nil, fmt.Errorf("identifier key in redis: %w", err)
		}
		b, ok := decode(v)
		if !ok {
			return nil, fmt.Errorf("identifier key in redis: %s does not hold 64 hex digits", key)
		}
		return b, nil
	}
	path := filepath.Join(dataDir, "identifier-key")
	if s, err := os.ReadFile(path); err == nil {
		if b, ok := decode(string(s)); ok {
			return b, nil
		}
		return nil, fmt.Errorf("identifier key: %s does not hold 64 hex digits", path)
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("identifier key: %w", err)
	}
	k, err := fresh()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("identifier key: %w", err)
	}
	if err := os.WriteFile(path, []byte(k+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("identifier key: %w", err)
	}
	b, _ := decode(k)
	return b, nil
}
