package parallel

import (
	"math"
	"testing"
	"time"
)

func TestSplitCoversEveryRowOnce(t *testing.T) {
	for rows := 0; rows < 70; rows++ {
		for _, grain := range []int{1, 2, 4, 16} {
			for n := 1; n <= 5; n++ {
				seen := make([]int, rows)
				prevEnd := 0
				for w := 0; w < n; w++ {
					s, e := Split(rows, grain, n, w)
					if s != prevEnd || e < s {
						t.Fatalf("rows %d grain %d n %d: worker %d got [%d,%d) after %d", rows, grain, n, w, s, e, prevEnd)
					}
					if e != rows && (e-s)%grain != 0 {
						t.Fatalf("rows %d grain %d n %d: worker %d part %d not a multiple of the grain", rows, grain, n, w, e-s)
					}
					for i := s; i < e; i++ {
						seen[i]++
					}
					prevEnd = e
				}
				if prevEnd != rows {
					t.Fatalf("rows %d grain %d n %d: parts end at %d", rows, grain, n, prevEnd)
				}
				for i, c := range seen {
					if c != 1 {
						t.Fatalf("row %d covered %d times", i, c)
					}
				}
			}
		}
	}
}

// rowSums sums each row of a matrix in a fixed order: a stand-in for a kernel.
type rowSums struct {
	m    []float32
	cols int
	out  []float32
	who  []int
}

func (r *rowSums) RunRange(worker, start, end int) {
	for i := start; i < end; i++ {
		var s float32
		for _, x := range r.m[i*r.cols : (i+1)*r.cols] {
			s += x * 1.0001
		}
		r.out[i] = s
		r.who[i] = worker
	}
}

func newRowSums(rows, cols int) *rowSums {
	r := &rowSums{m: make([]float32, rows*cols), cols: cols, out: make([]float32, rows), who: make([]int, rows)}
	for i := range r.m {
		r.m[i] = float32(math.Sin(float64(i)))
	}
	return r
}

func TestRunSameResultsForAnyPoolSize(t *testing.T) {
	const rows, cols = 301, 67
	want := newRowSums(rows, cols)
	want.RunRange(0, 0, rows)
	for n := 1; n <= 4; n++ {
		p := New(n)
		for rep := 0; rep < 50; rep++ {
			got := newRowSums(rows, cols)
			p.Run(got, rows, 4)
			for i := range want.out {
				if math.Float32bits(got.out[i]) != math.Float32bits(want.out[i]) {
					t.Fatalf("n=%d row %d: %v != %v", n, i, got.out[i], want.out[i])
				}
			}
			if n > 1 {
				used := map[int]bool{}
				for _, w := range got.who {
					used[w] = true
				}
				if len(used) != n {
					t.Fatalf("n=%d: %d workers did work", n, len(used))
				}
			}
		}
		p.Close()
	}
}

func TestRunDoesNotAllocate(t *testing.T) {
	p := New(3)
	defer p.Close()
	r := newRowSums(64, 8)
	allocs := testing.AllocsPerRun(200, func() { p.Run(r, 64, 1) })
	if allocs != 0 {
		t.Fatalf("Run allocates %v times per call", allocs)
	}
}

func TestParkedWorkersWake(t *testing.T) {
	p := New(2)
	defer p.Close()
	r := newRowSums(10, 3)
	p.Run(r, 10, 1)
	// Let the worker exhaust its spinning and park, then dispatch again.
	for i := 0; i < 3; i++ {
		for j := 0; j < spinIters*4; j++ {
			_ = j
		}
		r2 := newRowSums(10, 3)
		p.Run(r2, 10, 1)
		if r2.who[9] != 1 {
			t.Fatalf("the second worker did not take its part")
		}
	}
}

func BenchmarkDispatch(b *testing.B) {
	p := New(2)
	defer p.Close()
	r := newRowSums(2, 1)
	b.ReportAllocs()
	for b.Loop() {
		p.Run(r, 2, 1)
	}
}

// slowPart is rowSums whose worker 1 sleeps first, so that the caller's wait for it
// runs through many polls (and, with SetYieldWaiting, OS yields).
type slowPart struct{ *rowSums }

func (s slowPart) RunRange(w, start, end int) {
	if w == 1 {
		time.Sleep(2 * time.Millisecond)
	}
	s.rowSums.RunRange(w, start, end)
}

func TestRunYieldWaitingSameResults(t *testing.T) {
	SetYieldWaiting(true)
	defer SetYieldWaiting(false)
	const rows, cols = 97, 13
	want := newRowSums(rows, cols)
	want.RunRange(0, 0, rows)
	p := New(2)
	defer p.Close()
	for rep := 0; rep < 5; rep++ {
		got := newRowSums(rows, cols)
		p.Run(slowPart{got}, rows, 1)
		for i := range want.out {
			if math.Float32bits(got.out[i]) != math.Float32bits(want.out[i]) {
				t.Fatalf("row %d: %v != %v", i, got.out[i], want.out[i])
			}
		}
		if got.who[rows-1] != 1 {
			t.Fatalf("the second worker did not take its part")
		}
	}
}
