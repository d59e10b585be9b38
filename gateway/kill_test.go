package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

// TestKilledServerKeepsAcknowledgedUsage runs a gateway in a child process, sends it
// requests from several connections, kills it with SIGKILL mid-traffic, and checks that
// every request whose response the client received is in the ledger.
func TestKilledServerKeepsAcknowledgedUsage(t *testing.T) {
	if os.Getenv("LMLITE_GATEWAY_CHILD") != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LMLITE_GATEWAY_CHILD="+dir)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var url, key string
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "listening" {
			url, key = f[1], f[2]
			break
		}
	}
	if url == "" {
		t.Fatal("child did not start")
	}
	go io.Copy(io.Discard, out)

	var mu sync.Mutex
	acked := map[string]bool{}
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("kill-%d-%d", g, i)
				req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
					strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":3}`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("X-Request-Id", id)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the server is gone
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), `"finish_reason"`) {
					return
				}
				mu.Lock()
				acked[id] = true
				n := len(acked)
				mu.Unlock()
				if n == 200 {
					once.Do(func() {
						cmd.Process.Signal(syscall.SIGKILL)
						close(killed)
					})
				}
			}
		}()
	}
	wg.Wait()
	cmd.Wait()
	select {
	case <-killed:
	default:
		t.Fatalf("only %d requests succeeded before the child died", len(acked))
	}
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	found := map[string]bool{}
	store.Ledger(func(e tenancy.Entry) error { found[e.ClientRequestID] = true; return nil })
	lost := 0
	for id := range acked {
		if !found[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged requests missing from the ledger", lost, len(acked))
	}
	t.Logf("%d acknowledged, %d in the ledger", len(acked), len(found))
}

// startGatewayChild starts TestGatewayChild on dir with the extra environment env and
// returns it with its URL and key.
func startGatewayChild(t *testing.T, dir string, env ...string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "LMLITE_GATEWAY_CHILD="+dir), env...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "listening" {
			go io.Copy(io.Discard, out)
			return cmd, f[1], f[2]
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Fatal("child did not start")
	return nil, "", ""
}

// TestKilledMidStreamIsChargedAtRestart: the server is killed (SIGKILL) while it
// streams a generation to a client that has read some of its tokens; the restarted
// server charges that request (its hold, logged when the generation started, has no
// settlement) its reservation: the prompt and max_tokens at the model's prices, at
// least what was produced. (Before holds, the reservation lived in memory only and
// the interrupted request was never charged.)
func TestKilledMidStreamIsChargedAtRestart(t *testing.T) {
	if os.Getenv("LMLITE_GATEWAY_CHILD") != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("child processes")
	}
	dir := t.TempDir()
	cmd, url, key := startGatewayChild(t, dir, "LMLITE_GATEWAY_DELAY=20ms")
	defer cmd.Process.Kill()
	const maxTokens = 200 // 4 s of tokens: killed long before the end
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(`{"model":"tiny","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"tell me"}]}`, maxTokens)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Request-Id", "cut-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	got := 0
	for got < 10 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			got++
		}
	}
	if got < 10 {
		t.Fatalf("only %d chunks before the stream ended", got)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	resp.Body.Close()

	cmd, _, _ = startGatewayChild(t, dir) // the restart; listening: the interrupted request is settled
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var cut []tenancy.Entry
	store.Ledger(func(e tenancy.Entry) error {
		if e.ClientRequestID == "cut-1" {
			cut = append(cut, e)
		}
		return nil
	})
	price := money.Price{PromptPer1K: money.USD(0.001), CompletionPer1K: money.USD(0.002)}
	day, _, err := store.Spent("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(cut) != 1 || cut[0].PromptTokens == 0 || cut[0].Cost != price.Cost(cut[0].PromptTokens, maxTokens) || day != cut[0].Cost {
		t.Fatalf("the interrupted request's entries %+v; the tenant's spend %s", cut, day)
	}
	if min := price.Cost(cut[0].PromptTokens, got); cut[0].Cost < min {
		t.Fatalf("charged %s, less than the prompt and the %d tokens received (%s)", cut[0].Cost, got, min)
	}
	t.Logf("interrupted after %d tokens; charged %s (%s)", got, cut[0].Cost, cut[0].Finish)
}

func TestGatewayChild(t *testing.T) {
	dir := os.Getenv("LMLITE_GATEWAY_CHILD")
	if dir == "" {
		t.Skip("only as the child of TestKilledServerKeepsAcknowledgedUsage")
	}
	cfg, err := configs.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	cfg.Ledger.Sync = "fsync"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncFsync})
	if err != nil {
		t.Fatal(err)
	}
	key, _, _ := store.CreateKey("acme", time.Now())
	eng := newFakeEngine()
	if d, err := time.ParseDuration(os.Getenv("LMLITE_GATEWAY_DELAY")); err == nil {
		eng.Delay = d // one token every d
	}
	srv, err := New(mustGatewayConfig(t, cfg), eng, tenancy.New(store), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("listening http://%s %s\n", ln.Addr(), key)
	go srv.Serve(ln)
	<-context.Background().Done() // until killed
}
