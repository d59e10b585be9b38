package gateway

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/respstore"
)

// A responseStore keeps the stored responses (store: true) of every tenant: each
// belongs to one tenant, and every method given another tenant's id answers
// errResponseNotFound, as for an id that does not exist. It is the consumer's
// interface of package respstore's Store (responses_respstore.go adapts it).
type responseStore interface {
	// Put stores r within lim (the tenant's plan's limits): a *respstore.LimitError
	// when it would pass one, and nothing is stored.
	Put(ctx context.Context, r *storedResponse, lim respstore.Limits) error
	// Full reports the limit of lim that the tenant's stored responses are at (one
	// more would pass it; responses expired by now are not counted), or nil when
	// there is room: the admission of a request that will store its response.
	Full(ctx context.Context, tenant string, lim respstore.Limits) (*respstore.LimitError, error)
	Get(ctx context.Context, tenant, id string) (*storedResponse, error)
	Delete(ctx context.Context, tenant, id string) error
	// InputItems is one page of the response's own input items and whether more
	// follow (errItemsPage for a page outside its bounds).
	InputItems(ctx context.Context, tenant, id string, p itemsPage) ([]respItem, bool, error)
	// Conversation is what continuing the response starts from: for each response of
	// its previous_response_id chain, oldest first, its input then its output items.
	Conversation(ctx context.Context, tenant, id string) ([]respItem, error)
}

// errResponseNotFound is a responseStore's answer for an id the tenant does not have.
var errResponseNotFound = errors.New("gateway: response not found")

// errItemsPage is a responseStore's answer for a page of input items outside its
// bounds (an after that is not one of the items).
var errItemsPage = errors.New("gateway: no such input item")

// itemsPage selects a page of input items as OpenAI's list endpoints do: the items
// after the one with id after ("": from the start), newest first unless asc, at most
// limit (1 to 100).
type itemsPage struct {
	after string
	limit int
	asc   bool
}

// storedResponse is one stored response: the Response object as it was answered, and
// its items.
type storedResponse struct {
	ID       string
	Tenant   string
	Created  int64 // Unix seconds
	Model    string
	Previous string     // the previous_response_id it continues; "" starts a conversation
	Body     []byte     // the Response object's JSON, as answered
	Input    []respItem // this request's own input items (not the instructions, which OpenAI does not carry over)
	Output   []respItem // the output's items

	size int64 // memResponses: what it counts against responses_max_bytes (respstore.Record.Size)
}

// sizeOf is what r counts against its tenant's responses_max_bytes, as respstore
// counts it (Record.Size): its body and its items' ids and JSON as stored.
func sizeOf(r *storedResponse) int64 {
	n := int64(len(r.Body))
	var buf []byte
	for _, l := range [2][]respItem{r.Input, r.Output} {
		for i := range l {
			buf = openai.AppendItem(buf[:0], &l[i], "completed")
			n += int64(len(l[i].ID) + len(buf))
		}
	}
	return n
}

// maxChain bounds the previous_response_id chain memResponses walks.
const maxChain = 1000

// memResponses is the stored responses in this process's memory, within the plans'
// limits as a durable store keeps them, and at most max per tenant whatever the plan
// (the oldest dropped first): the store when no durable one is configured. A restart
// forgets them; they do not expire.
type memResponses struct {
	max   int
	mu    sync.Mutex                            // guards the fields below
	by    map[string]map[string]*storedResponse // tenant → id → response
	ids   map[string][]string                   // tenant → ids, oldest first
	bytes map[string]int64                      // tenant → its responses' sizes, together
}

func newMemResponses(max int) *memResponses {
	return &memResponses{max: max, by: map[string]map[string]*storedResponse{}, ids: map[string][]string{}, bytes: map[string]int64{}}
}

// usage is the tenant's stored responses' count and bytes (m.mu held).
func (m *memResponses) usage(tenant string) respstore.Usage {
	return respstore.Usage{Count: int64(len(m.by[tenant])), Bytes: m.bytes[tenant]}
}

func (m *memResponses) Full(_ context.Context, tenant string, lim respstore.Limits) (*respstore.LimitError, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return lim.Full(m.usage(tenant)), nil
}

func (m *memResponses) Get(_ context.Context, tenant, id string) (*storedResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.by[tenant][id]
	if !ok {
		return nil, errResponseNotFound
	}
	return r, nil
}

func (m *memResponses) Put(_ context.Context, r *storedResponse, lim respstore.Limits) error {
	r.size = sizeOf(r)
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.by[r.Tenant]
	u := m.usage(r.Tenant)
	next := respstore.Usage{Count: u.Count + 1, Bytes: u.Bytes + r.size}
	old, replaced := t[r.ID]
	if replaced {
		next = respstore.Usage{Count: u.Count, Bytes: u.Bytes - old.size + r.size}
	}
	// As respstore's: a change that does not grow what passes a limit is allowed.
	if lim.MaxCount > 0 && next.Count > lim.MaxCount && next.Count > u.Count {
		return &respstore.LimitError{Limit: "responses_max_count", Max: lim.MaxCount}
	}
	if lim.MaxBytes > 0 && next.Bytes > lim.MaxBytes && next.Bytes > u.Bytes {
		return &respstore.LimitError{Limit: "responses_max_bytes", Max: lim.MaxBytes}
	}
	if t == nil {
		t = map[string]*storedResponse{}
		m.by[r.Tenant] = t
	}
	if !replaced {
		m.ids[r.Tenant] = append(m.ids[r.Tenant], r.ID)
	}
	t[r.ID] = r
	m.bytes[r.Tenant] = next.Bytes
	for ids := m.ids[r.Tenant]; len(ids) > m.max; ids = m.ids[r.Tenant] {
		m.bytes[r.Tenant] -= t[ids[0]].size
		delete(t, ids[0])
		m.ids[r.Tenant] = ids[1:]
	}
	return nil
}

