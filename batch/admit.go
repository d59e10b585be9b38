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

// UnfinishedSet counts each tenant's jobs not yet ended across the processes sharing
// it (tenancy.RedisShared: a sorted set in Redis that each process renews for the jobs
// it runs, so a process that died stops counting).
type UnfinishedSet interface {
	// AdmitJob adds tenant's job id unless max (> 0) are there already.
	AdmitJob(tenant, id string, max int) (bool, error)
	// HoldJob adds a resumed job without a check; EndJob removes a job that ended.
	HoldJob(tenant, id string)
	EndJob(tenant, id string)
}

// CreateJob makes the job j describes (its tenant, key, input file, endpoint, window,
// metadata, cap and output expiry; the rest is the Manager's) and starts it
// (validating). A tenant with Options.MaxUnfinishedOf jobs not yet ended gets a
// TooManyError: nothing of the job is read before it is admitted.
func (m *Manager) CreateJob(j Job) (Job, error) {
	m.createMu.Lock()
	defer m.createMu.Unlock()
	id := newID("batch_")
	max := 0
	if m.opts.MaxUnfinishedOf != nil {
		max = m.opts.MaxUnfinishedOf(j.Tenant)
	}
	if err := m.admitJob(j.Tenant, id, max); err != nil {
		return Job{}, err
	}
	if _, err := m.store.File(j.Tenant, j.InputFileID); err != nil {
		m.unadmit(j.Tenant, id)
		return Job{}, err
	}
	now := m.opts.Now()
	j = Job{ID: id, Tenant: j.Tenant, KeyID: j.KeyID, InputFileID: j.InputFileID, Endpoint: j.Endpoint,
		CompletionWindow: j.CompletionWindow, Metadata: j.Metadata, Cap: j.Cap, OutputExpiresAfter: j.OutputExpiresAfter,
		Status: Validating, CreatedAt: now.Unix(), ExpiresAt: now.Add(24 * time.Hour).Unix()}
	if err := m.store.createJob(&j); err != nil {
		m.unadmit(j.Tenant, id)
		return Job{}, err
	}
	m.spawn(j, false)
	return j, nil
}

// admitJob admits tenant's job id under its bound max (0: none): against the shared
// set (Options.Unfinished), or, without one or while it fails, this process's jobs.
func (m *Manager) admitJob(tenant, id string, max int) error {
	if u := m.opts.Unfinished; u != nil {
		ok, err := u.AdmitJob(tenant, id, max)
		if err == nil {
			if !ok {
				return &TooManyError{Max: max}
			}
			return nil
		}
		m.opts.Logger.Warn("batch: the shared count of unfinished jobs is unavailable: counting this process's", "error", err)
	}
	if max > 0 && m.unfinished(tenant) >= max {
		return &TooManyError{Max: max}
	}
	if u := m.opts.Unfinished; u != nil {
		u.HoldJob(tenant, id) // counted in the shared set once it answers again
	}
	return nil
}

// unadmit takes back admitJob's admission of a job not made.
func (m *Manager) unadmit(tenant, id string) {
	if u := m.opts.Unfinished; u != nil {
		u.EndJob(tenant, id)
	}
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
