package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawUpload posts a multipart upload of content (purpose batch) with the extra form
// fields, as OpenAI's SDKs send them (expires_after[anchor], expires_after[seconds]).
func rawUpload(t *testing.T, ts *testServer, key, content string, fields ...string) (*http.Response, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.WriteField("purpose", "batch")
	for i := 0; i+1 < len(fields); i += 2 {
		mw.WriteField(fields[i], fields[i+1])
	}
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	fw.Write([]byte(content))
	mw.Close()
	req, _ := http.NewRequest("POST", ts.url+"/v1/files", &b)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp, out.String()
}

type fileJSON struct {
	ID        string `json:"id"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at"`
}

func decodeFile(t *testing.T, body string) fileJSON {
	t.Helper()
	var f fileJSON
	if err := json.Unmarshal([]byte(body), &f); err != nil || f.ID == "" {
		t.Fatalf("not a file object: %s", body)
	}
	return f
}

type errorJSON struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, body string) errorJSON {
	t.Helper()
	var e errorJSON
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an error in OpenAI's shape: %s", body)
	}
	return e
}

func linesOf(n int, prefix string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(chatLine(fmt.Sprintf("%s%d", prefix, i), "tiny", 1, "") + "\n")
	}
	return b.String()
}

// Uploads past the tenant's files_max_bytes or files_max_count are refused with a
// 400 naming the limit, and take nothing: a file deleted makes room again.
func TestFileQuotaRefusesUploadsPastBytesAndCount(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	key := ts.keys["fq"] // files_max_bytes 3000, files_max_count 3
	st := ts.srv.batches.m.Store()
	big := linesOf(14, "a") // ~1.9 KB
	if len(big) < 1600 || len(big) > 3000 {
		t.Fatalf("the file is %d bytes", len(big))
	}
	r, body := rawUpload(t, ts, key, big)
	if r.StatusCode != 200 {
		t.Fatalf("the first upload: %d %s", r.StatusCode, body)
	}
	first := decodeFile(t, body)
	r, body = rawUpload(t, ts, key, big)
	e := decodeError(t, body)
	if r.StatusCode != 400 || e.Error.Code == nil || *e.Error.Code != "file_quota_exceeded" || !strings.Contains(e.Error.Message, "files_max_bytes") {
		t.Fatalf("past files_max_bytes: %d %s", r.StatusCode, body)
	}
	if b, n := st.Usage("fq"); b != int64(len(big)) || n != 1 {
		t.Fatalf("after the refused upload the tenant has %d bytes in %d files", b, n)
	}
	if tmps, _ := filepath.Glob(filepath.Join(st.Dir(), "files", "*.tmp")); len(tmps) > 0 {
		t.Fatalf("the refused upload left %v", tmps)
	}
	small := linesOf(1, "s")
	for i := range 2 {
		if r, body := rawUpload(t, ts, key, small); r.StatusCode != 200 {
			t.Fatalf("small file %d: %d %s", i, r.StatusCode, body)
		}
	}
	r, body = rawUpload(t, ts, key, small)
	e = decodeError(t, body)
	if r.StatusCode != 400 || !strings.Contains(e.Error.Message, "files_max_count") || e.Error.Param == nil || *e.Error.Param != "file" {
		t.Fatalf("past files_max_count: %d %s", r.StatusCode, body)
	}
	// Another tenant is not bound by fq's quota.
	if r, body := rawUpload(t, ts, ts.keys["acme"], big); r.StatusCode != 200 {
		t.Fatalf("acme: %d %s", r.StatusCode, body)
	}
	if r, body := ts.delete("/v1/files/"+first.ID, key); r.StatusCode != 200 {
		t.Fatalf("delete: %d %s", r.StatusCode, body)
	}
	if r, body := rawUpload(t, ts, key, big); r.StatusCode != 200 {
		t.Fatalf("after a delete: %d %s", r.StatusCode, body)
	}
}

