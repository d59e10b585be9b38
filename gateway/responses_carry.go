package gateway

import (
	"context"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
)

// One sync for a stored response: where the settlement and the stored-response Put
// meet. With a store that carries (respstore's Bolt in ledger mode), a Responses
// request that stores its response settles in the Put: job.settle only keeps its
// entry (carry.on), the output stores the response as it renders the answer's end
// (AppendWhole, AppendEnd: save), the store checks the limits and calls back
// settleCarried with the record as a ledger.Side, and the settlement's ledger write
// carries it: one write, one sync for both, and a settlement whose write fails
// leaves no stored response (the answer then says store: false). Right after that
// rendering (answerWhole, the streams' end), and in finished for a failure, the job
// settles a settlement still kept (a response not stored: a limit, a client gone).

// carrier is the optional ability of a responseStore whose Put a ledger write can
// carry (durableResponses over a Bolt in ledger mode).
type carrier interface {
	// Carries reports whether PutCarried calls its carry.
	Carries() bool
	// PutCarried is Put whose record carry adds to the ledger write it commits
	// (respstore.Bolt.PutCarried).
	PutCarried(ctx context.Context, r *storedResponse, lim respstore.Limits, carry func(ledger.Side)) error
}

// carriedSettle is a job's settlement kept for its stored response's Put.
type carriedSettle struct {
	on   bool // settle keeps the entry (the output stores through a carrier)
	kept bool // an entry is kept
	e    tenancy.Entry
	u    engine.Usage
	hasU bool
}

// keep keeps a settlement (e, u) when the job's response is to carry it; false: settle now.
func (c *carriedSettle) keep(e tenancy.Entry, u *engine.Usage) bool {
	if c == nil || !c.on || c.kept {
		return false
	}
	c.kept, c.e, c.hasU = true, e, u != nil
	if u != nil {
		c.u = *u
	}
	return true
}

// settleCarried settles the kept entry, its ledger write carrying side (nil: none).
func (j *job) settleCarried(side ledger.Side) {
	c := j.carry
	if c == nil || !c.kept {
		return // nothing kept: the store writes side alone
	}
	c.on, c.kept = false, false
	var u *engine.Usage
	if c.hasU {
		u = &c.u
	}
	j.settleWith(c.e, u, side)
}

func (d *durableResponses) Carries() bool {
	b, ok := d.st.(*respstore.Bolt)
	return ok && b.Carries()
}

func (d *durableResponses) PutCarried(ctx context.Context, r *storedResponse, lim respstore.Limits, carry func(ledger.Side)) error {
	b, ok := d.st.(*respstore.Bolt)
	if !ok {
		return d.Put(ctx, r, lim)
	}
	return storeErr(b.PutCarried(ctx, d.record(r), lim, carry))
}

// record is r as respstore keeps it.
func (d *durableResponses) record(r *storedResponse) respstore.Record {
	rec := respstore.Record{Tenant: r.Tenant, ID: r.ID, Created: time.Unix(r.Created, 0), Model: r.Model,
		Previous: r.Previous, Response: r.Body, Input: toItems(r.Input), Output: toItems(r.Output)}
	if now := d.now(); now.After(rec.Created) {
		rec.Created = now // the retention counts from when it is stored
	}
	return rec
}
