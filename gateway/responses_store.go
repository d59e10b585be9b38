package gateway

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/internal/jsonenc"
)

// A responseStore keeps the stored responses (store: true) of every tenant: each
// belongs to one tenant, and Get and Delete of another tenant's id are
// errResponseNotFound, as for an id that does not exist.
type responseStore interface {
	Get(ctx context.Context, tenant, id string) (*storedResponse, error)
	Put(ctx context.Context, r *storedResponse) error
	Delete(ctx context.Context, tenant, id string) error
}

// errResponseNotFound is a responseStore's answer for an id the tenant does not have.
var errResponseNotFound = errors.New("gateway: response not found")

// storedResponse is one stored response: the Response object as it was answered, and
// the conversation that continues from it.
type storedResponse struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	CreatedAt int64      `json:"created_at"` // Unix seconds
	Body      []byte     `json:"body"`       // the Response object's JSON, as answered
	Input     []respItem `json:"input"`      // the conversation before the output (previous turns, then this request's input; not the instructions, which OpenAI does not carry over)
	Output    []respItem `json:"output"`     // the output's items
}

// memResponses is the stored responses in this process's memory, at most max per
// tenant (the oldest dropped first): the store until a durable one is plugged in.
// A restart forgets them.
type memResponses struct {
	max int
	mu  sync.Mutex                            // guards the fields below
	by  map[string]map[string]*storedResponse // tenant → id → response
	ids map[string][]string                   // tenant → ids, oldest first
}

func newMemResponses(max int) *memResponses {
	return &memResponses{max: max, by: map[string]map[string]*storedResponse{}, ids: map[string][]string{}}
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

func (m *memResponses) Put(_ context.Context, r *storedResponse) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.by[r.Tenant]
	if t == nil {
		t = map[string]*storedResponse{}
		m.by[r.Tenant] = t
	}
	if _, ok := t[r.ID]; !ok {
		m.ids[r.Tenant] = append(m.ids[r.Tenant], r.ID)
	}
	t[r.ID] = r
	for ids := m.ids[r.Tenant]; len(ids) > m.max; ids = m.ids[r.Tenant] {
		delete(t, ids[0])
		m.ids[r.Tenant] = ids[1:]
	}
	return nil
}

func (m *memResponses) Delete(_ context.Context, tenant, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.by[tenant][id]; !ok {
		return errResponseNotFound
	}
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
		err := store.Delete(bg, pol.Tenant, id)
		if errors.Is(err, errResponseNotFound) {
			s.writeError(ctx, reqID, respNotFound("response_id", id))
			return true
		}
		if err != nil {
			s.writeError(ctx, reqID, storeUnavailable(err))
			return true
		}
		b := append([]byte(`{"id":`), jsonenc.AppendString(nil, id)...)
		ctx.SetContentType("application/json")
		ctx.SetBody(append(b, `,"object":"response.deleted","deleted":true}`...))
		return true
	}
	r, err := store.Get(bg, pol.Tenant, id)
	if errors.Is(err, errResponseNotFound) {
		s.writeError(ctx, reqID, respNotFound("response_id", id))
		return true
	}
	if err != nil {
		s.writeError(ctx, reqID, storeUnavailable(err))
		return true
	}
	ctx.SetContentType("application/json")
	if sub == "" {
		ctx.SetBody(r.Body)
		return true
	}
	page, aerr := inputItemsPage(ctx.QueryArgs(), r)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return true
	}
	ctx.SetBody(page)
	return true
}

// inputItemsPage is one page of a stored response's input items, as OpenAI lists
// them: {"object":"list","data":[…],"first_id","last_id","has_more"}, newest first
// unless order=asc, at most limit (1 to 100, default 20), after the item named by
// after.
func inputItemsPage(q *fasthttp.Args, r *storedResponse) ([]byte, *apiError) {
	limit := 20
	if v := q.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 100 {
			return nil, badRequest("limit", "limit must be an integer between 1 and 100")
		}
		limit = n
	}
	asc := false
	switch string(q.Peek("order")) {
	case "", "desc":
	case "asc":
		asc = true
	default:
		return nil, badRequest("order", "order must be 'asc' or 'desc'")
	}
	items := r.Input
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
		if !asc {
			order[i] = len(items) - 1 - i
		}
	}
	if after := string(q.Peek("after")); after != "" {
		k := -1
		for i, at := range order {
			if items[at].ID == after {
				k = i
				break
			}
		}
		if k < 0 {
			return nil, badRequest("after", "no input item '"+after+"' in this response")
		}
		order = order[k+1:]
	}
	more := len(order) > limit
	if more {
		order = order[:limit]
	}
	b := []byte(`{"object":"list","data":[`)
	for i, at := range order {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRespItem(b, &items[at], "completed")
	}
	b = append(b, `],"first_id":`...)
	if len(order) > 0 {
		b = jsonenc.AppendString(b, items[order[0]].ID)
		b = append(b, `,"last_id":`...)
		b = jsonenc.AppendString(b, items[order[len(order)-1]].ID)
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, more)
	return append(b, '}'), nil
}

// appendRespItem appends an item in OpenAI's shape with status: a message with
// input_text parts (output_text, with annotations, for the assistant's), a
// function_call or a function_call_output.
func appendRespItem(b []byte, it *respItem, status string) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, it.ID)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, it.Type)
	switch it.Type {
	case "message":
		b = append(b, `,"role":`...)
		b = jsonenc.AppendString(b, it.Role)
		if it.Role == "assistant" {
			b = append(b, `,"content":[{"type":"output_text","text":`...)
			b = jsonenc.AppendString(b, it.Text)
			b = append(b, `,"annotations":[],"logprobs":[]}]`...)
		} else {
			b = append(b, `,"content":[{"type":"input_text","text":`...)
			b = jsonenc.AppendString(b, it.Text)
			b = append(b, `}]`...)
		}
	case "function_call":
		b = append(b, `,"call_id":`...)
		b = jsonenc.AppendString(b, it.CallID)
		b = append(b, `,"name":`...)
		b = jsonenc.AppendString(b, it.Name)
		b = append(b, `,"arguments":`...)
		b = jsonenc.AppendString(b, it.Arguments)
	case "function_call_output":
		b = append(b, `,"call_id":`...)
		b = jsonenc.AppendString(b, it.CallID)
		b = append(b, `,"output":`...)
		b = jsonenc.AppendString(b, it.Output)
	}
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	return append(b, `"}`...)
}