// A file uploaded with expires_after expires then: from that second it is a 404
// (get, content, delete; not listed), and the sweeper deletes its bytes. A batch's
// output file expires 30 days after it is written, as OpenAI's do; expires_after out
// of 3600..2592000 is a 400 naming the field.
func TestExpiredFileIs404AndItsBytesGone(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ts := startBatchServer(t, newFakeEngine(), func(o *Options) { o.Now = clock })
	key := ts.keys["acme"]
	r, body := rawUpload(t, ts, key, linesOf(2, "x"), "expires_after[anchor]", "created_at", "expires_after[seconds]", "3600")
	if r.StatusCode != 200 {
		t.Fatalf("%d %s", r.StatusCode, body)
	}
	f := decodeFile(t, body)
	if f.ExpiresAt != f.CreatedAt+3600 {
		t.Fatalf("expires_at %d, created_at %d", f.ExpiresAt, f.CreatedAt)
	}
	r, body = rawUpload(t, ts, key, linesOf(2, "y"))
	if d := decodeFile(t, body); d.ExpiresAt != d.CreatedAt+30*24*3600 {
		t.Fatalf("the default expiry: %s", body)
	}
	for _, bad := range [][]string{{"created_at", "60"}, {"created_at", "2592001"}, {"last_active_at", "3600"}} {
		r, body := rawUpload(t, ts, key, linesOf(1, "z"), "expires_after[anchor]", bad[0], "expires_after[seconds]", bad[1])
		if e := decodeError(t, body); r.StatusCode != 400 || e.Error.Param == nil || !strings.HasPrefix(*e.Error.Param, "expires_after.") {
			t.Fatalf("expires_after %v: %d %s", bad, r.StatusCode, body)
		}
	}
	path := filepath.Join(ts.srv.batches.m.Store().Dir(), "files", f.ID)
	ts.srv.batches.m.Sweep()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("swept before it expired: %v", err)
	}
	mu.Lock()
	now = now.Add(3601 * time.Second)
	mu.Unlock()
	for _, p := range []string{"/v1/files/" + f.ID, "/v1/files/" + f.ID + "/content"} {
		if r, body := ts.get(p, key); r.StatusCode != 404 {
			t.Fatalf("GET %s of an expired file: %d %s", p, r.StatusCode, body)
		}
	}
	if _, body := ts.get("/v1/files", key); strings.Contains(body, f.ID) {
		t.Fatalf("an expired file is listed: %s", body)
	}
	r, body = ts.post("/v1/batches", key, `{"input_file_id":"`+f.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
	if r.StatusCode != 404 {
		t.Fatalf("a batch of an expired file: %d %s", r.StatusCode, body)
	}
	ts.srv.batches.m.Sweep()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the expired file's bytes are still on disk: %v", err)
	}
	if _, err := ts.srv.batches.m.Store().File("acme", f.ID); err == nil {
		t.Fatal("the expired file's record is still in the store")
	}

	// A batch's output file: 30 days.
	c := ts.client("acme")
	b := waitBatch(t, c, newBatch(t, c, upload(t, c, chatLine("a", "tiny", 1, "")).ID, nil).ID)
	_, body = ts.get("/v1/files/"+b.OutputFileID, key)
	if o := decodeFile(t, body); o.ExpiresAt != o.CreatedAt+30*24*3600 {
		t.Fatalf("the output file: %s", body)
	}
}

// Uploads and batch creates past the plan's rate answer 429 with Retry-After, naming
// the limit, before any of their work: the refused upload stores nothing and the
// refused create makes no job.
func TestUploadAndCreateRateLimited(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	up := ts.keys["up"] // file_uploads_per_minute: 2
	for i := range 2 {
		if r, body := rawUpload(t, ts, up, linesOf(1, "u")); r.StatusCode != 200 {
			t.Fatalf("upload %d: %d %s", i, r.StatusCode, body)
		}
	}
	r, body := rawUpload(t, ts, up, linesOf(1, "u"))
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if e := decodeError(t, body); r.StatusCode != 429 || ra < 1 || ra > 30 || !strings.Contains(e.Error.Message, "file_uploads_per_minute") {
		t.Fatalf("the third upload: %d Retry-After %q %s", r.StatusCode, r.Header.Get("Retry-After"), body)
	}
	if _, n := ts.srv.batches.m.Store().Usage("up"); n != 2 {
		t.Fatalf("the refused upload stored a file: %d files", n)
	}

	bc := ts.keys["bc"] // batch_creates_per_minute: 2
	_, body = rawUpload(t, ts, bc, linesOf(3, "b"))
	f := decodeFile(t, body)
	create := `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`
	for i := range 2 {
		if r, body := ts.post("/v1/batches", bc, create); r.StatusCode != 200 {
			t.Fatalf("create %d: %d %s", i, r.StatusCode, body)
		}
	}
	r, body = ts.post("/v1/batches", bc, create)
	ra, _ = strconv.Atoi(r.Header.Get("Retry-After"))
	if e := decodeError(t, body); r.StatusCode != 429 || ra < 1 || !strings.Contains(e.Error.Message, "batch_creates_per_minute") {
		t.Fatalf("the third create: %d Retry-After %q %s", r.StatusCode, r.Header.Get("Retry-After"), body)
	}
	if js, _, _ := ts.srv.batches.m.Store().Jobs("bc", "", 10); len(js) != 2 {
		t.Fatalf("%d jobs after two creates and a refused one", len(js))
	}
}

