package batch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/money"
)

// A job's plan is its validated lines as the store keeps them, so that no driver
// holds a job's lines in memory: each line's place in the input file, its custom_id
// and its worst case, in bucketPlan under the job's id, read a few at a time as they
// start (Line.Read reads a line's body from the file when it starts). With J the job
// id, i a line's index and g its group (RunOrder):
//
//	J/i/<i>        the line (planned)
//	J/o/<g><i>     "": the run order (groups in the order they first appear, lines in file order)
//	J/done         the number of lines: the plan is whole (written last)
//
// Integers are 4 bytes, big-endian. The plan is written by the job's validation
// (ValidateTo), in transactions of planChunk lines, and dropped when the job's files
// are written.

// planChunk is how many lines one transaction writes.
const planChunk = 1000

// planned is a line of a plan.
type planned struct {
	CustomID string      `json:"c"`
	Offset   int64       `json:"o"`
	Len      int         `json:"n"`
	Worst    money.Money `json:"w"`
	Group    int         `json:"g"`
}

func planKey(job string, kind byte, ints ...int) []byte {
	k := make([]byte, 0, len(job)+3+4*len(ints))
	k = append(k, job...)
	k = append(k, '/', kind)
	if len(ints) > 0 {
		k = append(k, '/')
	}
	for _, n := range ints {
		k = binary.BigEndian.AppendUint32(k, uint32(n))
	}
	return k
}

func planPrefix(job string) []byte { return append([]byte(job), '/') }

func (p *planned) line(i int) Line {
	return Line{Index: i, CustomID: p.CustomID, Worst: p.Worst, Offset: p.Offset, Len: p.Len, Group: p.Group}
}

// planLines validates the job's input file r into its plan and returns the number
// of lines, or the errors (and no plan).
func (s *Store) planLines(j *Job, r io.Reader, c Checker) (int, []LineError, error) {
	if err := s.dropPlan(j.ID); err != nil { // a plan a crash left half written
		return 0, nil, err
	}
	var chunk []Line
	flush := func() error {
		err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketPlan)
			for i := range chunk {
				l := &chunk[i]
				v, err := json.Marshal(&planned{CustomID: l.CustomID, Offset: l.Offset, Len: l.Len, Worst: l.Worst, Group: l.Group})
				if err != nil {
					return err
				}
				if err := b.Put(planKey(j.ID, 'i', l.Index), v); err != nil {
					return err
				}
				if err := b.Put(planKey(j.ID, 'o', l.Group, l.Index), nil); err != nil {
					return err
				}
			}
			return nil
		})
		chunk = chunk[:0]
		return err
	}
	n, errs := ValidateTo(r, j.Tenant, j.Endpoint, c, func(l *Line) error {
		chunk = append(chunk, *l)
		chunk[len(chunk)-1].Body = nil
		if len(chunk) == planChunk {
			return flush()
		}
		return nil
	})
	var err error
	if errs == nil {
		if err = flush(); err == nil {
			err = s.db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketPlan).Put(planKey(j.ID, 'd'), binary.BigEndian.AppendUint32(nil, uint32(n)))
			})
		}
	}
	if errs != nil || err != nil {
		if derr := s.dropPlan(j.ID); err == nil {
			err = derr
		}
		return 0, errs, err
	}
	return n, nil, nil
}

// planned is the number of lines of job's plan, and whether the plan is whole.
func (s *Store) planned(job string) (int, bool, error) {
	n, ok := 0, false
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketPlan).Get(planKey(job, 'd')); len(v) == 4 {
			n, ok = int(binary.BigEndian.Uint32(v)), true
		}
		return nil
	})
	return n, ok, err
}

// plannedLine is line i of job's plan.
func (s *Store) plannedLine(job string, i int) (Line, error) {
	var l Line
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPlan).Get(planKey(job, 'i', i))
		if v == nil {
			return fmt.Errorf("batch: job %s has no line %d", job, i)
		}
		var p planned
		if err := json.Unmarshal(v, &p); err != nil {
			return err
		}
		l = p.line(i)
		return nil
	})
	return l, err
}

// nextPlanned is up to n lines of job's plan in run order after the cursor after (nil:
// from the first) that have no committed result and that skip does not exclude; the
// cursor at the last line it looked at; and whether it reached the plan's end.
func (s *Store) nextPlanned(job string, after []byte, n int, skip func(i int) bool) (out []Line, cursor []byte, end bool, err error) {
	cursor = after
	prefix := planKey(job, 'o', 0)[:len(job)+3]
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPlan)
		results := tx.Bucket(bucketLines)
		c := b.Cursor()
		var k []byte
		if after == nil {
			k, _ = c.Seek(prefix)
		} else if k, _ = c.Seek(after); bytes.Equal(k, after) {
			k, _ = c.Next()
		}
		for ; len(out) < n; k, _ = c.Next() {
			if k == nil || !bytes.HasPrefix(k, prefix) {
				end = true
				return nil
			}
			cursor = bytes.Clone(k)
			i := int(binary.BigEndian.Uint32(k[len(k)-4:]))
			if skip(i) || results.Get(lineKey(job, i)) != nil {
				continue
			}
			var p planned
			if err := json.Unmarshal(b.Get(planKey(job, 'i', i)), &p); err != nil {
				return err
			}
			out = append(out, p.line(i))
		}
		return nil
	})
	return out, cursor, end, err
}

// dropPlan deletes job's plan.
func (s *Store) dropPlan(job string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return dropPlanTx(tx, job) })
}

func dropPlanTx(tx *bolt.Tx, job string) error {
	prefix := planPrefix(job)
	c := tx.Bucket(bucketPlan).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// committed reports whether line i of job has a committed result.
func (s *Store) committed(job string, i int) (bool, error) {
	ok := false
	err := s.db.View(func(tx *bolt.Tx) error {
		ok = tx.Bucket(bucketLines).Get(lineKey(job, i)) != nil
		return nil
	})
	return ok, err
}
