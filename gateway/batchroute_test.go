package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/registry"
	"github.com/lmlite/lmlite/tenancy"
)

// routedGateway is one process of a deployment on one Redis whose processes serve
// different models: its own Redis client, keys and quota state, ledger, batch store
// and registry keeper, with batch lines on the Redis queue.
type routedGateway struct {
	srv   *Server
	store *tenancy.Store
	url   string
	k     *registry.Keeper
}

func startRoutedGateway(t *testing.T, rs *redistest.Server, yaml, node string) *routedGateway {
	t.Helper()
	cfg, err := configs.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0), Name: node})
	if err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	rk, err := tenancy.NewRedisKeys(rc, "gwtest:", true)
	if err != nil {
		t.Fatal(err)
	}
	store.ShareKeys(rk)
	sh := tenancy.NewRedisShared(rc, tenancy.RedisOptions{KeyPrefix: "gwtest:", Node: node, TTL: 3 * time.Second})
	ten := tenancy.New(store)
	ten.UseShared(withTestLeases(t, sh, store))
	bs, err := batch.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := registry.NewKeeper(registry.NewRedis(rc, "gwtest:"), registry.KeeperOptions{TTL: 600 * time.Millisecond})
	srv, err := New(mustGatewayConfig(t, cfg), newFakeEngine(), ten, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Peers: k, NodeID: node, Batches: bs, BatchConcurrency: 4,
		BatchQueue: batch.NewRedisQueue(rc, batch.RedisQueueOptions{KeyPrefix: "gwtest:", Node: node, Lease: time.Second})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &routedGateway{srv: srv, store: store, url: "http://" + ln.Addr().String(), k: k}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	k.Start(func() registry.Node {
		return registry.Node{ID: node, Addr: g.url, Models: srv.RegistryModels(), InFlight: srv.InFlight()}
	})
	t.Cleanup(func() {
		k.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
		bs.Close()
		sh.Close()
		rk.Close()
		rc.Close()
		store.Close()
	})
	return g
}

const routedA = `
ledger: {sync: process}
models:
  - {id: tiny, path: tiny.gguf, max_model_len: 512, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers: {fast: [{model: tiny}]}
plans: {open: {batch_discount: 0.5}}
tenants: [{id: acme, plan: open}]
`

const routedB = `
ledger: {sync: process}
models:
  - {id: big, path: big.gguf, max_model_len: 512, prompt_usd_per_1k: 0.01, completion_usd_per_1k: 0.03}
tiers: {deep: [{model: big}]}
plans: {open: {batch_discount: 0.5}}
tenants: [{id: acme, plan: open}]
`

