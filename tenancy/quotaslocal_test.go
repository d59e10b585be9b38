package tenancy

import (
	"errors"
	"testing"
	"time"

	"github.com/lmlite/lmlite/money"
)

// TestLocalBudgetWindowsRollAtUTCMidnight: the in-process budget windows, checked in
// each call's own critical section (lockAt: the UTC day's bounds), move at UTC
// midnight exactly, whatever the location of now: a day's spend refuses a reservation
// up to its last nanosecond, the next day starts empty at 00:00:00 UTC, and the
// month's spend carries over.
func TestLocalBudgetWindowsRollAtUTCMidnight(t *testing.T) {
	ten := New(nil)
	unit := money.USD(0.001)
	q := &Quota{Tenant: "midnight", DailyBudget: 10 * unit, MonthlyBudget: 15 * unit}
	midnight := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	east := time.FixedZone("UTC+5", 5*60*60)

	tk, err := ten.AdmitReserve(q, midnight.Add(-time.Hour).In(east), 0, 10*unit) // 04:00 on the 24th at UTC+5: the 23rd in UTC
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Settle(Entry{Time: midnight.Add(-time.Hour), Cost: 10 * unit}); err != nil {
		t.Fatal(err)
	}
	if _, err := ten.AdmitReserve(q, midnight.Add(-time.Nanosecond), 0, unit); !errors.Is(err, ErrInsufficientQuota) {
		t.Fatalf("the 23rd's last nanosecond, its budget spent: %v, want ErrInsufficientQuota", err)
	}
	if got := ten.Remaining(q, midnight.Add(-time.Nanosecond).In(east)); got != 0 {
		t.Fatalf("left on the 23rd (UTC) at UTC+5: %v, want 0", got)
	}
	if got := ten.Remaining(q, midnight); got != 5*unit {
		t.Fatalf("left at 00:00:00 UTC on the 24th: %v, want the month's 5 (the day's 10 are new)", got)
	}
	tk, err = ten.AdmitReserve(q, midnight, 0, 5*unit)
	if err != nil {
		t.Fatalf("the 24th's first reservation: %v", err)
	}
	if _, err := tk.Settle(Entry{Time: midnight, Cost: 5 * unit}); err != nil {
		t.Fatal(err)
	}
	if got := ten.Remaining(q, midnight.AddDate(0, 0, 3)); got != 0 {
		t.Fatalf("left three days later, the month's 15 spent: %v, want 0", got)
	}
	if got := ten.Remaining(q, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)); got != 10*unit {
		t.Fatalf("left on the 1st of December: %v, want the day's 10", got)
	}
}

// TestLocalQuotasByIDKeepTheBudgetContract: the in-process Shared's methods called by
// ticket id (for a caller holding no Ticket; a Tenancy's tickets hold their own
// reservation) reserve, release and settle exactly, free the slot, and keep nothing
// under the id once settled.
func TestLocalQuotasByIDKeepTheBudgetContract(t *testing.T) {
	l := newLocalQuotas(nil)
	unit := money.USD(0.001)
	q := &Quota{Tenant: "by-id", DailyBudget: 10 * unit, MaxConcurrency: 2}
	now := time.Now()
	if _, err := l.Admit(q, "a", now, 0, 6*unit); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(q, "b", now, 0, 5*unit); !errors.Is(err, ErrInsufficientQuota) {
		t.Fatalf("5 of the 4 left: %v, want ErrInsufficientQuota", err)
	}
	if room, err := l.Reserve(q, "a", now, 0); err != nil || room != 10*unit {
		t.Fatalf("a released: room %v (%v), want %v", room, err, 10*unit)
	}
	if _, err := l.Admit(q, "b", now, 0, 5*unit); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(q, "a", now, 6*unit); !errors.Is(err, ErrInsufficientQuota) {
		t.Fatalf("a reserving 6 of the 5 left: %v, want ErrInsufficientQuota", err)
	}
	if room, err := l.Reserve(q, "a", now, 5*unit); err != nil || room != 0 {
		t.Fatalf("a reserving the other 5: room %v (%v), want 0", room, err)
	}
	if got := l.InFlight(q.Tenant); got != 2 {
		t.Fatalf("in flight: %d, want 2", got)
	}
	l.Settle(q, "a", now, 4*unit, 0)
	l.Settle(q, "b", now, 2*unit, 0)
	if got := l.RoomAt(q, now); got != 4*unit {
		t.Fatalf("left after 6 charged: %v, want %v", got, 4*unit)
	}
	ts := l.tenant(q.Tenant)
	ts.mu.Lock()
	n, inFlight := len(ts.byID), ts.inFlight
	ts.mu.Unlock()
	if n != 0 || inFlight != 0 {
		t.Fatalf("after both settled: %d ids kept, %d in flight; want 0, 0", n, inFlight)
	}
}
