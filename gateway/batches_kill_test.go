package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

// TestBatchKill9ChargesEachLineOnce runs a 500-line batch on a gateway in a child
// process (the fake engine), kills the child with SIGKILL at several points and
// restarts it on the same data directory until the batch completes, in three runs.
// Then every line is in the output file exactly once, every line is charged exactly
// once in the tenant's ledger (a line charged before a kill and run again after it is
// charged nothing more), and the job's spend equals the ledger's and the sum of the
// output lines' usage at the model's prices.
func TestBatchKill9ChargesEachLineOnce(t *testing.T) {
	if os.Getenv("LMLITE_BATCH_CHILD") != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("child processes")
	}
	price := money.Price{PromptPer1K: money.USD(0.001), CompletionPer1K: money.USD(0.002)}
	for run := range 3 {
		dir := t.TempDir()
		var c openai.Client
		var batchID string
		kills := 0
		for start := 0; ; start++ {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBatchGatewayChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "LMLITE_BATCH_CHILD="+dir)
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			var url, key string
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "listening" {
					url, key = f[1], f[2]
					break
				}
			}
			if url == "" {
				cmd.Process.Kill()
				t.Fatal("child did not start")
			}
			go io.Copy(io.Discard, out)
			c = openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
			if start == 0 {
				var lines []string
				for i := range 500 {
					lines = append(lines, chatLine(fmt.Sprintf("r%d", i), "tiny", 3, ""))
				}
				batchID = newBatch(t, c, upload(t, c, lines...).ID, nil).ID
			}
			if kills == 3 {
				b := waitBatch(t, c, batchID)
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
				if b.Status != openai.BatchStatusCompleted {
					t.Fatalf("run %d: batch %s", run, b.Status)
				}
				break
			}
			time.Sleep(time.Duration(40+(run*53+start*97)%160) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			kills++
		}
		bs, err := batch.OpenStore(filepath.Join(dir, "batch"))
		if err != nil {
			t.Fatal(err)
		}
		job, err := bs.Job("acme", batchID)
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := bs.Open("acme", job.OutputFileID)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		var usage money.Money
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l outLine
			var cc openai.ChatCompletion
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Response == nil || json.Unmarshal(l.Response.Body, &cc) != nil {
				t.Fatalf("line %s: %v", sc.Bytes(), err)
			}
			if seen[l.CustomID] {
				t.Fatalf("run %d: %s twice in the output", run, l.CustomID)
			}
			seen[l.CustomID] = true
			usage += price.Cost(int(cc.Usage.PromptTokens), int(cc.Usage.CompletionTokens))
		}
		f.Close()
		bs.Close()
		if len(seen) != 500 || job.ErrorFileID != "" {
			t.Fatalf("run %d: %d lines in the output, error file %q", run, len(seen), job.ErrorFileID)
		}
		store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		charged := map[string]int{}
		var ledger money.Money
		reruns := 0
		store.Ledger(func(e tenancy.Entry) error {
			if strings.HasPrefix(e.RequestID, batchID) {
				ledger += e.Cost
				if strings.HasSuffix(e.RequestID, "-rerun") {
					reruns++
				}
				if e.Cost > 0 {
					charged[strings.TrimSuffix(e.RequestID, "-rerun")]++
				}
			}
			return nil
		})
		store.Close()
		for id, n := range charged {
			if n != 1 {
				t.Fatalf("run %d: %s charged %d times", run, id, n)
			}
		}
		if len(charged) != 500 || ledger != job.Spent || usage != job.Spent {
			t.Fatalf("run %d: %d lines charged; ledger %s, job %s, output usage %s", run, len(charged), ledger, job.Spent, usage)
		}
		t.Logf("run %d: %d kills, %d lines run again after a kill without a second charge, spent %s", run, kills, reruns, job.Spent)
	}
}

// startBatchChild starts TestBatchGatewayChild on dir with the extra environment env
// and returns it with its URL and key.
func startBatchChild(t *testing.T, dir string, env ...string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBatchGatewayChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "LMLITE_BATCH_CHILD="+dir), env...)
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

