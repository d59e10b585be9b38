package batch

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/money"
)

// ErrNotFound is returned for a file or job that does not exist or belongs to
// another tenant (the two are the same to a caller, and cost the same: files and jobs
// are keyed by tenant and id, so either is one lookup that misses).
var ErrNotFound = errors.New("batch: not found")

// ErrTooLarge is returned by PutFile for a file over MaxFileBytes or MaxFileLines.
var ErrTooLarge = errors.New("batch: file too large")

// ErrRead wraps an error of the reader PutFile copies from (a broken upload).
var ErrRead = errors.New("batch: reading the file")

// ErrQuota is wrapped by the QuotaError of a file over its tenant's quota.
var ErrQuota = errors.New("batch: over the tenant's file quota")

// QuotaError says which of a tenant's file quotas (FileLimits) an upload would pass.
type QuotaError struct {
	Limit string // "files_max_bytes" or "files_max_count" (the plan's field)
	Max   int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("batch: over the tenant's %s of %d", e.Limit, e.Max)
}
func (e *QuotaError) Unwrap() error { return ErrQuota }

// Expiry of files (OpenAI's expires_after): files expire this long after they were
// made unless their upload says otherwise (MinFileExpiry..MaxFileExpiry); a batch's
// output and error files too, unless its output_expires_after says otherwise.
const (
	DefaultFileExpiry = 30 * 24 * time.Hour
	MinFileExpiry     = time.Hour
	MaxFileExpiry     = 30 * 24 * time.Hour
)

var (
	bucketFiles = []byte("files")     // tenant/id → File
	bucketJobs  = []byte("jobs")      // tenant/id → Job
	bucketOrder = []byte("job_order") // tenant/seq (8 bytes, big-endian) → job id: each tenant's jobs in creation order
	bucketLines = []byte("lines")     // job/index → Result
	bucketPlan  = []byte("plan")      // a validated job's lines (plan.go)
)

// File is an uploaded or generated file's metadata; its bytes are a file under the
// store's directory.
type File struct {
	ID        string `json:"id"`
	Tenant    string `json:"tenant"`
	Purpose   string `json:"purpose"`
	Filename  string `json:"filename"`
	Bytes     int64  `json:"bytes"`
	Lines     int    `json:"lines"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at,omitempty"` // Unix seconds; 0: never
	Seq       uint64 `json:"seq,omitempty"`        // the order files were stored in
}

// Expired reports whether the file has expired at now.
func (f *File) Expired(now time.Time) bool { return f.ExpiresAt != 0 && now.Unix() >= f.ExpiresAt }

// Counts are a job's request_counts.
type Counts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// Job is one batch.
type Job struct {
	ID               string            `json:"id"`
	Tenant           string            `json:"tenant"`
	KeyID            string            `json:"key_id,omitempty"`
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	Cap              money.Money       `json:"cap,omitempty"`
	// OutputExpiresAfter is how long after they are written the output and error
	// files expire, in seconds; 0: DefaultFileExpiry.
	OutputExpiresAfter int64       `json:"output_expires_after,omitempty"`
	Status             Status      `json:"status"`
	Target             Status      `json:"target,omitempty"` // set while the files of a terminal status are written
	Errors             []LineError `json:"errors,omitempty"`
	Counts             Counts      `json:"request_counts"`
	// NotRun are the lines of Counts.Failed that never ran: drained to the error file
	// when the job was cancelled, expired or reached its cap (OpenAI's request_counts
	// count them as failed; the dashboard shows how far the job got).
	NotRun          int         `json:"not_run,omitempty"`
	Spent           money.Money `json:"spent"`
	PausedReason    string      `json:"paused_reason,omitempty"`
	CancelRequested bool        `json:"cancel_requested,omitempty"`
	OutputFileID    string      `json:"output_file_id,omitempty"`
	ErrorFileID     string      `json:"error_file_id,omitempty"`
	CreatedAt       int64       `json:"created_at"`
	InProgressAt    int64       `json:"in_progress_at,omitempty"`
	ExpiresAt       int64       `json:"expires_at,omitempty"`
	FinalizingAt    int64       `json:"finalizing_at,omitempty"`
	CompletedAt     int64       `json:"completed_at,omitempty"`
	FailedAt        int64       `json:"failed_at,omitempty"`
	ExpiredAt       int64       `json:"expired_at,omitempty"`
	CancellingAt    int64       `json:"cancelling_at,omitempty"`
	CancelledAt     int64       `json:"cancelled_at,omitempty"`
	Seq             uint64      `json:"seq,omitempty"` // the tenant's jobs' order (bucketOrder)
}

