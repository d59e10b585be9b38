package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"time"
)

// BatchPhase is what a scenario with a batch: block reports: the interactive
// traffic's overall metrics without the job (the first run) and beside it (the
// second), and the job's state when the second run ended.
type BatchPhase struct {
	ID        string `json:"id"`
	Lines     int    `json:"lines"`
	Status    string `json:"status"` // at the end of the second run
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	End       string `json:"end"` // what was done with the job then: "left running", "cancelled", "ended"
	// RanS is how long the job ran (in_progress until it ended, or until the end of
	// the second run), to set beside that run's window.
	RanS    float64 `json:"ran_s"`
	Without Metrics `json:"without"`
	With    Metrics `json:"with"`
	Ratio   float64 `json:"ttft_p99_ratio"` // With.TTFT.P99 / Without.TTFT.P99
}

// runBesideBatch runs the scenario without the batch, submits the batch (upload and
// create, with the Batch API), runs the scenario again while the job runs, then
// cancels the job if it is still running so that it does not outlive the test.
func runBesideBatch(ctx context.Context, cfg Config) (*Report, error) {
	b := cfg.Scenario.Batch
	base, err := CheckTarget(cfg.Target, cfg.AllowRemote)
	if err != nil {
		return nil, err
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	key := b.APIKey
	switch {
	case cfg.APIKey != "":
		key = cfg.APIKey
	case b.APIKeyEnv != "" && getenv(b.APIKeyEnv) != "":
		key = getenv(b.APIKeyEnv)
	}
	without, err := run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 5 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	id, err := submitBatch(ctx, client, base, key, b)
	if err != nil {
		return nil, fmt.Errorf("loadtest: batch: %w", err)
	}
	// Let the job start before measuring beside it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, err := batchState(ctx, client, base, key, id)
		if err != nil {
			return nil, fmt.Errorf("loadtest: batch: %w", err)
		}
		if st.Status != "validating" {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("loadtest: batch %s still validating after 30s", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep, err := run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	st, err := batchState(ctx, client, base, key, id)
	if err != nil {
		return nil, fmt.Errorf("loadtest: batch: %w", err)
	}
	ph := &BatchPhase{ID: id, Lines: b.Lines, Status: st.Status, Completed: st.Counts.Completed, Failed: st.Counts.Failed,
		End: "ended", Without: without.Overall, With: rep.Overall}
	if st.InProgressAt > 0 {
		end := time.Now().Unix()
		if e := max(st.FinalizingAt, st.CancelledAt); e > 0 {
			end = e
		}
		ph.RanS = float64(end - st.InProgressAt)
	}
	if st.Status == "in_progress" || st.Status == "validating" {
		ph.End = "cancelled"
		if err := batchCall(ctx, client, "POST", base+"/v1/batches/"+id+"/cancel", key, "", nil, nil); err != nil {
			ph.End = "left running (cancel failed: " + err.Error() + ")"
		}
	}
	if ph.Without.TTFT.P99 > 0 {
		ph.Ratio = round3(ph.With.TTFT.P99 / ph.Without.TTFT.P99)
	}
	rep.Batch = ph
	return rep, nil
}

type batchStatus struct {
	Status       string `json:"status"`
	InProgressAt int64  `json:"in_progress_at"`
	FinalizingAt int64  `json:"finalizing_at"`
	CancelledAt  int64  `json:"cancelled_at"`
	Counts       struct {
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
}

func batchState(ctx context.Context, c *http.Client, base, key, id string) (batchStatus, error) {
	var st batchStatus
	err := batchCall(ctx, c, "GET", base+"/v1/batches/"+id, key, "", nil, &st)
	return st, err
}

// submitBatch uploads the input file (streamed: it is written as it is sent) and
// creates the job; it returns the job's id.
func submitBatch(ctx context.Context, c *http.Client, base, key string, b *BatchSpec) (string, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("purpose", "batch")
		var fw io.Writer
		if err == nil {
			fw, err = mw.CreateFormFile("file", "loadtest-batch.jsonl")
		}
		for i := 0; err == nil && i < b.Lines; i++ {
			err = writeBatchLine(fw, i, b)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	var f struct {
		ID string `json:"id"`
	}
	if err := batchCall(ctx, c, "POST", base+"/v1/files", key, mw.FormDataContentType(), pr, &f); err != nil {
		pr.CloseWithError(err)
		return "", fmt.Errorf("upload: %w", err)
	}
	body, _ := json.Marshal(map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h"})
	var j struct {
		ID string `json:"id"`
	}
	if err := batchCall(ctx, c, "POST", base+"/v1/batches", key, "application/json", bytes.NewReader(body), &j); err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	return j.ID, nil
}

// writeBatchLine writes line i: a user message of distinct words (no shared prefix).
func writeBatchLine(w io.Writer, i int, b *BatchSpec) error {
	var msg strings.Builder
	fmt.Fprintf(&msg, "request %d:", i)
	for k := 0; k < b.PromptWords; k++ {
		msg.WriteString(" ")
		msg.WriteString(words[(i*7+k*13)%len(words)])
	}
	line, err := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("lt-%d", i), "method": "POST", "url": "/v1/chat/completions",
		"body": map[string]any{"model": b.Model, "max_tokens": b.MaxTokens, "messages": []map[string]string{{"role": "user", "content": msg.String()}}}})
	if err != nil {
		return err
	}
	_, err = w.Write(append(line, '\n'))
	return err
}

func batchCall(ctx context.Context, c *http.Client, method, url, key, ctype string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
