package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmlite/lmlite/engine/api"
	"github.com/lmlite/lmlite/engine/device"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/toolcall"
	"github.com/lmlite/lmlite/engine/workerapi"
)

// Config configures a Pool. The zero value of each field takes its default.
type Config struct {
	Models []api.ModelConfig
	// OpenPrep reads a model's tokenizer, chat template and limits for the parent
	// (engine.OpenPrep; cmd injects it, so this package need not import the engine).
	OpenPrep func(api.ModelConfig) (Prep, error)
	// Groups maps a model id to its worker group: the models of a group share one
	// worker process. A model not in it is a group of its own, named after it.
	Groups map[string]string
	// Command builds the command that runs `lmlite worker` with args; nil: this
	// executable's worker subcommand (os.Executable() worker args...).
	Command func(args []string) *exec.Cmd
	// DataDir holds the workers' pid files (DataDir/workers/GROUP.pid), by which GC
	// finds workers of an earlier run; "": no pid files.
	DataDir      string
	MemoryBudget int64 // each worker's api.Config.MemoryBudget; 0: host memory
	// Devices is the capacity table (device.Probe().Capacities): a worker whose
	// models lease on gpu:N gets CUDA_VISIBLE_DEVICES=N (devices.go); nil: probed.
	Devices      map[string]int64
	Policy       Policy
	Beat         time.Duration // the workers' heartbeat interval; 0: DefaultBeat
	HangAfter    time.Duration // no heartbeat for this long: late, its models not ready; 0: DefaultHangAfter
	KillAfter    time.Duration // no heartbeat for this long: hung, killed; 0: DefaultKillAfter (at least HangAfter)
	StartTimeout time.Duration // spawn to hello; 0: 30 s
	StderrLines  int           // stderr lines kept per group; 0: 20
	// Redis, when set, is where the workers lease their models' memory (lease.Redis):
	// every worker of every process sharing it leases against one table, so two
	// lmlite processes on one machine never over-commit a device, and a dead worker's
	// leases expire after LeaseTTL. nil: each worker leases in its own process.
	Redis    *RedisLeases
	LeaseTTL time.Duration // the workers' api.Config.LeaseTTL; 0: the engine's default
	Logger   *slog.Logger
}

// RedisLeases names the Redis of the shared lease store (configs' redis: block).
type RedisLeases struct {
	URL       string // passed to the worker in its environment (it may hold a password), never on its command line
	KeyPrefix string
	// Node is the parent's node id; worker group G leases as node "Node/G", so that
	// another process's preempt requests for its models reach that worker.
	Node string
}

// envRedisURL carries RedisLeases.URL to a worker.
const envRedisURL = "LMLITE_WORKER_REDIS_URL"

// Pool serves the Block API from worker processes: one per group of models, started
// at New, supervised (heartbeat, hang and crash detection, restart with backoff, a
// circuit breaker), stopped when idle and started again on demand. It satisfies the
// gateway's Engine and ModelLoader, StatsSource (the enginemetrics series) and
// io.Closer, as the in-process engine does.
type Pool struct {
	cfg    Config
	log    *slog.Logger
	runID  string
	models map[string]*pmodel
	order  []string
	groups []*group

	timing  timing
	schemas grammar.SchemaCache
	closed  atomic.Bool
	stop    chan struct{}
	poke    chan struct{}  // wakes the janitor (Pool.wake)
	looks   atomic.Uint64  // the janitor's passes over the groups (a test counts them)
	wg      sync.WaitGroup // the janitor
}

// Prep is what the parent needs of a model without its weights: tokenizing, chat
// rendering with tools, request checks and the tool-call grammar (*engine.Prep, from
// engine.OpenPrep, satisfies it).
type Prep interface {
	Embeddings() bool
	MaxModelLen() int
	Tokenize(text string) []int32
	TokenizeCapped(text string, limit int) ([]int32, error)
	ChatTokens(msgs []api.Message) ([]int32, error)
	ChatTokensCapped(msgs []api.Message, tools []api.Tool, limit int) ([]int32, error)
	ChatTokensTools(msgs []api.Message, tools []api.Tool) ([]int32, error)
	Check(modelID string, req api.Request) error
	CheckTokenIDs(ids []int32, check api.TokenCheck) (int, error)
	ToolSyntax() toolcall.Syntax
	ToolGrammar(tools []api.Tool, compile func([]byte) (*grammar.Grammar, error)) (*grammar.Grammar, error)
	ToolsNative() bool
}

