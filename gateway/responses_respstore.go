package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/respstore"
)

// durableResponses is the responseStore of a respstore.Store (Options.Responses):
// bbolt in the data directory, or Redis, so that a response outlives the process
// and, with Redis, any process continues it. Items are kept as the JSON the API
// renders them in (openai.AppendItem), and read back with the input items' parser.
type durableResponses struct {
	st  respstore.Store
	now func() time.Time
}

func (d *durableResponses) Put(ctx context.Context, r *storedResponse, lim respstore.Limits) error {
	return storeErr(d.st.PutWithin(ctx, d.record(r), lim))
}

// Full reads the tenant's usage (one read: a bbolt read transaction, a Redis HMGET).
// A tenant it finds full may have responses that expired since the last sweep (the
// server sweeps hourly; they still count in Usage): it sweeps the tenant's, which
// writes only when one has expired, and reads the usage again.
func (d *durableResponses) Full(ctx context.Context, tenant string, lim respstore.Limits) (*respstore.LimitError, error) {
	u, err := d.st.Usage(ctx, tenant)
	if err != nil {
		return nil, err
	}
	le := lim.Full(u)
	if le == nil {
		return nil, nil
	}
	if n, err := d.st.SweepTenant(ctx, tenant, d.now()); err != nil || n == 0 {
		return le, err
	}
	if u, err = d.st.Usage(ctx, tenant); err != nil {
		return le, err
	}
	return lim.Full(u), nil
}

func (d *durableResponses) Get(ctx context.Context, tenant, id string) (*storedResponse, error) {
	rec, err := d.st.Get(ctx, tenant, id, d.now())
	if err != nil {
		return nil, storeErr(err)
	}
	return &storedResponse{ID: rec.ID, Tenant: rec.Tenant, Created: rec.Created.Unix(), Model: rec.Model,
		Previous: rec.Previous, Body: rec.Response}, nil
}

func (d *durableResponses) Delete(ctx context.Context, tenant, id string) error {
	return storeErr(d.st.Delete(ctx, tenant, id, d.now()))
}

func (d *durableResponses) InputItems(ctx context.Context, tenant, id string, p itemsPage) ([]respItem, bool, error) {
	pg := respstore.Page{After: p.after, Limit: p.limit, Order: respstore.Desc}
	if p.asc {
		pg.Order = respstore.Asc
	}
	items, more, err := d.st.InputItems(ctx, tenant, id, pg, d.now())
	if errors.Is(err, respstore.ErrInvalid) {
		return nil, false, errItemsPage
	}
	if err != nil {
		return nil, false, storeErr(err)
	}
	out, err := fromItems(items)
	return out, more, err
}

func (d *durableResponses) Conversation(ctx context.Context, tenant, id string) ([]respItem, error) {
	items, err := d.st.Conversation(ctx, tenant, id, d.now())
	if err != nil {
		return nil, storeErr(err)
	}
	return fromItems(items)
}

// storeErr maps respstore's errors to the responseStore's (a 404, a conversation
// too long), keeping the cause.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, respstore.ErrNotFound):
		return errResponseNotFound
	case errors.Is(err, respstore.ErrConversationTooLong):
		return fmt.Errorf("%w: %w", errConversationTooLong, err)
	}
	return err
}

// toItems renders items as respstore keeps them: each one's id and its JSON (the
// JSON of all of them in one buffer).
func toItems(items []respItem) []respstore.Item {
	out := make([]respstore.Item, len(items))
	var buf []byte
	for i := range items {
		at := len(buf)
		buf = openai.AppendItem(buf, &items[i], "completed")
		out[i] = respstore.Item{ID: items[i].ID, JSON: buf[at:len(buf):len(buf)]}
	}
	// buf may have moved as it grew: take each item's JSON from its last array.
	for i, at := len(out)-1, len(buf); i >= 0; i-- {
		n := len(out[i].JSON)
		out[i].JSON = buf[at-n : at : at]
		at -= n
	}
	return out
}

// fromItems reads items back (toItems' JSON, through the input items' parser).
func fromItems(items []respstore.Item) ([]respItem, error) {
	out := make([]respItem, len(items))
	for i := range items {
		it, aerr := parseRespItem(items[i].JSON, "item")
		if aerr != nil {
			return nil, fmt.Errorf("gateway: a stored item %s: %s", items[i].ID, aerr.message)
		}
		it.ID = items[i].ID
		out[i] = it
	}
	return out, nil
}
