package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/lmlite/lmlite/batch"
	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/gateway"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/registry"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
	rollups "github.com/lmlite/lmlite/usage"
)

func init() {
	register("serve", "serve the OpenAI-compatible API (gateway + embedded engine)", runServe)
}

// engineOptions are the process-wide settings of the embedded engine.
type engineOptions struct {
	MemBudget int64            // the host budget; 0: host memory minus a margin
	Devices   map[string]int64 // lease budgets per device (device.Probe().Capacities)
	Leases    lease.Store      // nil: in-process; lease.Redis with `redis:`
}

func runServe(args []string) error {
	fs := newFlags("serve")
	cfgPath := fs.String("config", "", "YAML config file (default: the embedded demo config)")
	budget := fs.String("memory-budget", "", "memory for the embedded models, e.g. 4GiB (overrides memory_budget)")
	listen := fs.String("listen", "", "listen address (overrides listen)")
	verbose := fs.Bool("v", false, "log every request")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (written when the server stops)")
	blockprofile := fs.String("blockprofile", "", "write a profile of where goroutines block (channels, locks, select; every event) to this file when the server stops")
	mutexprofile := fs.String("mutexprofile", "", "write a profile of contended mutexes (every event) to this file when the server stops")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	stopProfile, err := startCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopWait := startWaitProfiles(*blockprofile, *mutexprofile)
	defer func() {
		if err := stopWait(); err != nil {
			log.Error("writing the wait profiles", "err", err)
		}
	}()

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
	if abs, err := filepath.Abs(cfg.DataDir); err == nil {
		cfg.DataDir = abs // the notes of `lmlite keys` and the banner name it whole
	}
	// Listen first: a taken port fails at once, before the demo models are written
	// and before models load.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return listenError(cfg.Listen, err)
	}
	defer ln.Close()

	demo := len(cfg.Models) == 0
	if demo {
		real, random, err := generateDemoModels(cfg.DataDir)
		if err != nil {
			return fmt.Errorf("no models configured and %w", err)
		}
		cfg.AddDemoModels(demoModelsOf(real), 0.0005, 0.0015) // every tier: the real model
		cfg.AddDemoModels(demoModelsOf(random), 0.0005, 0.0015)
		// "auto" steps down to a random model only when the story model cannot serve:
		// a request that needs more than its 512 tokens of context (a chat with tools,
		// whose schemas the template renders) takes demo-random-qwen3 (2048 tokens),
		// the fast tier's last choice.
		cfg.Tiers.Fast = append(cfg.Tiers.Fast, configs.TierModel{Model: demoLongContextID, Quality: 0.01})
		for i := range cfg.Models {
			for _, r := range random {
				if cfg.Models[i].ID == r.ID {
					cfg.Models[i].OwnedBy = randomOwner
				}
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		if *cfgPath != "" {
			return fmt.Errorf("%s: %w", *cfgPath, err)
		}
		return err
	}
	for _, w := range unpricedBudgets(cfg) {
		log.Warn(w)
	}
	memBudget, _ := configs.ParseBytes(cfg.MemoryBudget)
	mkey, err := metricsKey(cfg.MetricsKeyEnv)
	if err != nil {
		return err
	}

	pctx, pstop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = resolvePulls(pctx, cfg, stderr, stderr == io.Writer(os.Stderr) && isTerminal(os.Stderr))
	pstop()
	if err != nil {
		return err
	}
	embedded := engineModels(cfg)
	// One Redis client for every shared store: memory leases, keys, quotas, budgets.
	var rc *redis.Client
	var redisMetrics *rediscli.Metrics
	if r := cfg.Redis; r != nil {
		redisMetrics = rediscli.NewMetrics()
		if rc, err = rediscli.New(rediscli.Options{URL: r.URL, Name: r.NodeID, Metrics: redisMetrics}); err != nil {
			return err
		}
		defer rc.Close()
		pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = rc.Ping(pctx).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	var eng gateway.Engine
	if len(embedded) > 0 {
		opts := serveEngineOptions(cfg, memBudget, rc)
		if cfg.Engine.Mode == configs.ModeWorkers {
			eng, err = newWorkersEngine(cfg, embedded, memBudget, opts)
		} else {
			eng, err = newBlockEngine(embedded, opts)
		}
		if err != nil {
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
	// The stored responses of /v1/responses: in Redis with `redis:` (any process
	// continues any response), else in a bbolt file in the data directory, each one a
	// side record of its request's ledger write (respstore's ledger mode: one write,
	// and with sync: fsync one sync, for both), opened before the ledger, which hands
	// it what a killed process left, and closed after it. A journal an older binary
	// left (its own journal mode) is applied at the open
	// (TestAcknowledgedPutSurvivesKill/journal-then-ledger).
	var responses respstore.Store
	topts := tenancy.Options{Sync: mode}
	if r := cfg.Redis; r != nil {
		responses = respstore.NewRedis(rc, r.KeyPrefix, respstore.Options{})
	} else {
		rb, err := respstore.OpenBoltLedger(filepath.Join(cfg.DataDir, "responses.db"), respstore.Options{})
		if err != nil {
			return err
		}
		topts.Side = rb
		defer rb.Close()
		responses = rb
	}
	store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), topts)
	if err != nil {
		return err
	}
	defer store.Close()
	ten := tenancy.New(store)
	if r := cfg.Redis; r != nil {
		// Several processes as one service: keys, quotas and budgets live in Redis;
		// this process still ledgers what it settles in its own store.
		rk, err := tenancy.NewRedisKeys(rc, r.KeyPrefix, true)
		if err != nil {
			return err
		}
		defer rk.Close()
		store.ShareKeys(rk)
		sh := tenancy.NewRedisShared(rc, tenancy.RedisOptions{KeyPrefix: r.KeyPrefix, Node: r.NodeID, Logger: log, Metrics: redisMetrics})
		defer sh.Close()
		ten.UseShared(sh)
		if r.LeasesOn() {
			ls := tenancy.NewLeaseShared(sh, tenancy.LeaseOptions{Store: store})
			defer ls.Close() // gives the leases back, before sh closes
			// The leases an earlier run of this ledger held when it died: charged what
			// the ledger settled from them, the rest given back.
			if back, err := ls.Reconcile(); err != nil {
				return err
			} else if back > 0 {
				log.Info("tenancy: leases of an earlier run reconciled", "returned", back.String())
			}
			ten.UseShared(ls)
		}
		fmt.Printf("sharing keys, quotas and budgets through redis as node %s\n", r.NodeID)
	}

	demoKey := ""
	if cfg.DemoTenant != "" {
		if demoKey, err = ensureDemoKey(store, cfg.DataDir, cfg.DemoTenant); err != nil {
			return err
		}
	}
	// The server always has an admin key: $admin_key_env's, or one made on the first
	// start and kept 0600 in the data directory, where `lmlite keys` finds it.
	adminKey, adminNote := os.Getenv(cfg.AdminKeyEnv), ""
	if adminKey == "" {
		if adminKey, adminNote, err = ensureAdminKey(cfg.DataDir); err != nil {
			return err
		}
	}
	gcfg, err := gatewayConfig(cfg)
	if err != nil {
		return err
	}
	batches, err := batch.OpenStore(filepath.Join(cfg.DataDir, "batch")) // the Batch API's files and jobs
	if err != nil {
		return err
	}
	defer batches.Close()
	prefix := ""
	if cfg.Redis != nil {
		prefix = cfg.Redis.KeyPrefix
	}
	idKey, err := identifierKey(context.Background(), cfg.DataDir, rc, prefix)
	if err != nil {
		return err
	}
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	defer stopSweep()
	go sweepResponses(sweepCtx, responses, log)
	gopts := gateway.Options{Logger: log, AdminKey: adminKey, Batches: batches, MetricsKey: mkey,
		TenantKeyHint: tenantKeyHint(cfg, *cfgPath, demoKey != ""), IdentifierKey: idKey, Responses: responses}
	if r := cfg.Redis; r != nil {
		// Batch lines on a Redis Stream: every process runs every job's lines.
		gopts.BatchQueue = batch.NewRedisQueue(rc, batch.RedisQueueOptions{KeyPrefix: r.KeyPrefix, Node: r.NodeID, Logger: log})
		// The usage API and dashboards read every process's rollups from Redis; this
		// process publishes its own ledger's there.
		ru := rollups.NewRedis(rc, store, rollups.RedisOptions{KeyPrefix: r.KeyPrefix, Logger: log})
		defer ru.Close()
		gopts.Usage = ru
	}
	if redisMetrics != nil {
		gopts.Collectors = append(gopts.Collectors, redisMetrics)
	}
	var keeper *registry.Keeper
	if r := cfg.Redis; r != nil {
		// The model registry: this process announces its models; a request for a model
		// it does not serve goes to the process that does.
		keeper = registry.NewKeeper(registry.NewRedis(rc, r.KeyPrefix), registry.KeeperOptions{Logger: log})
		gopts.Peers, gopts.NodeID, gopts.ForwardFirstByte = keeper, r.NodeID, r.ForwardFirstByteTimeout
		gopts.ForwardIdle = r.ForwardIdleTimeout
	}
	srv, err := gateway.New(gcfg, eng, ten, gopts)
	if err != nil {
		return err
	}
	if keeper != nil {
		self := registry.Node{ID: cfg.Redis.NodeID, Addr: cfg.Redis.AdvertiseURL(ln.Addr().String())}
		keeper.Start(func() registry.Node {
			n := self
			n.Models, n.InFlight = srv.RegistryModels(), srv.InFlight()
			return n
		})
		defer keeper.Close()
	}
	unannounce, err := announce(runningServer{Listen: ln.Addr().String(), DataDir: cfg.DataDir, Config: *cfgPath})
	if err != nil {
		fmt.Fprintf(stderr, "lmlite: cannot note this server for `lmlite keys` (%v)\n", err)
	} else {
		defer unannounce()
	}
	printBanner(stdout, cfg, ln.Addr().String(), demo, demoKey, adminNote)
	if demoKey == "" {
		fmt.Fprintf(stdout, "API keys: %s\n", createKeyCommand(cfg, *cfgPath))
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case s := <-sig:
		fmt.Fprintf(stderr, "lmlite: %s: draining (up to %s)\n", s, cfg.ShutdownTimeout)
	}
	if keeper != nil {
		// Announce the drain first: the others stop forwarding here, and let the
		// requests they forwarded finish. The deferred Close withdraws at the end.
		keeper.Drain(cfg.ShutdownTimeout)
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

// listenError explains a failed listen; a taken port gets a hint (portInUseError).
func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return &portInUseError{addr: addr, err: err}
	}
	return fmt.Errorf("listen: %w", err)
}

// portInUseError is a listen refused because addr is taken: a hint instead of the
// socket's text, still matching syscall.EADDRINUSE.
type portInUseError struct {
	addr string
	err  error
}

func (e *portInUseError) Error() string {
	return "listen: " + e.addr + " is already in use (another lmlite serve? `lmlite keys list` names the one running); choose another address with --listen 127.0.0.1:9090 (make run LISTEN=127.0.0.1:9090)"
}

func (e *portInUseError) Unwrap() error { return e.err }

// printBanner prints where the server listens, the keys, and what each model is.
func printBanner(w io.Writer, cfg *configs.Config, addr string, demo bool, demoKey, adminNote string) {
	host := addr
	if h, p, err := net.SplitHostPort(addr); err == nil && (h == "::" || h == "0.0.0.0") {
		host = net.JoinHostPort("127.0.0.1", p)
	}
	fmt.Fprintf(w, "lmlite serving %d model(s) on %s\n", len(cfg.Models), addr)
	fmt.Fprintf(w, "OpenAI base URL: http://%s/v1\n", host)
	fmt.Fprintf(w, "dashboard: http://%s/dashboard (sign in with an API key; the admin key opens the operator's view)\n", host)
	if demoKey != "" {
		fmt.Fprintf(w, "API key (tenant %q, kept in %s): %s\n", cfg.DemoTenant, filepath.Join(cfg.DataDir, "demo-key"), demoKey)
	}
	if adminNote != "" {
		fmt.Fprintln(w, adminNote)
	}
	fmt.Fprintln(w, "models:")
	for _, m := range cfg.Models {
		note := ""
		switch {
		case demo && m.ID == demoStoriesID:
			note = "  real weights: llama2.c's stories260K (MIT), trained on TinyStories; it continues short stories in English, and embeds (/v1/embeddings, 64 dimensions: a toy)"
		case m.OwnedBy == randomOwner:
			note = "  RANDOM weights: generated to exercise the system; it answers in noise"
		case m.Upstream != nil:
			note = "  upstream " + m.Upstream.BaseURL
		}
		fmt.Fprintf(w, "  %-20s%s\n", m.ID, note)
	}
	if names := cfg.TierNames(); len(names) > 0 {
		fmt.Fprintf(w, "or \"auto\" (the tenant's tier mode), or a tier: tier:%s\n", strings.Join(names, ", tier:"))
	} else {
		fmt.Fprintln(w, "no tiers configured: name a model by its id")
	}
}

// createKeyCommand is the command that makes a tenant's API key for this config.
func createKeyCommand(cfg *configs.Config, cfgPath string) string {
	tenant := "T"
	if len(cfg.Tenants) > 0 {
		tenant = cfg.Tenants[0].ID
	}
	c := "lmlite keys create --tenant " + tenant
	if cfgPath != "" {
		c += " --config " + cfgPath
	}
	return c
}

// tenantKeyHint says where a tenant's API key is, for the 401 the admin key gets on /v1.
func tenantKeyHint(cfg *configs.Config, cfgPath string, demo bool) string {
	if demo {
		return "the demo key: " + filepath.Join(cfg.DataDir, "demo-key")
	}
	return "`" + createKeyCommand(cfg, cfgPath) + "` makes one"
}

// unpricedBudgets are the warnings for budgets that cannot bind: a plan with a daily
// or monthly budget (the plan's, or a tenant's override) reaches a model without
// prices, whose requests cost $0. One line per plan, naming its tenants with a budget
// and the models.
func unpricedBudgets(cfg *configs.Config) []string {
	book, err := cfg.Book()
	if err != nil {
		return nil // Validate reports it
	}
	var servesIn = map[string][tiers.NumTiers]bool{}
	for ti, cands := range cfg.Set().Tiers {
		for _, c := range cands {
			in := servesIn[c.Model]
			in[ti] = true
			servesIn[c.Model] = in
		}
	}
	type finding struct {
		tenants []string
		models  []string
	}
	byPlan := map[string]*finding{}
	var plans []string
	for _, id := range book.Tenants() {
		pol, ok := book.Resolve(id)
		if !ok || pol.DailyBudget <= 0 && pol.MonthlyBudget <= 0 {
			continue
		}
		var free []string
		for i := range cfg.Models {
			m := &cfg.Models[i]
			if m.PromptUSDPer1K == 0 && m.CompletionUSDPer1K == 0 && pol.AllowsServing(m.ID, servesIn[m.ID]) {
				free = append(free, m.ID)
			}
		}
		if len(free) == 0 {
			continue
		}
		f := byPlan[pol.Plan]
		if f == nil {
			f = &finding{models: free}
			byPlan[pol.Plan] = f
			plans = append(plans, pol.Plan)
		}
		f.tenants = append(f.tenants, id)
	}
	sort.Strings(plans)
	var out []string
	for _, p := range plans {
		f := byPlan[p]
		out = append(out, fmt.Sprintf("budgets that never bind: tenants of plan %q with a budget (%s) can reach models without prices (%s), whose requests cost $0; set prompt_usd_per_1k and completion_usd_per_1k on those models",
			p, strings.Join(f.tenants, ", "), strings.Join(f.models, ", ")))
	}
	return out
}

// ensureAdminKey returns the admin key kept in dataDir/admin-key (0600), making it on
// the first run; note is the banner's line: the key itself only when it was just made.
func ensureAdminKey(dataDir string) (key, note string, err error) {
	path := filepath.Join(dataDir, "admin-key")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), fmt.Sprintf("admin key: in %s (0600)", path), nil
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", err
	}
	key = "lmladm_" + hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("admin key: %w", err)
	}
	return key, fmt.Sprintf("admin key (printed once; kept in %s, 0600): %s", path, key), nil
}

// loadConfig reads the config file, or the embedded demo config when path is "".
func loadConfig(path string) (*configs.Config, error) {
	if path == "" {
		return configs.Parse(configs.Demo)
	}
	return configs.ParseFile(path)
}

// metricsKey is the bearer token /metrics requires: the value of env, when env is
// named ("" otherwise: /metrics is open). A named variable that is unset or empty is
// a configuration error: /metrics would be open while the file says it is not.
func metricsKey(env string) (string, error) {
	if env == "" {
		return "", nil
	}
	key := os.Getenv(env)
	if key == "" {
		return "", fmt.Errorf("metrics_key_env: the environment variable %s is unset or empty (set it to the bearer token GET /metrics requires, or remove metrics_key_env to leave /metrics open)", env)
	}
	return key, nil
}

// sweepResponses removes the expired stored responses every hour until ctx ends (a
// read never returns an expired one; this frees their space).
func sweepResponses(ctx context.Context, st respstore.Store, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n, err := st.Sweep(ctx, now); err != nil {
				log.Warn("responses: sweep", "error", err)
			} else if n > 0 {
				log.Info("responses: swept expired", "responses", n)
			}
		}
	}
}
