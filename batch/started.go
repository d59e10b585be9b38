package batch

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// CodeCrashed is the error of a line that was running when the process died, in
// two runs one after the other: it is not run a third time (a request that kills
// the server would otherwise kill it again at every restart, as the job resumes).
const CodeCrashed = "line_crashed_server"

// crashedMessage is the error file's message for CodeCrashed.
const crashedMessage = "this request was running when the server process died, in two runs: it was not run again. " +
	"Check it (a schema, a prompt) and submit it in a new batch."

// bucketStarted holds a mark per line started and not committed (key: lineKey):
// the last run (Manager) that started it and how many runs started it without
// committing it. A run that ends cleanly takes its marks back (unmarkStarted), so at
// a resume every mark's count is the runs that died with the line started.
var bucketStarted = []byte("started")

// newRunID is a Manager's run: random, so that two processes' runs differ.
func newRunID() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1 // never 0: a mark taken back has run 0
}

func encodeMark(run uint64, runs uint32) []byte {
	v := make([]byte, 12)
	binary.LittleEndian.PutUint64(v, run)
	binary.LittleEndian.PutUint32(v[8:], runs)
	return v
}

func decodeMark(v []byte) (run uint64, runs uint32) {
	if len(v) != 12 {
		return 0, 0
	}
	return binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint32(v[8:])
}

// markStarted records, before they run, that run starts job's lines idx: a line's
// count of runs grows once per run.
func (s *Store) markStarted(job string, idx []int, run uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketStarted)
		for _, i := range idx {
			k := lineKey(job, i)
			last, runs := decodeMark(b.Get(k))
			if last == run {
				continue
			}
			if err := b.Put(k, encodeMark(run, runs+1)); err != nil {
				return err
			}
		}
		return nil
	})
}

// unmarkStarted takes back run's marks of job's lines idx: run ended (or did not
// submit them) without dying while they ran.
func (s *Store) unmarkStarted(job string, idx []int, run uint64) error {
	if len(idx) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketStarted)
		for _, i := range idx {
			k := lineKey(job, i)
			v := b.Get(k)
			last, runs := decodeMark(v)
			if v == nil || last != run {
				continue
			}
			var err error
			if runs <= 1 {
				err = b.Delete(k)
			} else {
				err = b.Put(k, encodeMark(0, runs-1))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// crashes returns job's lines with marks, and for each how many runs died while it
// was started (call it before this run starts any line of the job), in line order.
func (s *Store) crashes(job string) (idx []int, runs []int, err error) {
	prefix := append([]byte(job), '/')
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketStarted).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(k) != len(prefix)+4 {
				continue
			}
			_, n := decodeMark(v)
			idx = append(idx, int(binary.BigEndian.Uint32(k[len(prefix):])))
			runs = append(runs, int(n))
		}
		return nil
	})
	return idx, runs, err
}

// deleteMarks removes the marks of committed lines (in commit's transaction).
func deleteMarks(tx *bolt.Tx, job string, rs []Result) error {
	b := tx.Bucket(bucketStarted)
	for i := range rs {
		if err := b.Delete(lineKey(job, rs[i].Index)); err != nil {
			return err
		}
	}
	return nil
}

// solo is a line on probation: it was running when a run died, so it runs alone
// (no other line of any job of the Manager beside it), and a second death is its own.
type solo struct {
	job   string
	index int
}

// admit reserves a start of job's line index for a driver: false while a line on
// probation runs, and for a line on probation (suspect) while any line runs. A
// suspect refused for the lines running asks for the Manager to drain (want): no
// other line starts until it has run, so that a busy job cannot starve it.
func (m *Manager) admit(job string, index int, suspect bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	me := solo{job, index}
	if m.solo != nil || !suspect && m.want != nil {
		return false
	}
	if suspect && m.running > 0 {
		if m.want == nil {
			m.want = &me
		}
		return false
	}
	m.running++
	if suspect {
		m.solo = &me
		if m.want != nil && *m.want == me {
			m.want = nil
		}
	}
	return true
}

// dropWant forgets job's request to drain (its driver ended).
func (m *Manager) dropWant(job string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.want != nil && m.want.job == job {
		m.want = nil
	}
}

// finished releases what admit reserved for job's line index.
func (m *Manager) finished(job string, index int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.running--
	if m.solo != nil && *m.solo == (solo{job, index}) {
		m.solo = nil
	}
}

// quarantine splits the marked lines of a resumed job of total lines (idx, runs
// from crashes) that skip does not exclude (committed, in flight): those started in
// limit runs that died (limit > 0) are to be failed with CodeCrashed, the others
// are suspects (probation). Both in line order; the driver looks them up in the plan.
func quarantine(idx, runs []int, total, limit int, skip func(int) bool) (failed, suspects []int) {
	for k, i := range idx {
		if i < 0 || i >= total || runs[k] == 0 || skip(i) {
			continue
		}
		if limit > 0 && runs[k] >= limit {
			failed = append(failed, i)
			continue
		}
		suspects = append(suspects, i)
	}
	sort.Ints(failed)
	sort.Ints(suspects)
	return failed, suspects
}
