package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway"
	"github.com/lmlite/lmlite/tenancy"
)

func init() {
	register("serve", "serve the OpenAI-compatible API (gateway + embedded engine)", runServe)
}

// demoModels generates the demo models into dataDir for a configuration without
// models. It is wired to the model generator by the engine's side.
var demoModels = func(dataDir string) ([]engine.ModelConfig, error) {
	return nil, errors.New("demo models are not available yet (no model generator wired); configure models in --config")
}

// newEngine builds the embedded engine's Block for the embedded models.
var newEngine = func(cfgs []engine.ModelConfig, memBudget int64) (gateway.Engine, error) {
	return nil, errors.New("the embedded engine is not yet available; configure upstream models only")
}

func runServe(args []string) error {
	fs := newFlags("serve")
	cfgPath := fs.String("config", "", "YAML config file (default: the embedded demo config)")
	budget := fs.String("memory-budget", "", "memory for the embedded models, e.g. 4GiB (overrides memory_budget)")
	listen := fs.String("listen", "", "listen address (overrides listen)")
	verbose := fs.Bool("v", false, "log every request")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (written when the server stops)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *budget != "" {
		cfg.MemoryBudget = *budget
	}
	if len(cfg.Models) == 0 {
		models, err := demoModels(cfg.DataDir)
		if err != nil {
			return fmt.Errorf("no models configured and %w", err)
		}
		cfg.AddDemoModels(models, 0.0005, 0.0015)
	}
	if err := cfg.Validate(); err != nil {
		if *cfgPath != "" {
			return fmt.Errorf("%s: %w", *cfgPath, err)
		}
		return err
	}
	memBudget, _ := configs.ParseBytes(cfg.MemoryBudget)

	var embedded []engine.ModelConfig
	for i := range cfg.Models {
		if cfg.Models[i].Upstream == nil {
			embedded = append(embedded, cfg.Models[i].EngineConfig())
		}
	}
	var eng gateway.Engine
	if len(embedded) > 0 {
		if eng, err = newEngine(embedded, memBudget); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		if c, ok := eng.(io.Closer); ok {
			defer c.Close()
		}
	}

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	mode := tenancy.SyncFsync
	if cfg.Ledger.Sync == "process" {
		mode = tenancy.SyncProcess
	}
	store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), tenancy.Options{Sync: mode})
	if err != nil {
		return err
	}
	defer store.Close()

	demoKey := ""
	if cfg.DemoTenant != "" {
		if demoKey, err = ensureDemoKey(store, cfg.DataDir, cfg.DemoTenant); err != nil {
			return err
		}
	}
	gcfg, err := gateway.ConfigOf(cfg)
	if err != nil {
		return err
	}
	srv, err := gateway.New(gcfg, eng, tenancy.New(store), gateway.Options{
		Logger: log, AdminKey: os.Getenv(cfg.AdminKeyEnv), MetricsKey: metricsKey(cfg.MetricsKeyEnv),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	host := ln.Addr().String()
	if h, p, err := net.SplitHostPort(host); err == nil && (h == "::" || h == "0.0.0.0") {
		host = net.JoinHostPort("127.0.0.1", p)
	}
	fmt.Printf("lmlite serving %d model(s) on %s\n", len(cfg.Models), ln.Addr())
	fmt.Printf("OpenAI base URL: http://%s/v1\n", host)
	if demoKey != "" {
		fmt.Printf("API key (demo tenant %q): %s\n", cfg.DemoTenant, demoKey)
	}
	ids := make([]string, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		ids = append(ids, m.ID)
	}
	fmt.Printf("models: %s (or \"auto\", \"tier:fast\" … \"tier:max\")\n", strings.Join(ids, ", "))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "lmlite: %s: draining (up to %s)\n", s, cfg.ShutdownTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	<-errc
	return nil
}

// ensureDemoKey returns the demo tenant's key, kept in clear in dataDir/demo-key
// (0600; the one key stored in clear, for the demo only), making it on the first run.
func ensureDemoKey(store *tenancy.Store, dataDir, tenant string) (string, error) {
	path := filepath.Join(dataDir, "demo-key")
	if b, err := os.ReadFile(path); err == nil {
		key := strings.TrimSpace(string(b))
		if t, _, err := store.Authenticate(key); err == nil && t == tenant {
			return key, nil
		}
	}
	key, _, err := store.CreateKey(tenant, time.Now())
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("demo key: %w", err)
	}
	return key, nil
}

// loadConfig reads the config file, or the embedded demo config when path is "".
func loadConfig(path string) (*configs.Config, error) {
	if path == "" {
		return configs.Parse(configs.Demo)
	}
	return configs.ParseFile(path)
}

// metricsKey is the bearer token /metrics requires: the value of env, when env is
// named ("" otherwise: /metrics is open).
func metricsKey(env string) string {
	if env == "" {
		return ""
	}
	return os.Getenv(env)
}