type pmodel struct {
	cfg  api.ModelConfig
	prep Prep
	g    *group
}

// gstate is a worker group's state.
type gstate int

const (
	gStopped  gstate = iota // no worker (not started yet, idle, or closed)
	gStarting               // spawned, no hello yet
	gRunning                // serving
	gStopping               // asked to exit (idle); its exit is not a crash
	gDown                   // crashed or hung, not reaped yet
	gBackoff                // waiting to restart after a crash
	gFailed                 // the circuit is open
)

// group is one worker group and its current process.
type group struct {
	p      *Pool
	name   string
	cfgs   []api.ModelConfig
	index  map[string]int // model id → its index in cfgs and use
	log    *slog.Logger
	stderr *ring

	mu        sync.Mutex // guards everything below
	state     gstate
	change    chan struct{} // closed and replaced at every state change
	proc      *process      // while starting, running, stopping or down
	crashes   []time.Time   // within the policy's window
	restartAt time.Time     // in gBackoff
	lastExit  string        // how the last worker ended
	failed    string        // in gFailed: why, with the last stderr lines
	inflight  int
	use       []idler   // each model's last use and timeouts, as cfgs
	stopAt    time.Time // in gStopping: when the worker was asked to exit
	starts    uint64
	crashN    uint64
	coldStart time.Duration // the last start's spawn-to-hello
}

// New checks the models (reading each one's tokenizer and template, which the parent
// needs to prepare requests), kills stale workers of an earlier run (GC), and starts
// one worker per group.
func New(cfg Config) (*Pool, error) {
	if len(cfg.Models) == 0 {
		return nil, fmt.Errorf("worker: no models configured")
	}
	if cfg.OpenPrep == nil {
		return nil, fmt.Errorf("worker: Config.OpenPrep is nil")
	}
	if cfg.Beat <= 0 {
		cfg.Beat = DefaultBeat
	}
	if cfg.HangAfter <= 0 {
		cfg.HangAfter = DefaultHangAfter
	}
	if cfg.KillAfter <= 0 {
		cfg.KillAfter = DefaultKillAfter
	}
	cfg.KillAfter = max(cfg.KillAfter, cfg.HangAfter)
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.StderrLines <= 0 {
		cfg.StderrLines = 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &Pool{cfg: cfg, log: log, timing: timing{HangAfter: cfg.HangAfter, KillAfter: cfg.KillAfter, StartTimeout: cfg.StartTimeout}, runID: fmt.Sprintf("%d-%x", os.Getpid(), rand.Uint64()), models: map[string]*pmodel{},
		stop: make(chan struct{}), poke: make(chan struct{}, 1)}
	byName := map[string]*group{}
	for _, mc := range cfg.Models {
		if mc.ID == "" {
			return nil, fmt.Errorf("engine: a model has no model_id (path %q)", mc.Path)
		}
		if _, dup := p.models[mc.ID]; dup {
			return nil, fmt.Errorf("engine: model_id %q configured twice", mc.ID)
		}
		prep, err := cfg.OpenPrep(mc)
		if err != nil {
			return nil, err
		}
		name := cfg.Groups[mc.ID]
		if name == "" {
			name = mc.ID
		}
		g := byName[name]
		if g == nil {
			g = &group{p: p, name: name, log: log.With("worker_group", name), stderr: &ring{max: cfg.StderrLines},
				change: make(chan struct{}), index: map[string]int{}}
			byName[name] = g
			p.groups = append(p.groups, g)
		}
		g.index[mc.ID] = len(g.cfgs)
		g.cfgs = append(g.cfgs, mc)
		g.use = append(g.use, idler{Timeout: cmp.Or(mc.IdleTimeout, api.DefaultIdleTimeout)})
		p.models[mc.ID] = &pmodel{cfg: mc, prep: prep, g: g}
		p.order = append(p.order, mc.ID)
	}
	if p.cfg.Devices == nil {
		p.cfg.Devices = device.Probe().Capacities(cfg.MemoryBudget)
	}
	for _, g := range p.groups {
		if _, err := cudaEnv(nil, g.cfgs, p.cfg.Devices); err != nil {
			return nil, err
		}
	}
	p.GC()
	for _, g := range p.groups {
		g.mu.Lock()
		g.startLocked()
		g.mu.Unlock()
	}
	p.wg.Add(1)
	go p.janitor()
	return p, nil
}

// command builds the worker command line.
func (p *Pool) command(args []string) *exec.Cmd {
	if p.cfg.Command != nil {
		return p.cfg.Command(args)
	}
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, append([]string{"worker"}, args...)...)
}

