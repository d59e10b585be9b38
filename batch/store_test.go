package batch

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Another tenant's file or job is found by the same lookup as a missing one, and is
// just as much a miss: one read, nothing decoded (so "exists but not yours" does no
// more work, and takes no longer, than "does not exist").
func TestForeignIDIsTheSameMissAsAMissingOne(t *testing.T) {
	s := openStore(t, t.TempDir())
	f, err := s.PutFile("t1", "batch", "in.jsonl", strings.NewReader(input(2)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j := Job{ID: newID("batch_"), Tenant: "t1", InputFileID: f.ID, Status: Completed}
	if err := s.createJob(&j); err != nil {
		t.Fatal(err)
	}
	cost := func(lookup func() error) (reads, decoded int64) {
		r0, d0 := s.lookups.Load(), s.decoded.Load()
		if err := lookup(); err != ErrNotFound {
			t.Fatalf("lookup: %v, want ErrNotFound", err)
		}
		return s.lookups.Load() - r0, s.decoded.Load() - d0
	}
	for _, c := range []struct {
		what             string
		foreign, missing func() error
	}{
		{"file", func() error { _, err := s.File("t2", f.ID); return err }, func() error { _, err := s.File("t2", "file-0123456789abcdef01234567"); return err }},
		{"job", func() error { _, err := s.Job("t2", j.ID); return err }, func() error { _, err := s.Job("t2", "batch_0123456789abcdef01234567"); return err }},
	} {
		fr, fd := cost(c.foreign)
		mr, md := cost(c.missing)
		if fr != mr || fd != md || fd != 0 {
			t.Errorf("%s: a foreign id read %d and decoded %d records, a missing one %d and %d", c.what, fr, fd, mr, md)
		}
	}
}

// Ids are random: made at the same instant they share no prefix, and they do not
// sort by creation.
func TestIDsAreRandomNotTimeDerived(t *testing.T) {
	s := openStore(t, t.TempDir())
	now := time.Unix(1_700_000_000, 0)
	prefixes := map[string]bool{}
	var prev string
	sorted := true
	for i := range 32 {
		f, err := s.PutFile("t1", "batch", "in.jsonl", strings.NewReader(input(1)), now.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(f.ID, "file-") || len(f.ID) != len("file-")+24 {
			t.Fatalf("id %q: want file- and 24 hex digits", f.ID)
		}
		prefixes[f.ID[5:13]] = true // the first 4 bytes
		if f.ID < prev {
			sorted = false
		}
		prev = f.ID
	}
	if len(prefixes) < 30 || sorted {
		t.Fatalf("32 ids: %d distinct first 4 bytes, sorted by creation: %v", len(prefixes), sorted)
	}
}

// A .tmp file an interrupted upload left in the files directory is removed when the
// store opens.
func TestStaleTmpFilesRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	stale := filepath.Join(dir, "files", "file-0123456789abcdef01234567.tmp")
	if err := os.WriteFile(stale, []byte(strings.Repeat("x", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	openStore(t, dir)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale upload is still there: %v", err)
	}
}

// A store written before files and jobs were keyed by tenant (and before ids were
// random) still serves its files and jobs by their old ids, lists its jobs newest
// first, and keeps them from other tenants.
func TestOldStoreStillLoads(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "batch.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := []string{"batch_1790e1a6c7f0a0001a2b3c4d", "batch_1790e1a6c7f0a0011a2b3c4d", "batch_1790e1a6c7f0a0021a2b3c4d"}
	err = db.Update(func(tx *bolt.Tx) error {
		fb, _ := tx.CreateBucketIfNotExists([]byte("files"))
		jb, _ := tx.CreateBucketIfNotExists([]byte("jobs"))
		tx.CreateBucketIfNotExists([]byte("lines"))
		v, _ := json.Marshal(File{ID: "file-1790e1a6c7f0a0001a2b3c4d", Tenant: "t1", Purpose: "batch", Bytes: 3, Lines: 1, CreatedAt: 1})
		fb.Put([]byte("file-1790e1a6c7f0a0001a2b3c4d"), v)
		for i, id := range old {
			v, _ := json.Marshal(Job{ID: id, Tenant: "t1", Status: Completed, CreatedAt: int64(i)})
			jb.Put([]byte(id), v)
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "files", "file-1790e1a6c7f0a0001a2b3c4d"), []byte("{}\n"), 0o600)
	s := openStore(t, dir)
	if f, err := s.File("t1", "file-1790e1a6c7f0a0001a2b3c4d"); err != nil || f.Bytes != 3 {
		t.Fatalf("old file: %+v %v", f, err)
	}
	if _, err := s.File("t2", "file-1790e1a6c7f0a0001a2b3c4d"); err != ErrNotFound {
		t.Fatalf("old file for another tenant: %v", err)
	}
	if _, err := s.Job("t1", old[1]); err != nil {
		t.Fatal(err)
	}
	js, more, err := s.Jobs("t1", "", 2)
	if err != nil || !more || len(js) != 2 || js[0].ID != old[2] || js[1].ID != old[1] {
		t.Fatalf("newest first: %v %v %v", js, more, err)
	}
	js, more, _ = s.Jobs("t1", old[1], 2)
	if more || len(js) != 1 || js[0].ID != old[0] {
		t.Fatalf("after %s: %v %v", old[1], js, more)
	}
}

// A job in progress in a store written before jobs had plans (and were keyed by
// tenant) resumes after the upgrade: it validates its input file again into a plan,
// runs the lines without a result, and ends with every line once.
func TestOldJobInProgressResumes(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o700); err != nil {
		t.Fatal(err)
	}
	in := input(6)
	fileID, jobID := "file-1790e1a6c7f0a0001a2b3c4d", "batch_1790e1a6c7f0a0001a2b3c4d"
	if err := os.WriteFile(filepath.Join(dir, "files", fileID), []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "batch.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		fb, _ := tx.CreateBucketIfNotExists([]byte("files"))
		jb, _ := tx.CreateBucketIfNotExists([]byte("jobs"))
		lb, _ := tx.CreateBucketIfNotExists([]byte("lines"))
		v, _ := json.Marshal(File{ID: fileID, Tenant: "t1", Purpose: "batch", Bytes: int64(len(in)), Lines: 6, CreatedAt: 1})
		fb.Put([]byte(fileID), v)
		v, _ = json.Marshal(Job{ID: jobID, Tenant: "t1", InputFileID: fileID, Endpoint: "/v1/completions", CompletionWindow: "24h",
			Status: InProgress, Counts: Counts{Total: 6, Completed: 2}, CreatedAt: time.Now().Unix(), ExpiresAt: time.Now().Add(time.Hour).Unix()})
		jb.Put([]byte(jobID), v)
		for _, i := range []int{0, 3} { // two lines committed before the upgrade
			v, _ := json.Marshal(Result{Index: i, CustomID: fmt.Sprintf("req-%d", i), StatusCode: 200, Body: json.RawMessage(`{}`)})
			lb.Put(lineKey(jobID, i), v)
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	run := &fakeRunner{}
	m := NewManager(s, run, Options{Checker: price})
	defer m.Close()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	j := waitTerminal(t, s, jobID)
	out, errs := readLines(t, s, j)
	if j.Status != Completed || len(out) != 6 || len(errs) != 0 || j.Counts.Completed != 6 {
		t.Fatalf("job %s: %d out, %d errors, %+v", j.Status, len(out), len(errs), j.Counts)
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	if len(run.runs) != 4 || run.runs[jobID+"-0"] != 0 || run.runs[jobID+"-3"] != 0 {
		t.Fatalf("ran %v: want the four lines without a result, once each", run.runs)
	}
}

// Uploads of one tenant at once are counted together as their bytes arrive: ten
// concurrent uploads of 1,000 bytes within a quota of 3,500 store at most three, and
// the refused ones leave nothing behind.
func TestConcurrentUploadsShareTheQuota(t *testing.T) {
	s := openStore(t, t.TempDir())
	body := strings.Repeat(strings.Repeat("x", 99)+"\n", 10) // 1,000 bytes
	lim := FileLimits{MaxBytes: 3500, MaxFiles: 100}
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A slow reader: every upload is under way while the others are.
			_, errs[i] = s.PutFileWith("t1", "batch", "in.jsonl", iotest.OneByteReader(strings.NewReader(body)), time.Now(), PutOptions{Limits: lim})
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrQuota):
			refused++
		default:
			t.Fatal(err)
		}
	}
	b, n := s.Usage("t1")
	if ok > 3 || ok+refused != 10 || n != ok || b != int64(ok*1000) {
		t.Fatalf("%d stored, %d refused; usage %d bytes in %d files", ok, refused, b, n)
	}
	if tmps, _ := filepath.Glob(filepath.Join(s.dir, "files", "*.tmp")); len(tmps) > 0 {
		t.Fatalf("left %v", tmps)
	}
	var qe *QuotaError
	for _, err := range errs {
		if errors.As(err, &qe) && (qe.Limit != "files_max_bytes" || qe.Max != 3500) {
			t.Fatalf("%+v", qe)
		}
	}
}
