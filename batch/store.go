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
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/money"
)

// ErrNotFound is returned for a file or job that does not exist or belongs to
// another tenant (the two are the same to a caller).
var ErrNotFound = errors.New("batch: not found")

// ErrTooLarge is returned by PutFile for a file over MaxFileBytes or MaxFileLines.
var ErrTooLarge = errors.New("batch: file too large")

// ErrRead wraps an error of the reader PutFile copies from (a broken upload).
var ErrRead = errors.New("batch: reading the file")

var (
	bucketFiles = []byte("files")
	bucketJobs  = []byte("jobs")
	bucketLines = []byte("lines")
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
}

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
	Status           Status            `json:"status"`
	Target           Status            `json:"target,omitempty"` // set while the files of a terminal status are written
	Errors           []LineError       `json:"errors,omitempty"`
	Counts           Counts            `json:"request_counts"`
	Spent            money.Money       `json:"spent"`
	PausedReason     string            `json:"paused_reason,omitempty"`
	CancelRequested  bool              `json:"cancel_requested,omitempty"`
	OutputFileID     string            `json:"output_file_id,omitempty"`
	ErrorFileID      string            `json:"error_file_id,omitempty"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     int64             `json:"in_progress_at,omitempty"`
	ExpiresAt        int64             `json:"expires_at,omitempty"`
	FinalizingAt     int64             `json:"finalizing_at,omitempty"`
	CompletedAt      int64             `json:"completed_at,omitempty"`
	FailedAt         int64             `json:"failed_at,omitempty"`
	ExpiredAt        int64             `json:"expired_at,omitempty"`
	CancellingAt     int64             `json:"cancelling_at,omitempty"`
	CancelledAt      int64             `json:"cancelled_at,omitempty"`
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

// OK reports whether the line goes to the output file.
func (r *Result) OK() bool { return r.StatusCode >= 200 && r.StatusCode < 300 }

// Store holds files (as files under dir/files), and jobs and line results in an
// embedded bbolt database (dir/batch.db).
type Store struct {
	dir string
	db  *bolt.DB
}

// OpenStore opens (creating) the store in dir.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o700); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	db, err := bolt.Open(filepath.Join(dir, "batch.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketFiles, bucketJobs, bucketLines, bucketStarted} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("batch: %w", err)
	}
	return &Store{dir: dir, db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// newID is prefix + a time-ordered unique suffix, so ids sort by creation.
func newID(prefix string, now time.Time) string {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixNano()))
	rand.Read(b[8:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, "files", id) }

// PutFile stores r as a new file of tenant, refusing one over MaxFileBytes or
// MaxFileLines (ErrTooLarge). It streams r to disk and stops reading as soon as
// either limit is passed; only a copy buffer is in memory.
func (s *Store) PutFile(tenant, purpose, filename string, r io.Reader, now time.Time) (File, error) {
	f := File{ID: newID("file-", now), Tenant: tenant, Purpose: purpose, Filename: filename, CreatedAt: now.Unix()}
	tmp := s.path(f.ID) + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return File{}, fmt.Errorf("batch: %w", err)
	}
	defer os.Remove(tmp)
	lr := &lineCounter{r: io.LimitReader(r, MaxFileBytes+1)}
	n, err := io.Copy(out, lr)
	if errors.Is(err, errTooManyLines) {
		out.Close()
		return File{}, ErrTooLarge
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
	return f, s.putFileMeta(&f)
}

var errTooManyLines = errors.New("batch: too many lines")

// lineCounter counts the lines passing through and fails once they are more than
// MaxFileLines (so that an upload over the limit is not read to its end).
type lineCounter struct {
	r     io.Reader
	lines int
	last  byte
	rerr  error // the reader's own error (not io.EOF)
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
	return n, err
}

func (s *Store) putFileMeta(f *File) error {
	v, _ := json.Marshal(f)
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketFiles).Put([]byte(f.ID), v) })
}

// File returns tenant's file id.
func (s *Store) File(tenant, id string) (File, error) {
	var f File
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketFiles).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		return json.Unmarshal(v, &f)
	})
	if err == nil && f.Tenant != tenant {
		err = ErrNotFound
	}
	return f, err
}

// Files lists tenant's files, oldest first.
func (s *Store) Files(tenant string) ([]File, error) {
	var fs []File
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketFiles).ForEach(func(_, v []byte) error {
			var f File
			if err := json.Unmarshal(v, &f); err != nil {
				return err
			}
			if f.Tenant == tenant {
				fs = append(fs, f)
			}
			return nil
		})
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
	if _, err := s.File(tenant, id); err != nil {
		return err
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketFiles).Delete([]byte(id)) }); err != nil {
		return err
	}
	return os.Remove(s.path(id))
}

// Job returns tenant's job id.
func (s *Store) Job(tenant, id string) (Job, error) {
	var j Job
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketJobs).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		return json.Unmarshal(v, &j)
	})
	if err == nil && tenant != "" && j.Tenant != tenant {
		err = ErrNotFound
	}
	return j, err
}

// Jobs lists tenant's jobs newest first, after the job id after ("": from the
// newest), at most limit, and whether more follow.
func (s *Store) Jobs(tenant, after string, limit int) ([]Job, bool, error) {
	var js []Job
	more := false
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketJobs).Cursor()
		var k, v []byte
		if after == "" {
			k, v = c.Last()
		} else {
			c.Seek([]byte(after))
			k, v = c.Prev()
		}
		for ; k != nil; k, v = c.Prev() {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			if j.Tenant != tenant {
				continue
			}
			if len(js) == limit {
				more = true
				return nil
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
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).ForEach(func(_, v []byte) error {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			if !j.Status.Terminal() || j.Target != "" {
				js = append(js, j)
			}
			return nil
		})
	})
	return js, err
}

func putJob(tx *bolt.Tx, j *Job) error {
	v, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketJobs).Put([]byte(j.ID), v)
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
			if r.OK() {
				next.Counts.Completed++
			} else {
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
	var files []File
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
		files = append(files, File{ID: x.id, Tenant: j.Tenant, Purpose: "batch_output", Filename: j.ID + "_" + map[string]string{outID: "output", errID: "error"}[x.id] + ".jsonl",
			Bytes: x.sk.n, Lines: x.sk.lines, CreatedAt: now.Unix()})
		if x.id == outID {
			j.OutputFileID = outID
		} else {
			j.ErrorFileID = errID
		}
	}
	sort.Slice(files, func(a, b int) bool { return files[a].ID < files[b].ID })
	return s.db.Update(func(tx *bolt.Tx) error {
		for i := range files {
			v, _ := json.Marshal(&files[i])
			if err := tx.Bucket(bucketFiles).Put([]byte(files[i].ID), v); err != nil {
				return err
			}
		}
		return putJob(tx, j)
	})
}