func (m *memResponses) Delete(_ context.Context, tenant, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.by[tenant][id]
	if !ok {
		return errResponseNotFound
	}
	m.bytes[tenant] -= r.size
	delete(m.by[tenant], id)
	ids := m.ids[tenant]
	for i, x := range ids {
		if x == id {
			m.ids[tenant] = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	return nil
}

func (m *memResponses) InputItems(ctx context.Context, tenant, id string, p itemsPage) ([]respItem, bool, error) {
	r, err := m.Get(ctx, tenant, id)
	if err != nil {
		return nil, false, err
	}
	return pageOf(r.Input, p)
}

func (m *memResponses) Conversation(ctx context.Context, tenant, id string) ([]respItem, error) {
	var chain []*storedResponse // newest first
	for at := id; at != ""; {
		r, err := m.Get(ctx, tenant, at)
		if err != nil {
			return nil, err
		}
		if len(chain) == maxChain {
			return nil, errConversationTooLong
		}
		chain = append(chain, r)
		at = r.Previous
	}
	var out []respItem
	for i := len(chain) - 1; i >= 0; i-- {
		out = append(append(out, chain[i].Input...), chain[i].Output...)
	}
	return out, nil
}

// errConversationTooLong is a responseStore's answer for a chain past its bounds.
var errConversationTooLong = errors.New("gateway: the conversation is too long")

// pageOf is the page p of items, and whether more follow it.
func pageOf(items []respItem, p itemsPage) ([]respItem, bool, error) {
	order := make([]respItem, len(items))
	for i := range items {
		if p.asc {
			order[i] = items[i]
		} else {
			order[i] = items[len(items)-1-i]
		}
	}
	if p.after != "" {
		k := -1
		for i := range order {
			if order[i].ID == p.after {
				k = i
				break
			}
		}
		if k < 0 {
			return nil, false, errItemsPage
		}
		order = order[k+1:]
	}
	if len(order) > p.limit {
		return order[:p.limit], true, nil
	}
	return order, false, nil
}

// handleResponsesAPI serves the stored responses of the key's tenant:
// GET and DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items. It
// reports whether path was one of them.
func (s *Server) handleResponsesAPI(ctx *fasthttp.RequestCtx, reqID string, path []byte) bool {
	rest, ok := strings.CutPrefix(string(path), "/v1/responses/")
	if !ok || rest == "" {
		return false
	}
	id, sub, _ := strings.Cut(rest, "/")
	switch {
	case sub == "" && (ctx.IsGet() || ctx.IsDelete()):
	case sub == "input_items" && ctx.IsGet():
	case sub == "" || sub == "input_items":
		s.writeError(ctx, reqID, &apiError{status: 405, typ: "invalid_request_error", message: "method " + string(ctx.Method()) + " is not allowed on " + string(path), reason: "method"})
		return true
	default:
		return false
	}
	_, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return true
	}
	store := s.responses.store
	bg := context.Background()
	if ctx.IsDelete() {
		if err := store.Delete(bg, pol.Tenant, id); err != nil {
			s.writeError(ctx, reqID, storeError(err, "response_id", id))
			return true
		}
		b := append([]byte(`{"id":`), jsonenc.AppendString(nil, id)...)
		ctx.SetContentType("application/json")
		ctx.SetBody(append(b, `,"object":"response.deleted","deleted":true}`...))
		return true
	}
	ctx.SetContentType("application/json")
	if sub == "" {
		r, err := store.Get(bg, pol.Tenant, id)
		if err != nil {
			s.writeError(ctx, reqID, storeError(err, "response_id", id))
			return true
		}
		ctx.SetBody(r.Body)
		return true
	}
	p, aerr := parseItemsPage(ctx.QueryArgs())
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return true
	}
	items, more, err := store.InputItems(bg, pol.Tenant, id, p)
	if err != nil {
		s.writeError(ctx, reqID, storeError(err, "response_id", id))
		return true
	}
	ctx.SetBody(openai.AppendItemsPage(make([]byte, 0, 512), items, more))
	return true
}

// storeError is the answer to a responseStore's error about the response id (named
// by param): a 404 for one the tenant does not have, a 400 for a page or a
// conversation past its bounds, else a 503.
func storeError(err error, param, id string) *apiError {
	switch {
	case errors.Is(err, errResponseNotFound):
		return respNotFound(param, id)
	case errors.Is(err, errItemsPage):
		return badRequest("after", "after is not one of the response's input items")
	case errors.Is(err, errConversationTooLong):
		return badRequest(param, "the conversation of '"+id+"' is too long to continue: "+err.Error())
	}
	return storeUnavailable(err)
}

// parseItemsPage reads input_items' query: limit (1 to 100, default 20), order (asc
// or desc, the default) and after.
func parseItemsPage(q *fasthttp.Args) (itemsPage, *apiError) {
	p := itemsPage{limit: 20, after: string(q.Peek("after"))}
	if v := q.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 100 {
			return p, badRequest("limit", "limit must be an integer between 1 and 100")
		}
		p.limit = n
	}
	switch string(q.Peek("order")) {
	case "", "desc":
	case "asc":
		p.asc = true
	default:
		return p, badRequest("order", "order must be 'asc' or 'desc'")
	}
	return p, nil
}
