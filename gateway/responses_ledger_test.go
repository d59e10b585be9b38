package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
)

// segRecorder keeps every write to the ledger's segments and fails their syncs
// while fail is set: the narrowest place a request's durable writes show.
type segRecorder struct {
	mu     sync.Mutex
	writes [][]byte
	fail   atomic.Bool
}

type recordedSegment struct {
	ledger.SegmentFile
	r *segRecorder
}

func (f recordedSegment) Write(p []byte) (int, error) {
	f.r.mu.Lock()
	f.r.writes = append(f.r.writes, bytes.Clone(p))
	f.r.mu.Unlock()
	return f.SegmentFile.Write(p)
}

func (f recordedSegment) Sync() error {
	if f.r.fail.Load() {
		return errors.New("injected: the disk refused the sync")
	}
	return f.SegmentFile.Sync()
}

// with returns the writes holding every one of subs.
func (r *segRecorder) with(subs ...string) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]byte
	for _, w := range r.writes {
		all := true
		for _, s := range subs {
			all = all && bytes.Contains(w, []byte(s))
		}
		if all {
			out = append(out, w)
		}
	}
	return out
}

// startRidingServer serves tiny with stored responses in bbolt attached to the
// ledger (as `lmlite serve` does), the ledger fsynced, its segments recorded.
func startRidingServer(t *testing.T, rec *segRecorder) (*engineServer, string) {
	t.Helper()
	journal := filepath.Join(t.TempDir(), "responses.db")
	topts := tenancy.Options{Sync: tenancy.SyncFsync,
		WrapSegment: func(f *os.File) ledger.SegmentFile { return recordedSegment{f, rec} }}
	es := startEngineStore(t, `
models:
  - {id: tiny, path: $TINY, max_model_len: 2048, max_concurrency: 16}
tiers:
  fast: [{model: tiny, quality: 0.5}]
plans:
  open: {requests_per_second: 1000, burst: 1000, max_concurrency: 100}
tenants:
  - {id: acme, plan: open}
`, engine.Config{}, topts, func(st *tenancy.Store) Options {
		rb, err := respstore.OpenBolt(journal, respstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rb.Close() })
		if err := rb.UseLedger(st.Log()); err != nil {
			t.Fatal(err)
		}
		return Options{Responses: rb}
	}, nil)
	return es, journal + "-journal"
}

var respIDRe = regexp.MustCompile(`"id":"(resp_[0-9a-f]+)"`)

// postStored sends a /v1/responses request (store: true, the default) labelled
// clientID and returns its response's id.
func postStored(t *testing.T, es *engineServer, clientID string, stream bool) (string, string) {
	t.Helper()
	body := `{"model":"tiny","input":"Once upon a time","max_output_tokens":2,"stream":` + map[bool]string{false: "false", true: "true"}[stream] + `}`
	req, _ := http.NewRequest("POST", es.url+"/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+es.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", clientID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := respIDRe.FindStringSubmatch(string(b))
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("%s: %d %s", clientID, resp.StatusCode, b)
	}
	return m[1], string(b)
}

// TestStoredResponseRidesInItsEntrysLedgerWrite: a stored response (not streamed,
// and streamed) is made durable by the very write (and fsync) of the ledger that
// holds its request's usage entry, and its store's own journal is never written: a
// stored request waits for one sync, not two. (Before, the response was journaled
// and fdatasynced after the ledger's fsync: no ledger write held it, and the
// journal did.)
func TestStoredResponseRidesInItsEntrysLedgerWrite(t *testing.T) {
	rec := &segRecorder{}
	es, journal := startRidingServer(t, rec)
	for _, stream := range []bool{false, true} {
		label := "ride-" + map[bool]string{false: "whole", true: "stream"}[stream]
		id, _ := postStored(t, es, label, stream)
		ws := rec.with(id)
		if len(ws) != 1 {
			t.Fatalf("%s: %d ledger writes hold the stored response %s, want 1", label, len(ws), id)
		}
		if !bytes.Contains(ws[0], []byte(`"client_request_id":"`+label+`"`)) || !bytes.Contains(ws[0], []byte(`"status":200`)) {
			t.Errorf("%s: the ledger write holding %s does not hold the request's usage entry: %q", label, id, ws[0])
		}
		if r, _ := es.getRaw(t, "/responses/"+id); r != 200 {
			t.Errorf("%s: GET %s: %d", label, id, r)
		}
	}
	j, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	if len(j) < 16 || !bytes.Equal(j[:16], make([]byte, 16)) {
		t.Errorf("the responses journal was written (%x…): a second sync on the request's path", j[:min(len(j), 16)])
	}
}

// TestFailedSettleLeavesNoStoredResponse: when the ledger cannot make a request's
// usage entry durable (its fsync fails), the response it would store fails with it:
// the answer says "store": false and its id is a 404, not a response kept for a
// request whose settlement was lost. (Before, the response was stored in its own
// journal whatever the settle's write did.)
func TestFailedSettleLeavesNoStoredResponse(t *testing.T) {
	rec := &segRecorder{}
	es, _ := startRidingServer(t, rec)
	for _, stream := range []bool{false, true} {
		label := "fail-" + map[bool]string{false: "whole", true: "stream"}[stream]
		rec.fail.Store(true)
		id, body := postStored(t, es, label, stream)
		rec.fail.Store(false)
		if !strings.Contains(body, `"store":false`) {
			t.Errorf("%s: the answer of a response not stored says otherwise: %s", label, body)
		}
		if r, b := es.getRaw(t, "/responses/"+id); r != 404 {
			t.Errorf("%s: GET %s after its settle failed: %d %s, want 404", label, id, r, b)
		}
	}
	// The ledger works again: the next stored request is kept.
	id, _ := postStored(t, es, "after", false)
	if r, _ := es.getRaw(t, "/responses/"+id); r != 200 {
		t.Errorf("GET %s once the ledger works: %d", id, r)
	}
}

// getRaw GETs path (under /v1) with the first tenant's key.
func (es *engineServer) getRaw(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", es.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+es.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v any
	_ = json.Unmarshal(b, &v)
	return resp.StatusCode, string(b)
}