// A tenant at its plan's batch_max_unfinished gets a 429 naming it for one more
// batch; once one ends, it may create another.
func TestUnfinishedJobsBound(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	key := ts.keys["un"] // batch_max_unfinished 1; no budget: its jobs pause
	_, body := rawUpload(t, ts, key, linesOf(3, "n"))
	f := decodeFile(t, body)
	create := `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`
	r, body := ts.post("/v1/batches", key, create)
	if r.StatusCode != 200 {
		t.Fatalf("the first: %d %s", r.StatusCode, body)
	}
	var first struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(body), &first)
	r, body = ts.post("/v1/batches", key, create)
	if e := decodeError(t, body); r.StatusCode != 429 || !strings.Contains(e.Error.Message, "batch_max_unfinished") {
		t.Fatalf("the second while the first runs: %d %s", r.StatusCode, body)
	}
	if r, body := ts.post("/v1/batches/"+first.ID+"/cancel", key, ""); r.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", r.StatusCode, body)
	}
	waitBatch(t, ts.client("un"), first.ID)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, body = ts.post("/v1/batches", key, create)
		if r.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) { // the driver leaves just after the job is recorded ended
			t.Fatalf("after the first ended: %d %s", r.StatusCode, body)
		}
	}
}

// A batch's metadata is held to OpenAI's limits: 16 keys, keys of 64 characters,
// values of 512; a 400 names the field.
func TestBatchMetadataLimits(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	key := ts.keys["acme"]
	_, body := rawUpload(t, ts, key, linesOf(1, "m"))
	f := decodeFile(t, body)
	create := func(md map[string]string) (*http.Response, string) {
		b, _ := json.Marshal(map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": md})
		return ts.post("/v1/batches", key, string(b))
	}
	many := map[string]string{}
	for i := range 17 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, c := range []struct {
		md    map[string]string
		param string
	}{
		{many, "metadata"},
		{map[string]string{strings.Repeat("k", 65): "v"}, "metadata"},
		{map[string]string{"note": strings.Repeat("é", 513)}, "metadata.note"},
		{map[string]string{"big": strings.Repeat("x", 900<<10)}, "metadata.big"},
	} {
		r, body := create(c.md)
		e := decodeError(t, body)
		if r.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != c.param {
			t.Fatalf("metadata of %d keys: %d %.300s", len(c.md), r.StatusCode, body)
		}
	}
	ok := map[string]string{strings.Repeat("k", 64): strings.Repeat("é", 512)}
	for i := range 15 {
		ok[fmt.Sprint("k", i)] = "v"
	}
	if r, body := create(ok); r.StatusCode != 200 {
		t.Fatalf("metadata at the limits: %d %.300s", r.StatusCode, body)
	}
}

func (ts *testServer) delete(path, key string) (*http.Response, string) {
	ts.t.Helper()
	req, _ := http.NewRequest("DELETE", ts.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp, out.String()
}

// A chat completion's metadata is held to the same limits (and its values must be
// strings): a 400 naming the field, before any work.
func TestChatMetadataLimits(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	chat := func(md string) (*http.Response, string) {
		return ts.post("/v1/chat/completions", ts.keys["acme"], `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"metadata":`+md+`}`)
	}
	many := map[string]string{}
	for i := range 17 {
		many[fmt.Sprint("k", i)] = "v"
	}
	b, _ := json.Marshal(many)
	for _, c := range []struct{ md, param string }{
		{string(b), "metadata"},
		{`{"` + strings.Repeat("k", 65) + `":"v"}`, "metadata"},
		{`{"note":"` + strings.Repeat("x", 513) + `"}`, "metadata.note"},
		{`{"n":1}`, "metadata.n"},
	} {
		r, body := chat(c.md)
		if e := decodeError(t, body); r.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != c.param {
			t.Fatalf("metadata %.80s: %d %s", c.md, r.StatusCode, body)
		}
	}
	if r, body := chat(`{"note":"` + strings.Repeat("x", 512) + `"}`); r.StatusCode != 200 {
		t.Fatalf("metadata at the limit: %d %s", r.StatusCode, body)
	}
}

// A batch's output_expires_after sets when its output file expires; out of range it
// is a 400 naming the field.
func TestBatchOutputExpiresAfter(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	key := ts.keys["acme"]
	_, body := rawUpload(t, ts, key, linesOf(2, "o"))
	f := decodeFile(t, body)
	create := func(exp string) (*http.Response, string) {
		return ts.post("/v1/batches", key, `{"input_file_id":"`+f.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h","output_expires_after":`+exp+`}`)
	}
	r, body := create(`{"anchor":"created_at","seconds":10}`)
	if e := decodeError(t, body); r.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != "output_expires_after.seconds" {
		t.Fatalf("seconds 10: %d %s", r.StatusCode, body)
	}
	r, body = create(`{"anchor":"created_at","seconds":7200}`)
	var b struct {
		ID string `json:"id"`
	}
	if r.StatusCode != 200 || json.Unmarshal([]byte(body), &b) != nil {
		t.Fatalf("%d %s", r.StatusCode, body)
	}
	done := waitBatch(t, ts.client("acme"), b.ID)
	_, body = ts.get("/v1/files/"+done.OutputFileID, key)
	if o := decodeFile(t, body); o.ExpiresAt != o.CreatedAt+7200 {
		t.Fatalf("the output file: %s", body)
	}
}
