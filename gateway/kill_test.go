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
	srv, err := New(mustGatewayConfig(t, cfg), newFakeEngine(), tenancy.New(store), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