// Result is one line's committed outcome: a response (output file when 2xx, else
// error file) or an error without a response (a line the job did not run).
type Result struct {
	Index            int             `json:"i"`
	CustomID         string          `json:"custom_id"`
	StatusCode       int             `json:"status_code,omitempty"`
	RequestID        string          `json:"request_id,omitempty"`
	Body             json.RawMessage `json:"body,omitempty"`
	Code             string          `json:"code,omitempty"`
	Message          string          `json:"message,omitempty"`
	Cost             money.Money     `json:"cost,omitempty"`
	PromptTokens     int             `json:"prompt_tokens,omitempty"`
	CompletionTokens int             `json:"completion_tokens,omitempty"`
}

// NotRun reports whether the line was drained without running (its job was
// cancelled, expired or reached its cap first).
func (r *Result) NotRun() bool {
	return r.StatusCode == 0 && (r.Code == CodeCancelled || r.Code == CodeExpired || r.Code == CodeMaxCost)
}

// OK reports whether the line goes to the output file.
func (r *Result) OK() bool { return r.StatusCode >= 200 && r.StatusCode < 300 }

// Store holds files (as files under dir/files), and jobs and line results in an
// embedded bbolt database (dir/batch.db).
type Store struct {
	dir string
	db  *bolt.DB

	mu    sync.Mutex
	usage map[string]*fileUsage // guarded by mu: each tenant's stored files, and its uploads under way

	// lookups and decoded count the reads of one file or job by id and the records
	// they decoded: a test's proof that another tenant's id costs what a missing one does.
	lookups, decoded atomic.Int64
}

// fileUsage is what a tenant's files take, and what its uploads under way have taken
// so far (counted against its quota as the bytes arrive).
type fileUsage struct {
	bytes, pendingBytes int64
	files, pendingFiles int
}

// OpenStore opens (creating) the store in dir. It removes what interrupted uploads
// left (dir/files/*.tmp), and moves the records of a store written before files and
// jobs were keyed by tenant to their keys (their ids stay as they were).
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o700); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, "files", "*.tmp"))
	for _, p := range tmps {
		if err := os.Remove(p); err != nil {
			return nil, fmt.Errorf("batch: removing an interrupted upload: %w", err)
		}
	}
	db, err := bolt.Open(filepath.Join(dir, "batch.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	s := &Store{dir: dir, db: db, usage: map[string]*fileUsage{}}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketFiles, bucketJobs, bucketOrder, bucketLines, bucketPlan, bucketStarted} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return migrate(tx)
	})
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketFiles).ForEach(func(_, v []byte) error {
				var f File
				if err := json.Unmarshal(v, &f); err != nil {
					return err
				}
				u := s.usageLocked(f.Tenant)
				u.bytes += f.Bytes
				u.files++
				return nil
			})
		})
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("batch: %w", err)
	}
	return s, nil
}

