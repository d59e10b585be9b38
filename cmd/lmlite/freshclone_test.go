package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/testenv"
)

// warningLine is what counts as a warning in `make run`'s output: any line with
// "warning" in it, whatever the case (gcc's and cgo's "warning:", go's and make's), and
// the server's WARN-level log lines (slog's "level=WARN").
var warningLine = regexp.MustCompile(`(?i)warning|level=WARN`)

// warningLines are the lines of out that warningLine matches.
func warningLines(out string) []string {
	var w []string
	for _, l := range strings.Split(out, "\n") {
		if warningLine.MatchString(l) {
			w = append(w, l)
		}
	}
	return w
}

func TestWarningLines(t *testing.T) {
	out := "go build -buildvcs=auto -o bin/lmlite ./cmd/lmlite\n" +
		"nvml.h:1234:5: warning: 'nvmlDeviceGetHandleByIndex' is deprecated [-Wdeprecated-declarations]\n" +
		"# github.com/NVIDIA/go-nvml/pkg/nvml\n" +
		"time=2026-11-28T06:00:00Z level=WARN msg=\"budgets that never bind\"\n" +
		"time=2026-11-28T06:00:00Z level=INFO msg=ready\n" +
		"make: Warning: File 'Makefile' has modification time in the future\n" +
		"model demo-random-llama: RANDOM weights\n"
	w := warningLines(out)
	if len(w) != 3 || !strings.Contains(w[0], "nvml.h") || !strings.Contains(w[1], "level=WARN") || !strings.HasPrefix(w[2], "make: Warning") {
		t.Errorf("warningLines = %q, want gcc's, the WARN log line and make's", w)
	}
}