// TestRedisBatchLinesRunWhereTheirModelIs: three processes on one Redis, A serving
// tiny (tier fast), B and C serving big (tier deep). A batch created on A with lines
// for big, for tiny and for auto (routed by tier: the plan's default mode, balanced,
// walks balanced then fast, which only A has) validates on A (big priced from B's and
// C's announcements), and completes: every big line ran on B or C, never on A; every
// tiny and auto line on A; each line once, charged once at the batch discount in the
// ledger of the process that ran it, and the job's spend is the ledgers' sum. Then a
// batch created on B of tier:fast lines runs them on A. A batch naming a model nobody
// serves fails validation with model_not_found.
func TestRedisBatchLinesRunWhereTheirModelIs(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	a := startRoutedGateway(t, rs, routedA, "a")
	b := startRoutedGateway(t, rs, routedB, "b")
	c3 := startRoutedGateway(t, rs, routedB, "c")
	for _, g := range []*routedGateway{a, b, c3} {
		for deadline := time.Now().Add(5 * time.Second); len(g.k.Nodes()) < 3; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the gateways never saw each other")
			}
		}
	}
	key, _, err := a.store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := openai.NewClient(option.WithBaseURL(a.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	var lines []string
	model := map[string]string{}
	for i := range 30 {
		m := []string{"big", "tiny", "big", "auto"}[i%4]
		id := fmt.Sprintf("r%02d", i)
		model[id] = m
		lines = append(lines, chatLine(id, m, 5, ""))
	}
	bt := waitBatch(t, c, newBatch(t, c, upload(t, c, lines...).ID, nil).ID)
	out, bad := content(t, c, bt.OutputFileID), content(t, c, bt.ErrorFileID)
	if bt.Status != openai.BatchStatusCompleted || len(out) != 30 || len(bad) != 0 ||
		bt.RequestCounts.Total != 30 || bt.RequestCounts.Completed != 30 || bt.RequestCounts.Failed != 0 {
		for _, l := range bad {
			t.Logf("error line %s (%s): %+v %+v", l.CustomID, model[l.CustomID], l.Error, l.Response)
		}
		t.Fatalf("batch %s %+v: %d out, %d errors", bt.Status, bt.RequestCounts, len(out), len(bad))
	}
	seen := map[string]bool{}
	for _, l := range out {
		var r struct{ Model string }
		if l.Response == nil || l.Response.StatusCode != 200 || json.Unmarshal(l.Response.Body, &r) != nil || seen[l.CustomID] {
			t.Fatalf("output line %+v", l)
		}
		seen[l.CustomID] = true
		if want := strings.Replace(model[l.CustomID], "auto", "tiny", 1); r.Model != want {
			t.Fatalf("%s ran on %s, want %s", l.CustomID, r.Model, want)
		}
	}
	// Where each line ran: the ledger of the process that ran it, once, at half price.
	ran := map[string]string{}
	var spent money.Money
	for node, g := range map[string]*routedGateway{"a": a, "b": b, "c": c3} {
		g.store.Ledger(func(e tenancy.Entry) error {
			id, ok := strings.CutPrefix(e.RequestID, bt.ID+"-")
			if !ok {
				return nil
			}
			var i int
			fmt.Sscan(id, &i)
			cid := fmt.Sprintf("r%02d", i)
			if ran[cid] != "" {
				t.Errorf("%s charged on %s and %s", cid, ran[cid], node)
			}
			ran[cid] = node
			price := money.Price{PromptPer1K: money.USD(0.001), CompletionPer1K: money.USD(0.002)}
			if e.Model == "big" {
				price = money.Price{PromptPer1K: money.USD(0.01), CompletionPer1K: money.USD(0.03)}
			}
			if full := price.Cost(e.PromptTokens, e.CompletionTokens); e.Cost != discounted(full, 0.5) || e.Cost == 0 {
				t.Errorf("%s on %s (%s) charged %s, full price %s", cid, node, e.Model, e.Cost, full)
			}
			spent += e.Cost
			return nil
		})
	}
	perNode := map[string]int{}
	for cid, m := range model {
		node := ran[cid]
		perNode[node]++
		switch {
		case node == "":
			t.Fatalf("%s (%s) is in no ledger", cid, m)
		case m == "big" && node == "a", m != "big" && node != "a":
			t.Fatalf("%s (%s) ran on %s", cid, m, node)
		}
	}
	t.Logf("lines per process %v", perNode)
	job, err := a.srv.batches.m.Store().Job("acme", bt.ID)
	if err != nil || job.Spent != spent {
		t.Fatalf("the job spent %s, the ledgers %s (%v)", job.Spent, spent, err)
	}
	if perNode["b"] == 0 || perNode["c"] == 0 {
		t.Fatalf("lines per process %v: want big lines on both B and C", perNode)
	}

	cb := openai.NewClient(option.WithBaseURL(b.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	bt = waitBatch(t, cb, newBatch(t, cb, upload(t, cb, chatLine("f1", "tier:fast", 5, ""), chatLine("f2", "tier:fast", 5, "")).ID, nil).ID)
	out = content(t, cb, bt.OutputFileID)
	if bt.Status != openai.BatchStatusCompleted || bt.RequestCounts.Completed != 2 || len(out) != 2 {
		t.Fatalf("tier:fast lines created on B: %s %+v %+v", bt.Status, bt.RequestCounts, bt.Errors)
	}
	for _, l := range out {
		if l.Response == nil || l.Response.StatusCode != 200 || !strings.Contains(string(l.Response.Body), `"model":"tiny"`) {
			t.Fatalf("tier:fast line %+v", l)
		}
	}

	bt = newBatch(t, c, upload(t, c, chatLine("x", "nope", 5, "")).ID, nil)
	bt = waitBatch(t, c, bt.ID)
	if bt.Status != openai.BatchStatusFailed || len(bt.Errors.Data) != 1 || bt.Errors.Data[0].Code != "invalid_request" ||
		!strings.Contains(bt.Errors.Data[0].Message, "does not exist") {
		t.Fatalf("a batch for a model nobody serves: %s %+v", bt.Status, bt.Errors.Data)
	}
}