// setLocked changes the state and wakes its waiters.
func (g *group) setLocked(s gstate) {
	g.state = s
	close(g.change)
	g.change = make(chan struct{})
	g.p.wake() // the state's deadlines are new
}

// startLocked spawns the group's worker.
func (g *group) startLocked() {
	models, _ := json.Marshal(g.cfgs)
	args := []string{"--group", g.name, "--run-id", g.p.runID, "--memory-budget", strconv.FormatInt(g.p.cfg.MemoryBudget, 10),
		"--beat", g.p.cfg.Beat.String(), "--models", string(models)}
	if g.p.cfg.LeaseTTL > 0 {
		args = append(args, "--lease-ttl", g.p.cfg.LeaseTTL.String())
	}
	if r := g.p.cfg.Redis; r != nil {
		args = append(args, "--redis-key-prefix", r.KeyPrefix, "--redis-node", g.node())
	}
	g.starts++
	proc, err := spawn(g, args)
	if err != nil {
		g.proc = nil
		g.lastExit = err.Error()
		g.crashedLocked(time.Now())
		return
	}
	g.proc = proc
	g.p.writePID(g.name, proc.pid())
	g.setLocked(gStarting)
}

// node is the group's node id in the Redis lease store.
func (g *group) node() string { return g.p.cfg.Redis.Node + "/" + g.name }

// onHello: the worker is up.
func (g *group) onHello(p *process) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.proc != p || g.state != gStarting {
		return
	}
	g.coldStart = time.Since(p.start)
	now := time.Now()
	for i := range g.use {
		g.use[i].LastUsed = now
	}
	g.setLocked(gRunning)
}

// onLost: the worker's socket ended. Unless the parent closed it, the worker is
// down: not ready from now on, killed (a worker without its socket serves nobody),
// and its exit decides the restart.
func (g *group) onLost(p *process) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.proc != p || p.stopping.Load() || (g.state != gRunning && g.state != gStarting) {
		return
	}
	p.kill()
	g.setLocked(gDown)
}

// onExit: the worker ended. Unless the parent asked for it, it is a crash.
func (g *group) onExit(p *process, err error) {
	g.p.removePID(g.name, p.pid())
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.proc != p {
		return
	}
	g.proc = nil
	why := exitText(err)
	if h := p.hung.Load(); h != nil {
		why = *h
	}
	if p.stopping.Load() {
		g.setLocked(gStopped)
		return
	}
	g.lastExit = why
	g.log.Warn("worker crashed", "pid", p.pid(), "why", why)
	g.crashedLocked(time.Now())
}

// crashedLocked applies the policy's decision after a crash.
func (g *group) crashedLocked(now time.Time) {
	g.crashN++
	var delay time.Duration
	var open bool
	g.crashes, delay, open = g.p.cfg.Policy.OnCrash(g.crashes, now)
	if open || g.p.closed.Load() {
		g.failed = fmt.Sprintf("worker crashed %d times within %s (last: %s); its last stderr lines:\n%s",
			len(g.crashes), g.p.cfg.Policy.withDefaults().Window, g.lastExit, g.stderr.tail())
		if g.p.closed.Load() {
			g.setLocked(gStopped)
			return
		}
		g.log.Error("worker circuit open: its models are failed", "crashes", len(g.crashes), "last", g.lastExit)
		g.setLocked(gFailed)
		return
	}
	g.restartAt = now.Add(delay)
	g.setLocked(gBackoff)
}

// janitor applies each group's timing decision (group.tick) when its next deadline
// comes (a hang, an idle timeout, a backoff's end) or an event changes a group (poke):
// it sleeps in between, so an idle server is not woken every few milliseconds.
func (p *Pool) janitor() {
	defer p.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		p.looks.Add(1)
		now := time.Now()
		var next time.Time
		for _, g := range p.groups {
			if at := g.tick(now); !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
		wait := time.Hour // no deadline: only an event can change anything
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t.Reset(wait)
		select {
		case <-p.stop:
			return
		case <-t.C:
		case <-p.poke:
		}
	}
}

// wake makes the janitor look again now (a group's state or idle deadline changed).
func (p *Pool) wake() {
	select {
	case p.poke <- struct{}{}:
	default: // a look is already due
	}
}