// migrate moves the records of files and jobs keyed by id alone (a store from before
// they were keyed by tenant: their keys have no '/') to tenant/id, and gives the jobs
// their places in bucketOrder in the order of their old keys, which sorted by time.
func migrate(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketFiles, bucketJobs} {
		b := tx.Bucket(name)
		var olds [][2][]byte
		if err := b.ForEach(func(k, v []byte) error {
			if !bytes.ContainsRune(k, '/') {
				olds = append(olds, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, kv := range olds {
			var rec struct {
				Tenant string `json:"tenant"`
			}
			if err := json.Unmarshal(kv[1], &rec); err != nil {
				return err
			}
			v := kv[1]
			if bytes.Equal(name, bucketJobs) {
				var j Job
				if err := json.Unmarshal(v, &j); err != nil {
					return err
				}
				if err := orderJob(tx, &j); err != nil {
					return err
				}
				var err error
				if v, err = json.Marshal(&j); err != nil {
					return err
				}
			}
			if err := b.Put(tkey(rec.Tenant, string(kv[0])), v); err != nil {
				return err
			}
			if err := b.Delete(kv[0]); err != nil {
				return err
			}
		}
	}
	return nil
}

// orderJob gives a new job its place in its tenant's order.
func orderJob(tx *bolt.Tx, j *Job) error {
	b := tx.Bucket(bucketOrder)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	j.Seq = seq
	return b.Put(orderKey(j.Tenant, seq), []byte(j.ID))
}

// tkey is the key of a tenant's file or job (tenant ids have no '/').
func tkey(tenant, id string) []byte {
	k := make([]byte, 0, len(tenant)+1+len(id))
	k = append(k, tenant...)
	k = append(k, '/')
	return append(k, id...)
}

func orderKey(tenant string, seq uint64) []byte {
	k := append([]byte(tenant), '/', 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint64(k[len(tenant)+1:], seq)
	return k
}

func (s *Store) usageLocked(tenant string) *fileUsage {
	u := s.usage[tenant]
	if u == nil {
		u = &fileUsage{}
		s.usage[tenant] = u
	}
	return u
}

// Usage is what tenant's stored files take: their bytes and their number.
func (s *Store) Usage(tenant string) (bytes int64, files int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usageLocked(tenant)
	return u.bytes, u.files
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// newID is prefix + 24 random hex digits (96 bits from crypto/rand): an id says
// nothing of when it was made, and cannot be guessed.
func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("batch: crypto/rand: " + err.Error()) // never fails on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, "files", id) }

// FileLimits bound a tenant's files (the plan's files_max_bytes and
// files_max_count); 0: no limit.
type FileLimits struct {
	MaxBytes int64 // of every file the tenant has stored, uploads and batch outputs
	MaxFiles int
}

// PutOptions are PutFile's options.
type PutOptions struct {
	Limits    FileLimits
	ExpiresAt int64 // Unix seconds; 0: never
}

// PutFile stores r as a new file of tenant, refusing one over MaxFileBytes or
// MaxFileLines (ErrTooLarge). It streams r to disk and stops reading as soon as
// either limit is passed; only a copy buffer is in memory.
func (s *Store) PutFile(tenant, purpose, filename string, r io.Reader, now time.Time) (File, error) {
	return s.PutFileWith(tenant, purpose, filename, r, now, PutOptions{})
}

// PutFileWith is PutFile within the tenant's file limits: an upload that would pass
// them is refused with a QuotaError (ErrQuota) as soon as it does, its bytes counted
// as they arrive together with the tenant's other uploads under way.
func (s *Store) PutFileWith(tenant, purpose, filename string, r io.Reader, now time.Time, o PutOptions) (File, error) {
	lim := o.Limits
	s.mu.Lock()
	u := s.usageLocked(tenant)
	if lim.MaxFiles > 0 && u.files+u.pendingFiles+1 > lim.MaxFiles {
		s.mu.Unlock()
		return File{}, &QuotaError{Limit: "files_max_count", Max: int64(lim.MaxFiles)}
	}
	u.pendingFiles++
	s.mu.Unlock()
	var counted int64 // this upload's bytes in u.pendingBytes
	defer func() {
		s.mu.Lock()
		u.pendingFiles--
		u.pendingBytes -= counted
		s.mu.Unlock()
	}()
	f := File{ID: newID("file-"), Tenant: tenant, Purpose: purpose, Filename: filename, CreatedAt: now.Unix(), ExpiresAt: o.ExpiresAt}
	tmp := s.path(f.ID) + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return File{}, fmt.Errorf("batch: %w", err)
	}
	defer os.Remove(tmp)
	lr := &lineCounter{r: io.LimitReader(r, MaxFileBytes+1)}
	if lim.MaxBytes > 0 {
		lr.charge = func(n int) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			counted += int64(n)
			u.pendingBytes += int64(n)
			if u.bytes+u.pendingBytes > lim.MaxBytes {
				return &QuotaError{Limit: "files_max_bytes", Max: lim.MaxBytes}
			}
			return nil
		}
	}
	n, err := io.Copy(out, lr)
	if errors.Is(err, errTooManyLines) {
		out.Close()
		return File{}, ErrTooLarge
	}
	if errors.Is(err, ErrQuota) {
		out.Close()
		return File{}, err
	}
	if err != nil && lr.rerr != nil {
		out.Close()
		return File{}, fmt.Errorf("%w: %v", ErrRead, err)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return File{}, fmt.Errorf("batch: %w", err)
	}
	if lr.last != '\n' && n > 0 {
		lr.lines++
	}
	if n > MaxFileBytes || lr.lines > MaxFileLines {
		return File{}, ErrTooLarge
	}
	f.Bytes, f.Lines = n, lr.lines
	if err := os.Rename(tmp, s.path(f.ID)); err != nil {
		return File{}, fmt.Errorf("batch: %w", err)
	}
	if err := s.putNewFiles([]*File{&f}); err != nil {
		os.Remove(s.path(f.ID))
		return File{}, err
	}
	return f, nil
}

var errTooManyLines = errors.New("batch: too many lines")

// lineCounter counts the lines passing through and fails once they are more than
// MaxFileLines (so that an upload over the limit is not read to its end), or once
// charge (when set) refuses the bytes read.
type lineCounter struct {
	r      io.Reader
	lines  int
	last   byte
	rerr   error // the reader's own error (not io.EOF)
	charge func(n int) error
}

func (c *lineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.lines += bytes.Count(p[:n], []byte{'\n'})
	if n > 0 {
		c.last = p[n-1]
	}
	if err != nil && err != io.EOF {
		c.rerr = err
	}
	if c.lines > MaxFileLines {
		return n, errTooManyLines
	}
	if c.charge != nil && n > 0 {
		if qerr := c.charge(n); qerr != nil {
			return n, qerr
		}
	}
	return n, err
}

// putNewFiles records files whose bytes are in place (each new, or replacing the
// one of its id: a job's output rewritten) and counts them in their tenants' usage.
func (s *Store) putNewFiles(fs []*File, also ...func(tx *bolt.Tx) error) error {
	type delta struct {
		bytes int64
		files int
	}
	var ds map[string]delta
	err := s.db.Update(func(tx *bolt.Tx) error {
		ds = map[string]delta{}
		b := tx.Bucket(bucketFiles)
		for _, f := range fs {
			k := tkey(f.Tenant, f.ID)
			d := ds[f.Tenant]
			if old := b.Get(k); old != nil {
				var of File
				if err := json.Unmarshal(old, &of); err != nil {
					return err
				}
				d.bytes -= of.Bytes
				d.files--
				f.Seq = of.Seq
			} else {
				seq, err := b.NextSequence()
				if err != nil {
					return err
				}
				f.Seq = seq
			}
			d.bytes += f.Bytes
			d.files++
			ds[f.Tenant] = d
			v, err := json.Marshal(f)
			if err != nil {
				return err
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		for _, fn := range also {
			if err := fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	s.mu.Lock()
	for t, d := range ds {
		u := s.usageLocked(t)
		u.bytes += d.bytes
		u.files += d.files
	}
	s.mu.Unlock()
	return nil
}

func putFile(tx *bolt.Tx, f *File) error {
	v, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketFiles).Put(tkey(f.Tenant, f.ID), v)
}

// getFile is tenant's file id in tx: one lookup, a miss for another tenant's.
func (s *Store) getFile(tx *bolt.Tx, tenant, id string) (File, error) {
	var f File
	s.lookups.Add(1)
	v := tx.Bucket(bucketFiles).Get(tkey(tenant, id))
	if v == nil {
		return f, ErrNotFound
	}
	s.decoded.Add(1)
	return f, json.Unmarshal(v, &f)
}

// File returns tenant's file id.
func (s *Store) File(tenant, id string) (File, error) {
	var f File
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		f, err = s.getFile(tx, tenant, id)
		return err
	})
	return f, err
}

// Files lists tenant's files, oldest first.
func (s *Store) Files(tenant string) ([]File, error) {
	var fs []File
	prefix := tkey(tenant, "")
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketFiles).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var f File
			if err := json.Unmarshal(v, &f); err != nil {
				return err
			}
			fs = append(fs, f)
		}
		return nil
	})
	sort.SliceStable(fs, func(a, b int) bool {
		if fs[a].CreatedAt != fs[b].CreatedAt {
			return fs[a].CreatedAt < fs[b].CreatedAt
		}
		return fs[a].Seq < fs[b].Seq
	})
	return fs, err
}

// Open opens tenant's file id for reading.
func (s *Store) Open(tenant, id string) (*os.File, File, error) {
	f, err := s.File(tenant, id)
	if err != nil {
		return nil, f, err
	}
	r, err := os.Open(s.path(id))
	return r, f, err
}

// DeleteFile deletes tenant's file id.
func (s *Store) DeleteFile(tenant, id string) error {
	var f File
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		if f, err = s.getFile(tx, tenant, id); err != nil {
			return err
		}
		return tx.Bucket(bucketFiles).Delete(tkey(tenant, id))
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	u := s.usageLocked(tenant)
	u.bytes -= f.Bytes
	u.files--
	s.mu.Unlock()
	if err := os.Remove(s.path(id)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// Sweep deletes every file expired at now (their records, then their bytes), except
// the input files of unfinished jobs, which go once their job has ended (a job
// resumed after a restart reads its lines from its input file). It returns how many
// it deleted.
func (s *Store) Sweep(now time.Time) (int, error) {
	var expired []File
	inUse := map[string]bool{}
	err := s.db.View(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketJobs).ForEach(func(_, v []byte) error {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			if !j.Status.Terminal() || j.Target != "" {
				inUse[string(tkey(j.Tenant, j.InputFileID))] = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketFiles).ForEach(func(_, v []byte) error {
			var f File
			if err := json.Unmarshal(v, &f); err != nil {
				return err
			}
			if f.Expired(now) {
				expired = append(expired, f)
			}
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("batch: %w", err)
	}
	n := 0
	for _, f := range expired {
		if inUse[string(tkey(f.Tenant, f.ID))] {
			continue
		}
		if err := s.DeleteFile(f.Tenant, f.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return n, err
		}
		n++
	}
	return n, nil
}

// getJob is tenant's job id in tx: one lookup, a miss for another tenant's.
func (s *Store) getJob(tx *bolt.Tx, tenant, id string) (Job, error) {
	var j Job
	s.lookups.Add(1)
	v := tx.Bucket(bucketJobs).Get(tkey(tenant, id))
	if v == nil {
		return j, ErrNotFound
	}
	s.decoded.Add(1)
	return j, json.Unmarshal(v, &j)
}

// Job returns tenant's job id.
func (s *Store) Job(tenant, id string) (Job, error) {
	var j Job
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		j, err = s.getJob(tx, tenant, id)
		return err
	})
	return j, err
}

// Jobs lists tenant's jobs newest first, after the job id after ("": from the
// newest; one not found: none), at most limit, and whether more follow.
func (s *Store) Jobs(tenant, after string, limit int) ([]Job, bool, error) {
	var js []Job
	more := false
	err := s.db.View(func(tx *bolt.Tx) error {
		prefix := tkey(tenant, "")
		c := tx.Bucket(bucketOrder).Cursor()
		var k, v []byte
		if after == "" {
			// The last key of the prefix: seek past it, step back.
			if k, _ = c.Seek(append(bytes.Clone(prefix), 0xff)); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		} else {
			a, err := s.getJob(tx, tenant, after)
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			c.Seek(orderKey(tenant, a.Seq))
			k, v = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
			if len(js) == limit {
				more = true
				return nil
			}
			j, err := s.getJob(tx, tenant, string(v))
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			js = append(js, j)
		}
		return nil
	})
	return js, more, err
}

// EachJob calls fn for every job of every tenant (for metrics).
func (s *Store) EachJob(fn func(*Job)) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).ForEach(func(_, v []byte) error {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			fn(&j)
			return nil
		})
	})
}

