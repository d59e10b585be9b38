package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/tenancy"
)

// The Batch API's per-minute buckets hold the same limit in this process and in
// Redis: n calls at once, then a wait of at most 60/n seconds; each tenant and each
// bucket name its own.
func TestBatchRateBucketsInProcessAndInRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0), Name: "buckets"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	sh := tenancy.NewRedisShared(rc, tenancy.RedisOptions{KeyPrefix: "bq:", Node: "n"})
	t.Cleanup(sh.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name   string
		shared sharedMinutes
	}{{"in-process", nil}, {"redis", sh}} {
		t.Run(tc.name, func(t *testing.T) {
			var a apiLimiters
			now := time.Now()
			for i := range 3 {
				if _, ok := a.allowPerMinute(tc.shared, log, "t1", "uploads", 3, now); !ok {
					t.Fatalf("call %d of 3 refused", i)
				}
			}
			wait, ok := a.allowPerMinute(tc.shared, log, "t1", "uploads", 3, now)
			if ok || wait <= 0 || wait > 20*time.Second {
				t.Fatalf("the fourth of 3 a minute: ok %v, wait %v", ok, wait)
			}
			if _, ok := a.allowPerMinute(tc.shared, log, "t2", "uploads", 3, now); !ok {
				t.Fatal("another tenant refused")
			}
			if _, ok := a.allowPerMinute(tc.shared, log, "t1", "creates", 3, now); !ok {
				t.Fatal("another bucket refused")
			}
			if _, ok := a.allowPerMinute(tc.shared, log, "t1", "off", 0, now); !ok {
				t.Fatal("no limit refused")
			}
		})
	}
}

// With two gateways sharing a Redis, a tenant's file_uploads_per_minute and
// batch_max_unfinished hold across both: the upload past the rate and the batch past
// the bound are refused on the other gateway, and a cancelled job frees its place
// for a batch on the other gateway.
func TestBatchLimitsHoldAcrossTwoGateways(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws, keys := batchGatewaysWith(t, rs, "{id: bq, plan: open, overrides: {file_uploads_per_minute: 2, batch_max_unfinished: 1, daily_budget_usd: 0.00000001}}")
	key := keys["bq"]
	ts := []*testServer{{t: t, url: gws[0].url}, {t: t, url: gws[1].url}}
	var files [2]string
	for i := range 2 {
		r, body := rawUpload(t, ts[i], key, linesOf(2, "q"))
		if r.StatusCode != 200 {
			t.Fatalf("upload on gateway %d: %d %s", i, r.StatusCode, body)
		}
		files[i] = decodeFile(t, body).ID
	}
	if r, body := rawUpload(t, ts[0], key, linesOf(2, "q")); r.StatusCode != 429 || !strings.Contains(body, "file_uploads_per_minute") {
		t.Fatalf("the third upload of 2 a minute, over two gateways: %d %s", r.StatusCode, body)
	}

	create := func(i int) (int, string) {
		r, body := ts[i].post("/v1/batches", key, `{"input_file_id":"`+files[i]+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
		return r.StatusCode, body
	}
	code, body := create(0)
	if code != 200 {
		t.Fatalf("the first batch: %d %s", code, body)
	}
	var first struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(body), &first)
	if code, body := create(1); code != 429 || !strings.Contains(body, "batch_max_unfinished") {
		t.Fatalf("a second batch on the other gateway while the first is unfinished: %d %s", code, body)
	}
	if r, body := ts[0].post("/v1/batches/"+first.ID+"/cancel", key, ""); r.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", r.StatusCode, body)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if code, body = create(1); code == 200 {
			break
		}
		if time.Now().After(deadline) { // the job ends once its lines are
			t.Fatalf("a batch on the other gateway after the first was cancelled: %d %s", code, body)
		}
	}
}

// While Redis does not answer, the Batch API's buckets are this process's: the limit
// still holds (not open, not closed).
func TestBatchRateBucketsFallBackToThisProcessWithRedisDown(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0), Name: "down"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	sh := tenancy.NewRedisShared(rc, tenancy.RedisOptions{KeyPrefix: "bq:", Node: "n"})
	t.Cleanup(sh.Close)
	rs.Kill()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var a apiLimiters
	now := time.Now()
	for i := range 2 {
		if _, ok := a.allowPerMinute(sh, log, "t1", "uploads", 2, now); !ok {
			t.Fatalf("call %d of 2 refused with Redis down", i)
		}
	}
	if wait, ok := a.allowPerMinute(sh, log, "t1", "uploads", 2, now); ok || wait <= 0 {
		t.Fatalf("the third of 2 a minute with Redis down: ok %v, wait %v", ok, wait)
	}
}
