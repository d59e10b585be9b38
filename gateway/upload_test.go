package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/batch"
)

// uploadStream posts a multipart upload whose file part is written by gen, as a
// chunked body of unknown length (a client streaming from a pipe).
func uploadStream(t *testing.T, ts *testServer, key string, gen func(w io.Writer) error) (int, string) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("purpose", "batch")
		if err == nil {
			var fw io.Writer
			if fw, err = mw.CreateFormFile("file", "big.jsonl"); err == nil {
				err = gen(fw)
			}
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequest("POST", ts.url+"/v1/files", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pr.CloseWithError(io.ErrClosedPipe) // the server may answer before reading it all
	return resp.StatusCode, string(b)
}

// An upload through the SDK larger than max_body_bytes (1 MiB here) is accepted, and
// its content comes back byte for byte.
func TestSDKUploadOverMaxBodyBytes(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	c := ts.client("acme")
	var lines []string
	for i := range 12000 {
		lines = append(lines, chatLine(fmt.Sprintf("r%05d", i), "tiny", 4, ""))
	}
	want := strings.Join(lines, "\n") + "\n"
	if len(want) <= ts.srv.cfg.MaxBodyBytes {
		t.Fatalf("the file (%d bytes) is not over max_body_bytes", len(want))
	}
	f := upload(t, c, lines...)
	if f.Bytes != int64(len(want)) {
		t.Fatalf("stored %d bytes of %d", f.Bytes, len(want))
	}
	resp, err := c.Files.Content(context.Background(), f.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != want {
		t.Fatalf("content differs: %d bytes back", len(got))
	}
	// Requests other than uploads still answer 413 over the limit.
	r, body := ts.post("/v1/chat/completions", ts.keys["acme"], `{"model":"tiny","messages":[{"role":"user","content":"`+strings.Repeat("a", 2<<20)+`"}]}`)
	if r.StatusCode != 413 || !strings.Contains(body, "request_too_large") {
		t.Fatalf("a chat body over the limit: %d %s", r.StatusCode, body)
	}
}

// A 40 MB upload streamed without a Content-Length goes to disk as it arrives: the
// process allocates far less than the file while receiving it.
func TestUploadStreamsToDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("40 MB upload")
	}
	ts := startBatchServer(t, newFakeEngine())
	line := chatLine("x", "tiny", 4, `,"user":"`+strings.Repeat("u", 800)+`"`) + "\n"
	n := 40 << 20 / len(line)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	head, tail, _ := strings.Cut(line, `"x"`)
	code, body := uploadStream(t, ts, ts.keys["acme"], func(w io.Writer) error {
		buf := make([]byte, 0, 2*len(line))
		for i := range n {
			buf = append(buf[:0], head...)
			buf = fmt.Appendf(buf, `"r%06d"`, i)
			buf = append(buf, tail...)
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	})
	runtime.ReadMemStats(&after)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var f struct {
		ID    string `json:"id"`
		Bytes int64  `json:"bytes"`
	}
	json.Unmarshal([]byte(body), &f)
	size := int64(n) * int64(len(line)+len(`r000000`)-len(`x`))
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes uploaded, %d allocated meanwhile (client and server)", f.Bytes, alloc)
	if f.Bytes != size {
		t.Fatalf("stored %d bytes, sent %d", f.Bytes, size)
	}
	if alloc > uint64(size)/4 {
		t.Fatalf("allocated %d bytes while receiving a %d-byte file: it was buffered", alloc, size)
	}
}

// An upload over MaxFileLines is refused as soon as its line 50,001 arrives, and
// nothing of it is kept.
func TestUploadOverTheLineLimit(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	code, body := uploadStream(t, ts, ts.keys["acme"], func(w io.Writer) error {
		_, err := io.WriteString(w, strings.Repeat("{}\n", batch.MaxFileLines+1))
		return err
	})
	if code != 400 || !strings.Contains(body, "50000 lines") {
		t.Fatalf("%d %s", code, body)
	}
	c := ts.client("acme")
	fs, err := c.Files.List(context.Background(), openai.FileListParams{})
	if err != nil || len(fs.Data) != 0 {
		t.Fatalf("files kept: %+v %v", fs, err)
	}
}

// A chat body sent chunked (no Content-Length) is read up to max_body_bytes: within
// it, served; over it, 413.
func TestChunkedBodyLimit(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	post := func(content string) int {
		pr, pw := io.Pipe()
		go func() {
			io.WriteString(pw, `{"model":"tiny","max_tokens":3,"messages":[{"role":"user","content":"`+content+`"}]}`)
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", ts.url+"/v1/chat/completions", pr)
		req.Header.Set("Authorization", "Bearer "+ts.keys["acme"])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pr.CloseWithError(io.ErrClosedPipe)
		return resp.StatusCode
	}
	if c := post("hi"); c != 200 {
		t.Fatalf("a small chunked body: %d", c)
	}
	if c := post(strings.Repeat("a", 2<<20)); c != 413 {
		t.Fatalf("a chunked body over the limit: %d", c)
	}
}

// After a chunked upload the connection serves its next request: the body was read
// to its last chunk (a byte left over would be parsed as the next request).
func TestChunkedUploadKeepsTheConnection(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var form strings.Builder
	mw := multipart.NewWriter(&form)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	io.WriteString(fw, chatLine("a", "tiny", 4, "")+"\n")
	mw.Close()
	body := form.String()
	var req strings.Builder
	fmt.Fprintf(&req, "POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n",
		ts.keys["acme"], mw.FormDataContentType())
	for len(body) > 0 { // in chunks of 100 bytes
		n := min(100, len(body))
		fmt.Fprintf(&req, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	req.WriteString("0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i, want := range []int{200, 200} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("response %d: %d %s", i, resp.StatusCode, b)
		}
	}
}