// unfinished returns every job not in a terminal status (to resume after a restart).
func (s *Store) unfinished() ([]Job, error) {
	var js []Job
	err := s.EachJob(func(j *Job) {
		if !j.Status.Terminal() || j.Target != "" {
			js = append(js, *j)
		}
	})
	return js, err
}

// createJob writes a new job, giving it its place in its tenant's order.
func (s *Store) createJob(j *Job) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := orderJob(tx, j); err != nil {
			return err
		}
		return putJob(tx, j)
	})
}

func putJob(tx *bolt.Tx, j *Job) error {
	v, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketJobs).Put(tkey(j.Tenant, j.ID), v)
}

// saveJob writes the job.
func (s *Store) saveJob(j *Job) error {
	return s.db.Update(func(tx *bolt.Tx) error { return putJob(tx, j) })
}

func lineKey(job string, i int) []byte {
	k := make([]byte, len(job)+5)
	copy(k, job)
	k[len(job)] = '/'
	binary.BigEndian.PutUint32(k[len(job)+1:], uint32(i))
	return k
}

// commit records results and the job's spend and counts in one transaction. A line
// already recorded (its result committed before) is skipped and charged nothing: the
// settlement is idempotent per job and line. j is updated to the committed state.
func (s *Store) commit(j *Job, rs []Result) error {
	next := *j
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLines)
		for i := range rs {
			r := &rs[i]
			k := lineKey(j.ID, r.Index)
			if b.Get(k) != nil {
				continue
			}
			v, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
			next.Spent += r.Cost
			switch {
			case r.OK():
				next.Counts.Completed++
			case r.NotRun():
				next.Counts.Failed++
				next.NotRun++
			default:
				next.Counts.Failed++
			}
		}
		if err := deleteMarks(tx, j.ID, rs); err != nil {
			return err
		}
		return putJob(tx, &next)
	})
	if err == nil {
		*j = next
	}
	return err
}

