package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/tenancy"
)

func init() {
	register("keys", "manage API keys: keys create --tenant T | keys revoke ID | keys list", runKeys)
}

// runKeys manages API keys. When the config names a Redis (redis: or
// LMLITE_REDIS_URL) the keys are there, shared by every process. Otherwise, with the server stopped it opens the store in the data
// directory; when a running server holds the store (or --server is given) it goes
// through the server's admin API with the admin key.
func runKeys(args []string) error {
	action, name := "", "keys"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && !isHelp(args[0]) {
		action, name = args[0], "keys "+args[0]
	}
	fs := newFlags(name)
	cfgPath := fs.String("config", "", "config file (default: the embedded demo config)")
	tenant := fs.String("tenant", "", "tenant of the new key (create)")
	server := fs.String("server", "", "admin API of a running server, e.g. http://127.0.0.1:8080 (default: open the store, or the config's listen address when the store is in use)")
	adminKey := fs.String("admin-key", "", "admin key (default: $LMLITE_ADMIN_KEY, or the config's admin_key_env)")
	if action == "" { // no action: the help, or the usage
		if len(args) > 0 && isHelp(args[0]) {
			fs.Usage()
			return flag.ErrHelp
		}
		fs.Usage()
		return errUsage
	}
	rest := args[1:]
	var id string
	if action == "revoke" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		id, rest = rest[0], rest[1:]
	}
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	switch action {
	case "create":
		if *tenant == "" {
			return errors.New("create needs --tenant")
		}
	case "revoke":
		if id == "" {
			return errors.New("revoke needs the key id")
		}
	case "list":
	default:
		return fmt.Errorf("unknown action %q (create, revoke, list)", action)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	running := ""
	if *cfgPath == "" && *server == "" {
		// The store of the server that is running, wherever it was started from.
		s, ok, err := pickServer(runningServers(), cfg.DataDir)
		if err != nil {
			return err
		}
		if ok {
			if s.Config != "" {
				if cfg, err = loadConfig(s.Config); err != nil {
					return err
				}
			}
			cfg.DataDir, cfg.Listen = s.DataDir, s.Listen
			running = fmt.Sprintf(" (lmlite serve, pid %d, on %s)", s.PID, s.Listen)
		}
	}
	if *adminKey == "" {
		*adminKey = os.Getenv(cfg.AdminKeyEnv)
	}
	if *adminKey == "" { // the one serve made on its first start (data_dir/admin-key)
		if b, err := os.ReadFile(filepath.Join(cfg.DataDir, "admin-key")); err == nil {
			*adminKey = strings.TrimSpace(string(b))
		}
	}
	dbPath := filepath.Join(cfg.DataDir, "lmlite.db")
	if *server == "" && cfg.Redis != nil {
		// The keys live in Redis: no server or data directory is involved.
		rc, err := rediscli.New(rediscli.Options{URL: cfg.Redis.URL, Name: cfg.Redis.NodeID + "-keys"})
		if err != nil {
			return err
		}
		defer rc.Close()
		rk, err := tenancy.NewRedisKeys(rc, cfg.Redis.KeyPrefix, false)
		if err != nil {
			return err
		}
		return keysOffline(rk, cfg, action, *tenant, id)
	}
	if *server == "" {
		store, err := tenancy.Open(dbPath, tenancy.Options{LockTimeout: 300 * time.Millisecond})
		if err == nil {
			defer store.Close()
			fmt.Fprintf(stderr, "lmlite keys: using the store %s%s\n", absPath(dbPath), running)
			return keysOffline(store, cfg, action, *tenant, id)
		}
		if !errors.Is(err, tenancy.ErrLocked) {
			return err
		}
		*server = "http://" + dialable(cfg.Listen)
		fmt.Fprintf(stderr, "lmlite keys: the store %s is held by a running server%s; using its admin API at %s\n", absPath(dbPath), running, *server)
	} else {
		fmt.Fprintf(stderr, "lmlite keys: using the admin API at %s\n", *server)
	}
	return keysOnline(strings.TrimRight(*server, "/"), *adminKey, action, *tenant, id)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// dialable turns a listen address into one to connect to (0.0.0.0 and :: → loopback).
func dialable(addr string) string {
	if h, p, err := net.SplitHostPort(addr); err == nil && (h == "" || h == "::" || h == "0.0.0.0") {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return addr
}

// keyStore is what the keys command needs of a key store: tenancy.Store (the data
// directory's) or tenancy.RedisKeys (shared by every process).
type keyStore interface {
	CreateKey(tenant string, now time.Time) (string, tenancy.KeyInfo, error)
	RevokeKey(id string, now time.Time) (tenancy.KeyInfo, error)
	Keys() []tenancy.KeyInfo
}

func keysOffline(store keyStore, cfg *configs.Config, action, tenant, id string) error {
	switch action {
	case "create":
		known := false
		for _, t := range cfg.Tenants {
			known = known || t.ID == tenant
		}
		if !known {
			return fmt.Errorf("unknown tenant %q (tenants are declared in the config)", tenant)
		}
		key, ki, err := store.CreateKey(tenant, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "key %s for tenant %s (shown once; store it now):\n", ki.ID, ki.Tenant)
		fmt.Fprintln(stdout, key)
	case "revoke":
		ki, err := store.RevokeKey(id, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "revoked", ki.String())
	case "list":
		for _, k := range store.Keys() {
			fmt.Fprintln(stdout, k.String())
		}
	}
	return nil
}

func keysOnline(server, adminKey, action, tenant, id string) error {
	if adminKey == "" {
		return errors.New("the store is in use by a running server: give its admin key (--admin-key, $LMLITE_ADMIN_KEY, or the data directory's admin-key file)")
	}
	var req *http.Request
	var err error
	switch action {
	case "create":
		body, _ := json.Marshal(map[string]string{"tenant": tenant})
		req, err = http.NewRequest("POST", server+"/admin/keys", bytes.NewReader(body))
	case "revoke":
		req, err = http.NewRequest("DELETE", server+"/admin/keys/"+id, nil)
	case "list":
		req, err = http.NewRequest("GET", server+"/admin/keys", nil)
	}
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("admin API: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	switch action {
	case "create":
		var out struct{ Key, ID, Tenant string }
		if err := json.Unmarshal(b, &out); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "key %s for tenant %s (shown once; store it now):\n", out.ID, out.Tenant)
		fmt.Fprintln(stdout, out.Key)
	case "revoke":
		var ki tenancy.KeyInfo
		if err := json.Unmarshal(b, &ki); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "revoked", ki.String())
	case "list":
		var out struct{ Data []tenancy.KeyInfo }
		if err := json.Unmarshal(b, &out); err != nil {
			return err
		}
		for _, k := range out.Data {
			fmt.Fprintln(stdout, k.String())
		}
	}
	return nil
}
