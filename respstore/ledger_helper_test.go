package respstore

import (
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/ledger"
)

// A testLedger is a usage ledger of counted entries (a group's payload is a JSON
// array of 1s): a ledger.Log over its own bbolt file, carrying a Bolt's side records
// as the server's tenancy.Store does.
type testLedger struct {
	db  *bolt.DB
	log *ledger.Log
}

type tGroup struct{ n int }

func (g *tGroup) Payload(b []byte) []byte {
	b = append(b, '[')
	for i := range g.n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '1')
	}
	return append(b, ']')
}
func (g *tGroup) Empty() bool { return g.n == 0 }

type tBatch struct{ n int }

func (b *tBatch) Add(g ledger.Group)        { b.n += g.(*tGroup).n }
func (b *tBatch) Entries() int              { return b.n }
func (b *tBatch) Empty() bool               { return b.n == 0 }
func (b *tBatch) Apply(tx *bolt.Tx) error   { return nil }
func (b *tBatch) Append(newer ledger.Batch) { b.n += newer.(*tBatch).n }
func (b *tBatch) Reset()                    { b.n = 0 }

type tOwner struct{}

func (tOwner) NewGroup() ledger.Group      { return &tGroup{} }
func (tOwner) NewBatch() ledger.Batch      { return &tBatch{} }
func (tOwner) Written(ledger.Group, error) {}
func (tOwner) Replay([]byte) bool          { return true }
func (tOwner) Replayed() ledger.Batch      { return &tBatch{} }

// openTestLedger opens the ledger in dir (ledger.db and its segments) with side as
// its SideOwner.
func openTestLedger(dir string, side ledger.SideOwner, sync ledger.SyncMode) (*testLedger, error) {
	return openTestLedgerWith(dir, ledger.Options{Sync: sync, Side: side})
}

func openTestLedgerWith(dir string, o ledger.Options) (*testLedger, error) {
	db, err := bolt.Open(filepath.Join(dir, "ledger.db"), 0o600, nil)
	if err != nil {
		return nil, err
	}
	l, err := ledger.Open(db, filepath.Join(dir, "ledger.db"), o, tOwner{})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &testLedger{db: db, log: l}, nil
}

func (t *testLedger) close() error {
	err := t.log.Close()
	if e := t.db.Close(); err == nil {
		err = e
	}
	return err
}

// settle writes one entry carrying side (nil: none), as a request's settlement does
// (tenancy.Ticket.SettleWith), and returns its commit's error.
func (t *testLedger) settle(side ledger.Side) error {
	p, err := t.log.AppendWith(func(g ledger.Group) { g.(*tGroup).n++ }, side)
	if err != nil {
		return err
	}
	return t.log.Commit(p)
}

// OpenBoltLedgerForTest opens a Bolt in ledger mode at path with a test ledger beside
// it (path's directory), as the server opens the two (responses.db before lmlite.db);
// closing it closes the ledger first, then the store.
func OpenBoltLedgerForTest(path string, o Options) (*Bolt, func() error, error) {
	s, err := OpenBoltLedger(path, o)
	if err != nil {
		return nil, nil, err
	}
	l, err := openTestLedger(filepath.Dir(path), s, ledger.SyncFsync)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, func() error {
		err := l.close()
		if e := s.Close(); err == nil {
			err = e
		}
		return err
	}, nil
}
