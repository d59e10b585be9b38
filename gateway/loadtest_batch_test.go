package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/loadtest"
)

// The batch-beside-interactive shape, small: the scenario runs alone, then beside a
// 300-line batch of another tenant made through the Batch API (a streamed upload),
// and the report compares the interactive TTFT of the two runs.
func TestLoadtestBatchBesideInteractive(t *testing.T) {
	eng := newFakeEngine()
	eng.Delay = 2 * time.Millisecond
	ts := startBatchServer(t, eng)
	s, err := loadtest.ParseScenario([]byte(`
name: batch-small
duration: 1500ms
seed: 1
arrival: {type: poisson, rate: 20}
workload:
  api: chat
  model: tiny
  stream: true
  prompt_tokens: {dist: uniform, min: 8, max: 16}
  output_tokens: {dist: uniform, min: 4, max: 8}
tenants:
  - {name: acme, api_key: ` + ts.keys["acme"] + `}
batch: {lines: 300, model: tiny, api_key: ` + ts.keys["other"] + `, prompt_words: 8, max_tokens: 20}
`))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := loadtest.Run(context.Background(), loadtest.Config{Scenario: s, Target: ts.url})
	if err != nil {
		t.Fatal(err)
	}
	b := rep.Batch
	if b == nil {
		t.Fatal("no batch section in the report")
	}
	t.Logf("batch %s %s (%d completed, %s); ttft p99 %.2fms without, %.2fms with (×%.2f)", b.ID, b.Status, b.Completed, b.End,
		b.Without.TTFT.P99, b.With.TTFT.P99, b.Ratio)
	if b.Lines != 300 || b.Without.OK == 0 || b.With.OK == 0 || b.Without.OK != b.Without.Requests || b.With.OK != b.With.Requests {
		t.Fatalf("batch phase %+v", b)
	}
	if b.Completed == 0 || b.Without.TTFT.P99 <= 0 || b.With.TTFT.P99 <= 0 || b.Ratio <= 0 {
		t.Fatalf("the job ran no line beside the traffic, or no TTFT: %+v", b)
	}
	job, err := ts.srv.batches.m.Store().Job("other", b.ID)
	if err != nil || job.Counts.Total != 300 {
		t.Fatalf("job %+v %v", job, err)
	}
	var sum strings.Builder
	rep.WriteSummary(&sum)
	if !strings.Contains(sum.String(), "interactive ttft p99:") {
		t.Fatalf("summary without the batch line:\n%s", sum.String())
	}
}
