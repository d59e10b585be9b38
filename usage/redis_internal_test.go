package usage

import (
	"context"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

// sliceSource is a ledger as a slice: entry i has seq i+1.
type sliceSource []Event

func (s sliceSource) ID() string { return "slice" }

func (s sliceSource) UsageSince(seq uint64, fn func(uint64, Event) error) error {
	for i := int(seq); i < len(s); i++ {
		if err := fn(uint64(i+1), s[i]); err != nil {
			return err
		}
	}
	return nil
}

// A batch sent again after its reply was lost (the process still believes it
// unsent) is skipped by the script when Redis's seq covers it, and refused when it
// overlaps it, then resent from Redis's seq: nothing counts twice.
func TestRedisScriptSkipsWhatItCounted(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "script-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Now().UTC()
	var src sliceSource
	more := func(n int) {
		for range n {
			src = append(src, settled(now, "a", "m", "fast", 10, 1, 3, time.Millisecond))
		}
	}
	r := NewRedis(c, nil, RedisOptions{KeyPrefix: "s:", Every: time.Hour})
	defer r.Close()
	ctx := context.Background()
	requests := func() int64 {
		t.Helper()
		bs, err := r.Query(Query{Start: now, End: now.Add(time.Nanosecond), Width: Day})
		if err != nil || len(bs) != 1 || len(bs[0].Results) != 1 {
			t.Fatalf("%+v %v", bs, err)
		}
		return bs[0].Results[0].Requests
	}
	more(10)
	r.src = src
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	more(5)
	r.src = src
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	// The reply of 11..15 was lost: the same batch again is skipped.
	r.pubMu.Lock()
	r.sent = 10
	r.pubMu.Unlock()
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if n := requests(); n != 15 {
		t.Fatalf("after resending 11..15: %d requests, want 15", n)
	}
	// Believing nothing sent, with one more entry: 1..16 overlaps 1..15 and is
	// refused; the next publish asks Redis and sends 16 alone.
	more(1)
	r.src = src
	r.pubMu.Lock()
	r.sent = 0
	r.pubMu.Unlock()
	if err := r.Publish(ctx); err == nil {
		t.Fatal("an overlapping batch was taken")
	}
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if n := requests(); n != 16 {
		t.Fatalf("after the overlap: %d requests, want 16", n)
	}
}
