package batch

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TooManyError is Create's refusal of a job past its tenant's bound on jobs not yet
// ended (Options.MaxUnfinishedOf).
type TooManyError struct{ Max int }

func (e *TooManyError) Error() string {
	return fmt.Sprintf("batch: the tenant has %d jobs not yet ended, its limit", e.Max)
}

// CreateJob makes the job j describes (its tenant, key, input file, endpoint, window,
// metadata, cap and output expiry; the rest is the Manager's) and starts it
// (validating). A tenant with Options.MaxUnfinishedOf jobs not yet ended gets a
// TooManyError: nothing of the job is read before it is admitted.
func (m *Manager) CreateJob(j Job) (Job, error) {
	m.createMu.Lock()
	defer m.createMu.Unlock()
	if m.opts.MaxUnfinishedOf != nil {
		if max := m.opts.MaxUnfinishedOf(j.Tenant); max > 0 && m.unfinished(j.Tenant) >= max {
			return Job{}, &TooManyError{Max: max}
		}
	}
	if _, err := m.store.File(j.Tenant, j.InputFileID); err != nil {
		return Job{}, err
	}
	now := m.opts.Now()
	j = Job{ID: newID("batch_"), Tenant: j.Tenant, KeyID: j.KeyID, InputFileID: j.InputFileID, Endpoint: j.Endpoint,
		CompletionWindow: j.CompletionWindow, Metadata: j.Metadata, Cap: j.Cap, OutputExpiresAfter: j.OutputExpiresAfter,
		Status: Validating, CreatedAt: now.Unix(), ExpiresAt: now.Add(24 * time.Hour).Unix()}
	if err := m.store.createJob(&j); err != nil {
		return Job{}, err
	}
	m.spawn(j, false)
	return j, nil
}

// unfinished is how many of tenant's jobs have a driver here (are not yet ended).
func (m *Manager) unfinished(tenant string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, d := range m.active {
		if d.tenant == tenant {
			n++
		}
	}
	return n
}

// startSweeper deletes expired files every Options.SweepEvery until Close.
func (m *Manager) startSweeper() {
	every := m.opts.SweepEvery
	if every <= 0 {
		every = time.Minute
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m.Sweep()
			select {
			case <-m.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Sweep deletes the files expired at Options.Now (Store.Sweep); the sweeper calls it.
func (m *Manager) Sweep() {
	if n, err := m.store.Sweep(m.opts.Now()); err != nil {
		m.opts.Logger.Warn("batch: deleting expired files", "error", err)
	} else if n > 0 {
		m.opts.Logger.Info("batch: deleted expired files", "files", n)
	}
}

// SetFileExpiry sets when tenant's file id expires (Unix seconds; 0: never).
func (s *Store) SetFileExpiry(tenant, id string, at int64) (File, error) {
	var f File
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		if f, err = s.getFile(tx, tenant, id); err != nil {
			return err
		}
		f.ExpiresAt = at
		return putFile(tx, &f)
	})
	return f, err
}

// Dir is the store's directory (its files are under Dir()/files).
func (s *Store) Dir() string { return s.dir }