// fixedClonePath is where TestFreshCloneMakeRun clones a checkout with the shared
// build cache: the same directory on every run, from any checkout (Go keys a package's
// cache entry on its directory, so a clean-clone CI, whose checkout is at a new path
// each time, still finds the last run's packages), one run at a time under an flock
// held until the test ends, emptied first and removed at the end.
func fixedClonePath(t *testing.T) string {
	base := filepath.Join(os.TempDir(), "lmlite-fresh-clone")
	if err := os.MkdirAll(base, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(base, "lmlite")
	removeClone := func() {
		if err := os.RemoveAll(clone); err != nil {
			t.Error(err)
		}
	}
	removeClone()
	t.Cleanup(func() { removeClone(); lock.Close() })
	return clone
}

// TestFreshCloneMakeRun is the README's "Try it" as a new user meets it: `git clone`
// of this checkout's HEAD, `make run` in it (on a free loopback port through the
// Makefile's LISTEN, without the CGO_CFLAGS the developers export: the Makefile must
// silence go-nvml's warnings itself), then: not one warning line in the build's and
// the server's output (warningLine), the dashboard's URL in the banner (and it
// answers), a chat with tools on "auto" answered, an embedding, and every ```sh block
// of README.md with a curl to the demo run by bash as the README shows it (each curl
// must succeed: --fail-with-body), then Ctrl-C (SIGINT) drains the server and `make
// run` exits 0.
//
// The build cache: with LMLITE_FRESH_CLONE=1 it is empty (a new directory), as on a
// new machine; that build takes minutes on two cores (the test logs how long), too
// long for `make test`, which runs this test with the shared build cache: the
// dependencies, go-nvml's cgo included, come from the cache, and the clone is made
// at the same path on every run from this checkout (fixedClonePath), so only the
// lmlite packages changed since the last run compile, and go-nvml's warnings are checked only by the empty-cache run
// (`LMLITE_FRESH_CLONE=1 go test -run TestFreshCloneMakeRun ./cmd/lmlite`). The module
// cache is the environment's, read with GOPROXY=off: no network; the test skips (fails
// in CI) when a module is missing there.
func TestFreshCloneMakeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a clone of the repository with make: not in -short")
	}
	for _, tool := range []string{"git", "make", "bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool+" (the README's examples and the clone need it)", err)
		}
	}
	root := testenv.RepoRoot(t)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").CombinedOutput()
	if err != nil {
		testenv.Missing(t, "a git checkout of lmlite (the test clones it)", fmt.Errorf("%v: %s", err, head))
	}
	// The bounded run clones to a fixed directory for this checkout (removed first, so
	// still a fresh clone): without -trimpath the go command keys each package's
	// compile in the build cache on the package's directory, so a clone at a new path
	// recompiles every lmlite package, but one at the path of the previous run's clone
	// compiles only the packages that changed since.
	dir := t.TempDir()
	clone := filepath.Join(dir, "lmlite")
	if os.Getenv("LMLITE_FRESH_CLONE") != "1" {
		clone = fixedClonePath(t)
	}
	if out, err := exec.Command("git", "clone", "-q", root, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone %s: %v\n%s", root, err, out)
	}
	if out, _ := exec.Command("git", "-C", clone, "rev-parse", "HEAD").Output(); string(out) != string(head) {
		t.Fatalf("the clone is at %s, the checkout at %s", out, head)
	}

	// The environment of a new user's shell: none of the developers' CGO_CFLAGS, no
	// make of ours around it, no module downloads.
	fresh := os.Getenv("LMLITE_FRESH_CLONE") == "1"
	gocache := filepath.Join(dir, "gocache")
	if !fresh {
		b, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			t.Fatal(err)
		}
		gocache = strings.TrimSpace(string(b))
	}
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "CGO_CFLAGS", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "GOCACHE", "GOPROXY", "LMLITE_ADMIN_KEY", "LMLITE_RUN_DIR":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "GOCACHE="+gocache, "GOPROXY=off", "LMLITE_RUN_DIR="+filepath.Join(dir, "run"))
	deps := exec.Command("go", "list", "-deps", "./cmd/lmlite") // what make build reads
	deps.Dir, deps.Env = clone, env
	if out, err := deps.CombinedOutput(); err != nil {
		testenv.Missing(t, "the modules lmlite builds with, in the module cache (GOPROXY=off)", fmt.Errorf("%v: %.2000s", err, out))
	}

	addr := freeAddr(t)
	logPath := filepath.Join(dir, "make-run.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	makeRun := exec.Command("make", "run", "LISTEN="+addr)
	makeRun.Dir, makeRun.Env = clone, env
	makeRun.Stdout, makeRun.Stderr = logf, logf
	makeRun.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := makeRun.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- makeRun.Wait() }()
	output := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	t.Cleanup(func() {
		syscall.Kill(-makeRun.Process.Pid, syscall.SIGKILL)
		<-done
		done <- nil
		if t.Failed() {
			t.Logf("make run's output:\n%s", output())
		}
	})

	// Ready: the build, the demo models written, the server listening.
	base := "http://" + addr
	limit := 10 * time.Minute
	if fresh {
		limit = 30 * time.Minute
	}
	if d, ok := t.Deadline(); ok && time.Until(d)-30*time.Second < limit {
		limit = time.Until(d) - 30*time.Second
	}
	for deadline := start.Add(limit); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("make run stopped before the server was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run not ready after %s", limit)
		}
	}
	t.Logf("make run in a fresh clone: ready after %s (build cache: %s)", time.Since(start).Round(time.Second),
		map[bool]string{true: "empty", false: "shared"}[fresh])

	// The dashboard's URL in the banner, and it answers.
	dashboard := base + "/dashboard"
	if !strings.Contains(output(), "dashboard: "+dashboard) {
		t.Errorf("the banner does not give the dashboard's URL %s", dashboard)
	}
	if resp, err := http.Get(dashboard); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET %s: %v %v", dashboard, resp, err)
	} else {
		resp.Body.Close()
	}

	b, err := os.ReadFile(filepath.Join(clone, "data", "demo-key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(b))

	// Tools on "auto": answered, with a tool call or text.
	code, body := call(t, "POST", base+"/v1/chat/completions", key, demoToolsBody)
	var chat struct {
		Choices []struct {
			Message struct {
				Content   string            `json:"content"`
				ToolCalls []json.RawMessage `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &chat); code != 200 || err != nil || len(chat.Choices) != 1 ||
		(len(chat.Choices[0].Message.ToolCalls) == 0 && chat.Choices[0].Message.Content == "") {
		t.Errorf("tools on auto: %d %s", code, body)
	}

	// An embedding, with the README's body.
	readme := filepath.Join(clone, "README.md")
	blocks := readmeCurlBlocks(t, readme)
	code, body = call(t, "POST", base+"/v1/embeddings", key, readmeCurlBody(t, "/v1/embeddings"))
	var emb struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &emb); code != 200 || err != nil || len(emb.Data) == 0 {
		t.Errorf("embeddings: %d %.300s", code, body)
	}
	for i, d := range emb.Data {
		norm := 0.0
		for _, v := range d.Embedding {
			norm += v * v
		}
		if len(d.Embedding) == 0 || math.Abs(norm-1) > 1e-3 {
			t.Errorf("embedding %d: %d dimensions, norm² %.4f; want a unit vector", i, len(d.Embedding), norm)
		}
	}

	// Every README block with a curl to the demo, in one shell in the clone (the
	// blocks use what the earlier ones set, as in one terminal), on the test's port.
	// Each curl fails the script on an HTTP error; set -x names the one that did.
	script := "set -euo pipefail -x\ncurl() { command curl -sS --fail-with-body \"$@\"; }\n" +
		strings.ReplaceAll(strings.Join(blocks, ""), "127.0.0.1:8080", addr)
	sh := exec.Command("bash", "-c", script)
	sh.Dir, sh.Env = clone, env
	var shOut, shErr strings.Builder
	sh.Stdout, sh.Stderr = &shOut, &shErr
	if err := sh.Run(); err != nil {
		t.Errorf("README.md's curl examples: %v\nstdout:\n%s\nstderr (the commands):\n%s", err, shOut.String(), shErr.String())
	} else if !strings.Contains(shOut.String(), "Lily") {
		t.Errorf("README.md's first completion does not meet Lily, as the README says:\n%s", shOut.String())
	}
	t.Logf("README.md: %d blocks with curl examples run", len(blocks))

	// Ctrl-C: SIGINT to the server (make's child: make runs the recipe's one command
	// itself), which drains; make then exits 0.
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", makeRun.Process.Pid, makeRun.Process.Pid))
	server, convErr := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil || convErr != nil {
		t.Fatalf("the server process under make (%d): %q %v %v", makeRun.Process.Pid, children, err, convErr)
	}
	if err := syscall.Kill(server, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("make run after SIGINT: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("make run did not stop within 30s of SIGINT")
	}
	out := output()
	if !strings.Contains(out, "interrupt: draining") {
		t.Errorf("the server did not say it drains on SIGINT")
	}
	if w := warningLines(out); len(w) != 0 {
		t.Errorf("%d warning lines in make run's output:\n%s", len(w), strings.Join(w, "\n"))
	}
	if strings.Contains(out, "panic:") {
		t.Errorf("a panic in make run's output")
	}
}