// tick applies the group's decision at now (timing.next) and returns when it is
// next due (zero: at the next event).
func (g *group) tick(now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	v := view{State: g.state, Inflight: g.inflight, Models: g.use, StopAt: g.stopAt, RestartAt: g.restartAt, Closed: g.p.closed.Load()}
	pr := g.proc
	if pr != nil {
		v.Started, v.LastBeat, v.Late = pr.start, time.Unix(0, pr.lastBeat.Load()), pr.late.Load()
		if sts := pr.status.Load(); sts != nil && g.state == gRunning {
			// A model that is loading in its worker is in use: its idle time starts
			// when it is ready (as in process), not at the worker's hello.
			for i, c := range g.cfgs {
				if (*sts)[c.ID].State == api.StateLoading {
					g.use[i].LastUsed = now
				}
			}
		}
	}
	act, why, at := g.p.timing.next(v, now)
	switch act {
	case actKillHung:
		g.log.Warn("worker hung: killing it", "pid", pr.pid(), "why", why)
		pr.hung.Store(&why)
		pr.kill()
		g.setLocked(gDown) // not ready from now on; the exit, soon, decides the restart
	case actLate:
		g.log.Warn("worker late: not ready until it beats again", "pid", pr.pid(), "why", why)
		pr.late.Store(true)
		g.setLocked(gRunning) // the same state, not ready: Models and Ready read late
	case actBack:
		g.log.Info("worker beat again: ready", "pid", pr.pid())
		pr.late.Store(false)
		g.setLocked(gRunning) // wakes the requests waiting in acquire
	case actStopIdle:
		g.log.Info("worker idle: stopping it", "pid", pr.pid())
		pr.stopping.Store(true)
		pr.conn.Close() // the worker exits when its socket closes
		g.stopAt = now
		g.setLocked(gStopping)
	case actKillStopping:
		pr.kill() // it did not exit by itself; its exit is the next event
	case actRestart:
		g.startLocked()
	}
	return at // zero after an action: its state change (or the exit) pokes the janitor
}

