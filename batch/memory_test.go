package batch

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/redistest"
)

// pauseRunner refuses every line for the tenant's budget, for a day: the job pauses.
type pauseRunner struct{}

func (pauseRunner) RunLine(context.Context, Request) Response {
	return Response{Refused: RefusedBudget, Until: time.Now().Add(24 * time.Hour)}
}

// bigInput is n lines of about 4 KB each.
func bigInput(n int) string {
	pad := strings.Repeat("x", 4000)
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"%d %s"}}`+"\n", i, i, pad)
	}
	return b.String()
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A job paused on the tenant's budget holds none of its lines in memory: the heap a
// paused job of 4,000 lines of 4 KB (16 MB) keeps is under 2 MB, with the in-process
// queue and with the Redis one alike (its lines are read from the input file as
// they start).
func TestPausedJobHoldsNoLinesInMemory(t *testing.T) {
	for _, q := range []string{"inprocess", "redis"} {
		t.Run(q, func(t *testing.T) {
			var m *Manager
			var s *Store
			if q == "redis" {
				rs := redistest.Start(t, redistest.Options{})
				c := redisClient(t, rs.URL(0))
				startWorker(t, c, "w", pauseRunner{}, 4, time.Second, 3)
				m, s = owner(t, c, t.TempDir(), 4)
			} else {
				var err error
				if s, err = OpenStore(t.TempDir()); err != nil {
					t.Fatal(err)
				}
				m = NewManager(s, pauseRunner{}, Options{Checker: price, Concurrency: 4})
				t.Cleanup(func() { m.Close(); s.Close() })
			}
			in := bigInput(4000)
			f, err := s.PutFile("t1", "batch", "in.jsonl", strings.NewReader(in), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			in = ""
			before := heap()
			j, err := m.Create("t1", "k1", f.ID, "/v1/completions", "24h", nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Validating 16 MB of lines before the first refusal pauses the job took
			// 16 s under -race alone and over 30 s beside other race binaries on two
			// busy cores, so the wait is long; the heap check below is what is tested.
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
				if got, _ := s.Job("t1", j.ID); got.Status == InProgress && got.PausedReason != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the job did not pause")
				}
			}
			after := heap()
			grew := int64(after) - int64(before)
			t.Logf("the paused job of %d bytes: the heap grew %d bytes", f.Bytes, grew)
			if grew > 2<<20 {
				t.Fatalf("a paused job of %d MB of lines keeps %.1f MB of heap", f.Bytes>>20, float64(grew)/(1<<20))
			}
			if _, err := os.Stat(s.path(f.ID)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