// results calls fn for each committed result of job, in line order.
func (s *Store) results(job string, fn func(Result) error) error {
	prefix := append([]byte(job), '/')
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLines).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var r Result
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// Results returns tenant's job's committed results, in line order.
func (s *Store) Results(tenant, job string) ([]Result, error) {
	if _, err := s.Job(tenant, job); err != nil {
		return nil, err
	}
	var rs []Result
	err := s.results(job, func(r Result) error { rs = append(rs, r); return nil })
	return rs, err
}

// outputLine is a line of an output or error file (OpenAI's shape).
type outputLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *outputResponse `json:"response"`
	Error    *outputError    `json:"error"`
}

type outputResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type outputError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeFiles builds the job's output and error files from its committed results
// (rebuilt whole, so writing them again after a crash gives the same files) and
// records them; ids are the job's, so a rewrite replaces rather than duplicates.
func (s *Store) writeFiles(j *Job, now time.Time) error {
	outID, errID := "file-"+j.ID+"-output", "file-"+j.ID+"-errors"
	type sink struct {
		f     *os.File
		w     *bufio.Writer
		n     int64
		lines int
	}
	open := func(id string) (*sink, error) {
		f, err := os.Create(s.path(id) + ".tmp")
		if err != nil {
			return nil, err
		}
		return &sink{f: f, w: bufio.NewWriter(f)}, nil
	}
	out, err := open(outID)
	if err != nil {
		return err
	}
	defer out.f.Close()
	bad, err := open(errID)
	if err != nil {
		return err
	}
	defer bad.f.Close()
	err = s.results(j.ID, func(r Result) error {
		ol := outputLine{ID: fmt.Sprintf("batch_req_%s_%d", j.ID[len("batch_"):], r.Index), CustomID: r.CustomID}
		if r.StatusCode != 0 {
			ol.Response = &outputResponse{StatusCode: r.StatusCode, RequestID: r.RequestID, Body: r.Body}
		}
		if r.Code != "" {
			ol.Error = &outputError{Code: r.Code, Message: r.Message}
		}
		b, err := json.Marshal(&ol)
		if err != nil {
			return err
		}
		sk := bad
		if r.OK() {
			sk = out
		}
		b = append(b, '\n')
		sk.w.Write(b)
		sk.n += int64(len(b))
		sk.lines++
		return nil
	})
	if err != nil {
		return err
	}
	expiry := DefaultFileExpiry
	if j.OutputExpiresAfter > 0 {
		expiry = time.Duration(j.OutputExpiresAfter) * time.Second
	}
	var files []*File
	for _, x := range []struct {
		id string
		sk *sink
	}{{outID, out}, {errID, bad}} {
		if err := x.sk.w.Flush(); err != nil {
			return err
		}
		if err := x.sk.f.Sync(); err != nil {
			return err
		}
		if x.sk.lines == 0 {
			os.Remove(s.path(x.id) + ".tmp")
			continue
		}
		if err := os.Rename(s.path(x.id)+".tmp", s.path(x.id)); err != nil {
			return err
		}
		files = append(files, &File{ID: x.id, Tenant: j.Tenant, Purpose: "batch_output", Filename: j.ID + "_" + map[string]string{outID: "output", errID: "error"}[x.id] + ".jsonl",
			Bytes: x.sk.n, Lines: x.sk.lines, CreatedAt: now.Unix(), ExpiresAt: now.Add(expiry).Unix()})
		if x.id == outID {
			j.OutputFileID = outID
		} else {
			j.ErrorFileID = errID
		}
	}
	return s.putNewFiles(files, func(tx *bolt.Tx) error {
		if err := dropPlanTx(tx, j.ID); err != nil { // the job's lines are all committed
			return err
		}
		return putJob(tx, j)
	})
}
