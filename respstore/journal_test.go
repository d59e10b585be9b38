package respstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// crashClose closes s as a crash would leave it: the Puts acknowledged since the
// last bbolt commit are only in the journal.
func crashClose(t *testing.T, s *Bolt) {
	t.Helper()
	s.crashAtClose = true
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestJournalReplaysPutsBoltLacks: Puts acknowledged but not yet committed by bbolt
// (the store closed as a crash leaves it) are read back after opening again, with
// the tenant's usage exact; a response deleted before them (a bbolt commit) is not
// brought back by the replay, and a second open replays only what is new.
func TestJournalReplaysPutsBoltLacks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, gcRec("a", "resp_x", 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a", "resp_x", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"resp_y", "resp_z"} {
		if err := s.Put(ctx, gcRec("a", id, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, gcRec("b", "resp_b", 10)); err != nil {
		t.Fatal(err)
	}
	// Not committed by bbolt yet: the readers find them in the overlay, per tenant.
	s.qmu.Lock()
	queued := len(s.queue)
	s.qmu.Unlock()
	if queued != 3 {
		t.Fatalf("bbolt committed the Puts (%d queued): the test needs them in the journal only", queued)
	}
	if _, err := s.Get(ctx, "a", "resp_y", time.Now()); err != nil {
		t.Errorf("resp_y, acknowledged: %v", err)
	}
	if items, _, err := s.InputItems(ctx, "a", "resp_z", Page{}, time.Now()); err != nil || len(items) != 1 {
		t.Errorf("resp_z's input items, acknowledged: %v (%v)", items, err)
	}
	if conv, err := s.Conversation(ctx, "a", "resp_y", time.Now()); err != nil || len(conv) != 2 {
		t.Errorf("resp_y's conversation, acknowledged: %d items (%v)", len(conv), err)
	}
	if _, err := s.Get(ctx, "b", "resp_y", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("a's acknowledged response read by b: %v, want ErrNotFound", err)
	}
	if u, _ := s.Usage(ctx, "a"); u.Count != 2 {
		t.Errorf("a's usage with its Puts acknowledged: %+v, want 2", u)
	}
	crashClose(t, s)

	s, err = openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.replayed != 3 {
		t.Errorf("replayed %d Puts, want 3", s.replayed)
	}
	one := gcRec("a", "resp_y", 10)
	for _, id := range []string{"resp_y", "resp_z"} {
		if _, err := s.Get(ctx, "a", id, time.Now()); err != nil {
			t.Errorf("%s after the crash: %v", id, err)
		}
	}
	if _, err := s.Get(ctx, "a", "resp_x", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("resp_x, deleted before the crash: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "a", "resp_b", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("b's response read as a's: %v, want ErrNotFound", err)
	}
	if u, _ := s.Usage(ctx, "a"); u.Count != 2 || u.Bytes != 2*one.Size() {
		t.Errorf("a's usage after the replay: %+v, want 2 responses, %d bytes", u, 2*one.Size())
	}
	if err := s.Put(ctx, gcRec("a", "resp_w", 10)); err != nil {
		t.Fatal(err)
	}
	crashClose(t, s)

	s, err = openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.replayed != 1 {
		t.Errorf("the second open replayed %d Puts, want 1 (resp_w)", s.replayed)
	}
	if u, _ := s.Usage(ctx, "a"); u.Count != 3 || u.Bytes != 3*one.Size() {
		t.Errorf("a's usage after the second replay: %+v, want 3 responses", u)
	}
}

// TestJournalTornTailIgnored: bytes after the last whole record (a write the crash
// cut, never acknowledged) are not applied, and the store opens.
func TestJournalTornTailIgnored(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, gcRec("a", "resp_1", 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, gcRec("a", "resp_2", 10)); err != nil {
		t.Fatal(err)
	}
	end := s.j.off // where the second record ends
	crashClose(t, s)
	// Spoil the second record's last bytes: as if its write had not finished.
	f, err := os.OpenFile(path+"-journal", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff}, end-5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, err = openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(ctx, "a", "resp_1", time.Now()); err != nil {
		t.Errorf("the whole record's Put: %v", err)
	}
	if _, err := s.Get(ctx, "a", "resp_2", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("the torn record's Put: %v, want ErrNotFound", err)
	}
}

// TestJournalRecordsStopAtOlderPass: a record whose seq does not grow (a record of
// an earlier pass, behind the current pass's last) ends the journal.
func TestJournalRecordsStopAtOlderPass(t *testing.T) {
	var b []byte
	for _, seq := range []uint64{7, 8, 3, 9} {
		b = appendJournalRecord(b, seq, []byte{byte(seq)})
	}
	var got []uint64
	last, err := journalRecords(b, func(seq uint64, _ []byte) error { got = append(got, seq); return nil })
	if err != nil || last != 8 || len(got) != 2 {
		t.Errorf("records %v (last %d, %v), want 7 and 8", got, last, err)
	}
}

// TestJournalOfAnotherDatabaseNotReplayed: a journal left beside a bbolt file made
// again (the old one deleted) is not applied to it: the new file starts empty.
func TestJournalOfAnotherDatabaseNotReplayed(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, gcRec("a", "resp_old", 10)); err != nil {
		t.Fatal(err)
	}
	crashClose(t, s)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s, err = openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(ctx, "a", "resp_old", time.Now()); !errors.Is(err, ErrNotFound) || s.replayed != 0 {
		t.Errorf("the old file's response in the new one: %v (%d replayed), want ErrNotFound", err, s.replayed)
	}
	if u, _ := s.Usage(ctx, "a"); u.Count != 0 {
		t.Errorf("usage of the new file: %+v, want none", u)
	}
}

// TestPutNotBlockedByBoltCommit: while bbolt commits acknowledged Puts (held here
// inside the commit by a hook, as a slow disk holds its fsyncs), a new Put is still
// journaled and answered, and a read of an acknowledged response is answered: the
// bbolt commit is off the Puts' path. Afterwards everything is in bbolt, usage exact.
func TestPutNotBlockedByBoltCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	// bbolt commits as soon as it has acknowledged Puts.
	s, err := openBolt(path, Options{}, 0, time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.commitHook = func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	if err := s.Put(ctx, gcRec("a", "resp_1", 10)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("bbolt did not commit resp_1")
	}
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, gcRec("a", "resp_2", 10)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("resp_2 during the commit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a Put waited for the bbolt commit under way (5 s)")
		close(release)
		<-done
	}
	if _, err := s.Get(ctx, "a", "resp_1", time.Now()); err != nil {
		t.Errorf("resp_1 during its commit: %v", err)
	}
	if !t.Failed() {
		close(release)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = openBolt(path, Options{}, time.Hour, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	one := gcRec("a", "resp_1", 10)
	if u, _ := s.Usage(ctx, "a"); u.Count != 2 || u.Bytes != 2*one.Size() || s.replayed != 0 {
		t.Errorf("after Close: usage %+v (%d replayed), want 2 responses in bbolt", u, s.replayed)
	}
}