// TestForgedRequestIDsDoNotMakeBatchLinesFree: a tenant creates a batch whose lines
// cannot run yet (their model's queue is full), sends cheap requests of its own with
// X-Request-Id set to each line's id ("<batch id>-<n>", the form of a line's ledger
// id), and the server is killed (SIGKILL) and restarted. The job resumes and every
// line is charged its full cost: a client's id is not proof that a line was charged.
// (Before client ids were kept apart from the server's, the restarted server took
// those requests for the lines' charges and ran the lines at 0.)
func TestForgedRequestIDsDoNotMakeBatchLinesFree(t *testing.T) {
	if os.Getenv("LMLITE_BATCH_CHILD") != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("child processes")
	}
	const lines = 5
	dir := t.TempDir()
	cmd, url, key := startBatchChild(t, dir, "LMLITE_BATCH_REFUSE=big")
	c := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	var ls []string
	for i := range lines {
		ls = append(ls, chatLine(fmt.Sprintf("r%d", i), "big", 8, ""))
	}
	batchID := newBatch(t, c, upload(t, c, ls...).ID, nil).ID
	ts := &testServer{t: t, url: url}
	for i := range lines {
		resp, body := ts.post("/v1/chat/completions", key, `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`,
			"X-Request-Id", fmt.Sprintf("%s-%d", batchID, i))
		if resp.StatusCode != 200 {
			t.Fatalf("cheap request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	cmd, url, key = startBatchChild(t, dir) // the restart: the model serves now
	c = openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	b := waitBatch(t, c, batchID)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != lines {
		t.Fatalf("batch %s, %d completed", b.Status, b.RequestCounts.Completed)
	}

	// What the lines cost at big's prices, from their output's usage.
	price := money.Price{PromptPer1K: money.USD(0.01), CompletionPer1K: money.USD(0.03)}
	bs, err := batch.OpenStore(filepath.Join(dir, "batch"))
	if err != nil {
		t.Fatal(err)
	}
	job, err := bs.Job("acme", batchID)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := bs.Open("acme", job.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	var want money.Money
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l outLine
		var cc openai.ChatCompletion
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Response == nil || json.Unmarshal(l.Response.Body, &cc) != nil {
			t.Fatalf("line %s: %v", sc.Bytes(), err)
		}
		want += price.Cost(int(cc.Usage.PromptTokens), int(cc.Usage.CompletionTokens))
	}
	f.Close()
	bs.Close()
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var charged, cheap money.Money
	store.Ledger(func(e tenancy.Entry) error {
		switch e.Model {
		case "big":
			charged += e.Cost
		case "tiny":
			cheap += e.Cost
		}
		return nil
	})
	if want <= 0 || charged != want || job.Spent != want {
		t.Fatalf("the %d lines were charged %s in the ledger and %s by the job, want %s (the cheap requests cost %s)",
			lines, charged, job.Spent, want, cheap)
	}
	t.Logf("lines charged %s; the cheap requests %s", charged, cheap)
}

// TestBatchGatewayChild is the child of TestBatchKill9ChargesEachLineOnce: a gateway
// with the Batch API on the data directory it is given, until killed.
func TestBatchGatewayChild(t *testing.T) {
	dir := os.Getenv("LMLITE_BATCH_CHILD")
	if dir == "" {
		t.Skip("only as the child of TestBatchKill9ChargesEachLineOnce")
	}
	cfg := parseConfig(t, batchConfig, dir)
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key")
	key, err := os.ReadFile(keyFile)
	if err != nil {
		k, _, err := store.CreateKey("acme", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		key = []byte(k)
		os.WriteFile(keyFile, key, 0o600)
	}
	bs, err := batch.OpenStore(filepath.Join(dir, "batch"))
	if err != nil {
		t.Fatal(err)
	}
	eng := newFakeEngine()
	eng.Delay = 200 * time.Microsecond
	if m := os.Getenv("LMLITE_BATCH_REFUSE"); m != "" { // the model's queue is full: its lines wait
		eng.Refuse = map[string]error{m: engine.ErrQueueFull}
	}
	srv, err := New(mustGatewayConfig(t, cfg), eng, tenancy.New(store), Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Batches: bs, BatchConcurrency: 8,
		BatchCrashLimit: -1}) // the test's kills are no line's fault: none is failed for them
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
