package tenancy

import (
	"errors"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// admitter is what both the in-process and the Redis-shared Tenancy offer.
type admitter interface {
	Admit(q *Quota, now time.Time, promptTokens int) (*Ticket, error)
	AdmitBatch(q *Quota, now time.Time) (*Ticket, error)
}

// checkBatchLane: with one slot, two requests (burst) and 100 tokens a minute, ten
// batch lines at once are admitted and settled without taking the slot, the rate
// token or the tokens of the interactive request beside them; the budget binds both.
func checkBatchLane(t *testing.T, ten admitter) {
	q := &Quota{Tenant: "lane", RequestsPerSecond: 1, Burst: 2, TokensPerMinute: 100, MaxConcurrency: 1,
		DailyBudget: money.USD(1)}
	now := time.Now()
	var lines []*Ticket
	for range 10 {
		tk, err := ten.AdmitBatch(q, now)
		if err != nil {
			t.Fatalf("batch line: %v", err)
		}
		if err := tk.Reserve(now, money.USD(0.05)); err != nil {
			t.Fatalf("batch line's reserve: %v", err)
		}
		lines = append(lines, tk)
	}
	in, err := ten.Admit(q, now, 50)
	if err != nil {
		t.Fatalf("the interactive request beside 10 batch lines: %v", err)
	}
	for _, tk := range lines {
		if _, err := tk.Settle(Entry{Time: now, Cost: money.USD(0.05), PromptTokens: 500, CompletionTokens: 500}); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Reserve(now, money.USD(0.4)); err != nil {
		t.Fatalf("interactive reserve: %v", err)
	}
	in.Settle(Entry{Time: now, Cost: money.USD(0.4), PromptTokens: 50})
	// The lines' 10,000 tokens were not charged to tokens/min: 50 are still there.
	later := now
	tk, err := ten.Admit(q, later, 40)
	if err != nil {
		t.Fatalf("interactive after the lines: %v", err)
	}
	tk.Settle(Entry{Time: later})
	// The budget is the same for both: $0.90 spent of $1, a line's $0.15 does not fit.
	tk, err = ten.AdmitBatch(q, later)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Reserve(later, money.USD(0.15)); !errors.Is(err, ErrInsufficientQuota) {
		t.Fatalf("a batch line over the budget: %v", err)
	}
	tk.Settle(Entry{Time: later})
}

func TestBatchLaneInProcess(t *testing.T) {
	checkBatchLane(t, New(nil))
}

func TestRedisBatchLane(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	checkBatchLane(t, newProc(t, srv, "a", 5*time.Second).ten)
}
