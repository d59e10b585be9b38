package pull

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as a second `lmlite pull` process
// (PULL_TEST_CHILD=DIR ENDPOINT): it pulls hubRef into DIR and prints the result.
func TestMain(m *testing.M) {
	if args := os.Getenv("PULL_TEST_CHILD"); args != "" {
		dir, endpoint, _ := strings.Cut(args, " ")
		r, err := Pull(context.Background(), hubRef, Options{Dir: dir, Endpoint: endpoint, Catalogue: Catalogue{}, Backoff: time.Millisecond})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("pulled", r.SHA256, r.Cached)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestConcurrentProcessesDownloadOnce runs three real processes pulling the same
// reference into one cache at once: the file lock lets one download while the others
// wait, then find the blob.
func TestConcurrentProcessesDownloadOnce(t *testing.T) {
	h, srv := newHub(t)
	// Slow the download down so that the processes overlap: a drop and a resume.
	h.set(func(h *hub) { h.drops = []int64{int64(len(h.data)) / 2} })
	dir := t.TempDir()
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range 3 {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "PULL_TEST_CHILD="+dir+" "+srv.URL)
		out := &strings.Builder{}
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, c), append(outs, out)
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("process %d: %v: %s", i, err, outs[i])
		}
		if !strings.Contains(outs[i].String(), "pulled "+h.digest) {
			t.Errorf("process %d: %s", i, outs[i])
		}
	}
	_, served, _, gets := h.snapshot()
	if served != int64(len(h.data)) || gets != 2 {
		t.Errorf("3 processes: %d GETs, %d bytes served; want one download of %d bytes (2 GETs: one drop)", gets, served, len(h.data))
	}
}