// acquire returns the group's running worker for one request to a model, starting it
// if it is stopped and waiting while it starts. The caller must release.
func (g *group) acquire(ctx context.Context, modelID string) (*process, time.Duration, error) {
	start := time.Now()
	waited := false
	for {
		g.mu.Lock()
		if g.p.closed.Load() {
			g.mu.Unlock()
			return nil, 0, api.ErrClosed
		}
		switch g.state {
		case gRunning:
			pr := g.proc
			if pr.late.Load() {
				break // wait until it beats again (actBack) or is killed
			}
			g.inflight++
			g.use[g.index[modelID]].LastUsed = time.Now()
			g.mu.Unlock()
			var cold time.Duration
			if waited {
				cold = time.Since(start)
			}
			return pr, cold, nil
		case gFailed:
			err := &FailedError{Group: g.name, Why: g.failed}
			g.mu.Unlock()
			return nil, 0, err
		case gDown, gBackoff:
			err := fmt.Errorf("%w: worker group %s: %s", api.ErrRestarting, g.name, g.lastExit)
			g.mu.Unlock()
			return nil, 0, err
		case gStopped:
			g.startLocked()
			g.mu.Unlock()
			continue
		}
		ch := g.change
		g.mu.Unlock()
		waited = true
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// release ends a request to a model.
func (g *group) release(modelID string) {
	g.mu.Lock()
	g.inflight--
	g.use[g.index[modelID]].LastUsed = time.Now()
	g.endedLocked()
	g.mu.Unlock()
}

// endedLocked follows a request's end: the last one in flight starts the group's
// idle deadline, which the janitor must now see.
func (g *group) endedLocked() {
	if g.inflight == 0 {
		g.p.wake()
	}
}

// releaseKeep ends a generation request, whose keep_alive (Request.KeepAlive)
// replaces the model's last one: as in process, it replaces the model's idle
// timeout until the next request ends.
func (g *group) releaseKeep(modelID string, keep time.Duration) {
	g.mu.Lock()
	g.inflight--
	u := &g.use[g.index[modelID]]
	u.LastUsed, u.KeepAlive = time.Now(), keep
	g.endedLocked()
	g.mu.Unlock()
}

// Generate starts a request on its model's worker (starting the worker if it is
// stopped). Requests that can never run fail at once, as in process; a request whose
// worker crashes or hangs ends with an error matching api.ErrRestarting.
func (p *Pool) Generate(ctx context.Context, modelID string, req api.Request) (*api.Stream, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	if err := m.prep.Check(modelID, req); err != nil {
		return nil, err
	}
	pr, cold, err := m.g.acquire(ctx, modelID)
	if err != nil {
		return nil, err
	}
	s := api.NewStream()
	c, id, err := pr.begin(fSubmit, submitMsg{Model: modelID, Req: req}, s)
	if err == nil {
		err = <-c.answer // a round trip, or the worker's death
	}
	if err != nil {
		m.g.release(modelID)
		return nil, err
	}
	go func() {
		u, err := forward(ctx, pr, id, c)
		m.g.releaseKeep(modelID, req.KeepAlive)
		u.ColdStart += cold
		s.Finish(u, err)
	}()
	return s, nil
}

// forward waits for a call's end (its tokens go to its stream from the reader); a
// cancelled context cancels the request in the worker and mutes the call, whose end
// is still waited for.
func forward(ctx context.Context, pr *process, id uint64, c *call) (api.Usage, error) {
	select {
	case <-c.box.wake:
	case <-ctx.Done():
		c.muted.Store(true)
		pr.cancel(id)
		<-c.box.wake
	}
	return c.box.end()
}

// Tokenize is Block.Tokenize, done in the parent.
func (p *Pool) Tokenize(modelID, text string) ([]int32, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.Tokenize(text), nil
}

// TokenizeCapped is Block.TokenizeCapped, done in the parent.
func (p *Pool) TokenizeCapped(modelID, text string, limit int) ([]int32, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.TokenizeCapped(text, limit)
}

// ChatTokensCapped is Block.ChatTokensCapped, done in the parent.
func (p *Pool) ChatTokensCapped(modelID string, msgs []api.Message, tools []api.Tool, limit int) ([]int32, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.ChatTokensCapped(msgs, tools, limit)
}

// ChatTokens is Block.ChatTokens, done in the parent.
func (p *Pool) ChatTokens(modelID string, msgs []api.Message) ([]int32, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.ChatTokens(msgs)
}

// Models reports each model's status in configuration order: the worker's own report
// (its last heartbeat) while it runs, else the group's state: loading while it starts
// or restarts (Err says why it restarts), unloaded while it is stopped, failed when
// the circuit is open (Err holds the worker's last stderr lines).
func (p *Pool) Models() []api.ModelStatus {
	out := make([]api.ModelStatus, 0, len(p.order))
	for _, id := range p.order {
		m := p.models[id]
		g := m.g
		st := api.ModelStatus{ID: id, Replicas: max(m.cfg.Replicas, 1), MaxModelLen: m.prep.MaxModelLen(), Embeddings: m.prep.Embeddings()}
		g.mu.Lock()
		switch g.state {
		case gRunning:
			st.State = api.StateLoading
			if sts := g.proc.status.Load(); sts != nil {
				if s, ok := (*sts)[id]; ok {
					st = s
				}
			}
			if g.proc.late.Load() {
				st.State, st.Err = api.StateLoading, fmt.Sprintf("worker late: no heartbeat for %s", g.p.cfg.HangAfter)
			}
		case gStarting:
			st.State = api.StateLoading
		case gDown, gBackoff:
			st.State, st.Err = api.StateLoading, "worker restarting: "+g.lastExit
		case gStopped, gStopping:
			st.State = api.StateUnloaded
		case gFailed:
			st.State, st.Err = api.StateFailed, g.failed
		}
		st.ColdStart += g.coldStart
		g.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Ready reports whether every model is ready or cleanly unloaded, as Block.Ready.
func (p *Pool) Ready() bool {
	for _, st := range p.Models() {
		if st.State != api.StateReady && st.State != api.StateUnloaded {
			return false
		}
	}
	return true
}

// Load starts the model's worker if it is stopped (or failed: an operator's load
// retries it) and waits until the model is loaded.
func (p *Pool) Load(ctx context.Context, modelID string) error {
	m, ok := p.models[modelID]
	if !ok {
		return fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	m.g.mu.Lock()
	if m.g.state == gFailed {
		m.g.crashes = nil
		m.g.setLocked(gStopped)
	}
	m.g.mu.Unlock()
	pr, _, err := m.g.acquire(ctx, modelID)
	if err != nil {
		return err
	}
	defer m.g.release(modelID)
	return pr.rpc(ctx, fLoad, modelID)
}

// Unload unloads the model in its worker, if the worker runs.
func (p *Pool) Unload(modelID string) error {
	m, ok := p.models[modelID]
	if !ok {
		return fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	m.g.mu.Lock()
	pr := m.g.proc
	running := m.g.state == gRunning
	m.g.mu.Unlock()
	if !running {
		return nil
	}
	return pr.rpc(context.Background(), fUnload, modelID)
}

func (pr *process) rpc(ctx context.Context, typ byte, modelID string) error {
	return pr.rpcMsg(ctx, typ, modelMsg{Model: modelID})
}

func (pr *process) rpcMsg(ctx context.Context, typ byte, m modelMsg) error {
	c, _, err := pr.begin(typ, m, nil)
	if err != nil {
		return err
	}
	select {
	case err := <-c.answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GC kills the workers of an earlier run that are still alive (found by their pid
// files) and resets failed groups, so that the next request tries them again.
func (p *Pool) GC() {
	p.killStale()
	for _, g := range p.groups {
		g.mu.Lock()
		if g.state == gFailed {
			g.crashes = nil
			g.setLocked(gStopped)
		}
		g.mu.Unlock()
	}
}

// Close stops every worker (asking first, killing after a grace period) and waits
// for them to exit. Requests in flight end with api.ErrRestarting.
func (p *Pool) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	close(p.stop)
	p.wg.Wait()
	for _, g := range p.groups {
		g.mu.Lock()
		if pr := g.proc; pr != nil {
			pr.stopping.Store(true)
			pr.conn.Close()
			ch := g.change
			go func() {
				select {
				case <-ch:
				case <-time.After(5 * time.Second):
					pr.kill()
				}
			}()
		}
		g.mu.Unlock()
	}
	for _, g := range p.groups {
		for {
			g.mu.Lock()
			if g.proc == nil {
				g.mu.Unlock()
				break
			}
			ch := g.change
			g.mu.Unlock()
			<-ch
		}
	}
	return nil
}

// FailedError is a request's error when its model's worker group has failed: the
// circuit is open (Policy.MaxCrashes crashes within Window) until GC or an admin
// load. Why is the crashes' account with the worker's last stderr lines.
type FailedError struct {
	Group, Why string
}

func (e *FailedError) Error() string {
	return "engine: worker group " + e.Group + " failed: " + e.Why
}

var stateNames = [...]string{"stopped", "starting", "running", "stopping", "down", "backoff", "failed"}

// Workers reports the worker groups and their processes (the admin API's
// /admin/workers, through the gateway's WorkerSource).
func (p *Pool) Workers() []workerapi.Status {
	now := time.Now()
	var out []workerapi.Status
	for _, g := range p.groups {
		w := workerapi.Status{Group: g.name, Stderr: g.stderr.lines()}
		for _, c := range g.cfgs {
			w.Models = append(w.Models, c.ID)
		}
		g.mu.Lock()
		w.State, w.Starts, w.Crashes, w.LastExit, w.ColdStart = stateNames[g.state], g.starts, g.crashN, g.lastExit, g.coldStart
		if g.starts > 0 {
			w.Restarts = g.starts - 1
		}
		if g.state == gFailed {
			w.Error = g.failed
		}
		if g.proc != nil {
			w.PID, w.Started, w.Uptime = g.proc.pid(), g.proc.start, now.Sub(g.proc.start)
			if g.state == gRunning && g.proc.late.Load() {
				w.State = "late"
			}
		}
		g.mu.Unlock()
		out = append(out, w)
	}
	return out
}

// Stats is Block.Stats for the Pool: its models (Models) and its worker processes
// (Workers), which the enginemetrics package presents as series.
func (p *Pool) Stats() api.Stats {
	return api.Stats{Models: p.Models(), Workers: p.Workers()}
}

// CheckTokenIDs is Block.CheckTokenIDs, done in the parent.
func (p *Pool) CheckTokenIDs(modelID string, ids []int32, check api.TokenCheck) (int, error) {
	m, ok := p.models[modelID]
	if !ok {
		return -1, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.CheckTokenIDs(ids, check)
}

// ToolsNative is Block.ToolsNative, answered in the parent.
func (p *Pool) ToolsNative(modelID string) bool {
	m, ok := p.models[modelID]
	return ok && m.prep.ToolsNative()
}
