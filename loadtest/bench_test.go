package loadtest

import (
	"strings"
	"testing"
	"time"
)

// BenchmarkReadSSE reads a 256-chunk stream: the per-token cost of measuring.
func BenchmarkReadSSE(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 256; i++ {
		sb.WriteString("data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"}}]}\n\n")
	}
	sb.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":256}}\n\ndata: [DONE]\n\n")
	stream := sb.String()
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		var res Result
		if err := readSSE(strings.NewReader(stream), time.Now(), &res); err != nil || len(res.Tokens) != 256 {
			b.Fatal(err, len(res.Tokens))
		}
	}
}

// BenchmarkCollectorAdd aggregates a 64-token result.
func BenchmarkCollectorAdd(b *testing.B) {
	c := NewCollector([]string{"a"}, []float64{1}, 0, GoodputSLO{TTFTms: 100})
	r := Result{Status: 200, E2E: 300 * time.Millisecond, TTFT: 40 * time.Millisecond, CompletionTokens: 64}
	for i := 0; i < 64; i++ {
		r.Tokens = append(r.Tokens, 40*time.Millisecond+time.Duration(i)*4*time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Add(&r)
	}
}
