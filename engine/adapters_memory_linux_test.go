//go:build linux

package engine

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// mappedRSS is the resident bytes of the process's mappings of path
// (/proc/self/smaps).
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasSuffix(line, " "+path)
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); in && ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			total += kb << 10
		}
	}
	return total
}

// TestAdapterMemoryIsItsFile measures what a loaded adapter costs: after a request
// ran through every adapted projection, the adapter file's mapping is resident at
// about the file's size (its tensors are views of the mapping, not copies), and
// loading it grew the Go heap by under a tenth of that. The lease counts the file's
// size (TestAdaptersOnDemandLRU), so this is the check that the lease is right.
func TestAdapterMemoryIsItsFile(t *testing.T) {
	b := adapterBlock(t, ModelConfig{MaxModelLen: 128}, 1)
	path := b.models["m"].adapters["a0"].cfg.Path
	size := b.Adapters()[0].Bytes
	if rss := mappedRSS(t, path); rss != 0 {
		t.Fatalf("the adapter is mapped (%d bytes resident) before any request names it", rss)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := b.LoadAdapter(context.Background(), "m", "a0"); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if r := generate(b, Request{Prompt: []int32{1, 40, 41, 42}, MaxTokens: 3, Adapters: []string{"a0"}}); r.err != nil {
		t.Fatal(r.err)
	}
	rss := mappedRSS(t, path)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("adapter file %d bytes: mapping resident %d bytes (%.2f×), heap grew %d bytes", size, rss, float64(rss)/float64(size), heap)
	if float64(rss) < 0.9*float64(size) || rss > size+int64(os.Getpagesize()) {
		t.Errorf("mapping resident %d bytes, want about the file's %d", rss, size)
	}
	if heap > size/10 {
		t.Errorf("the heap grew %d bytes for a %d-byte adapter: its tensors are copied, not mapped", heap, size)
	}
}
