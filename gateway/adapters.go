package gateway

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"

	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tiers"
)

// This file is the LoRA adapters as the gateway sees them: a client names an
// adapter by its configured id as a request's "model" (vLLM's --lora-modules
// NAME=PATH shape; an operator may give OpenAI's fine-tune form, e.g.
// "ft:qwen-0.5b:acme:support", since an id may hold colons). The request runs on the
// adapter's base model with the adapter applied (engine.Request.Adapters), at the
// base's prices; the answer's "model" is the adapter's id, X-LMLite-Model the base's
// and X-LMLite-Adapter the adapter's. A tenant may use an adapter when it can see
// it (a shared one, or its own private one: Adapter.Tenant), its plan's
// allowed_adapters lets it (empty: all it can see) and its plan allows the base
// model. An adapter a tenant cannot see does not exist for it: 404 in every API and
// absent from /v1/models, exactly as a model id that was never configured.

// Adapter is one LoRA adapter as the gateway sees it.
type Adapter struct {
	ID     string // what clients name as "model"; unique among models and adapters
	Base   string // the embedded model it adapts (a Config.Models id)
	Tenant string // "": every tenant may see it; else that tenant alone
}

// adapter is one servable adapter.
type adapter struct {
	id     string
	base   *model
	tenant string               // "": shared
	tier   string               // first tier listing it ("" if none: its base's), for X-LMLite-Tier
	in     [tiers.NumTiers]bool // the tiers listing it
}

// visible reports whether the adapter exists for the tenant: shared, or its own.
func (a *adapter) visible(tenant string) bool { return a.tenant == "" || a.tenant == tenant }

// adapterFor is the adapter id when the policy may use it, else nil (not there, not
// visible to the tenant, not in its plan's allowed_adapters, or its base model not
// allowed where it serves: in the tiers listing the base or the adapter).
func (s *Server) adapterFor(pol *policies.Policy, id string) *adapter {
	a := s.adapters[id]
	if a == nil || !a.visible(pol.Tenant) || !pol.AllowsAdapter(id) {
		return nil
	}
	in := a.base.in
	for t := range in {
		in[t] = in[t] || a.in[t]
	}
	if !pol.AllowsServing(a.base.id, in) {
		return nil
	}
	return a
}

// candidate resolves a tier's candidate id for the policy: the model it runs on and
// the adapter applied (nil for a model), ok false when the policy may not use it. A
// tier may list an adapter as it lists a model (routed by tier, the request runs on
// the adapter's base with the adapter applied); for a tenant that may not use the
// adapter (another tenant's private one, or one its plan's allowed_adapters leaves
// out) the candidate is passed over as forbidden, as a model its plan leaves out.
func (s *Server) candidate(pol *policies.Policy, id string) (*model, *adapter, bool) {
	if a := s.adapters[id]; a != nil {
		return a.base, a, a.visible(pol.Tenant) && pol.AllowsAdapter(id) && pol.AllowsModel(a.base.id)
	}
	m := s.models[id]
	return m, nil, m != nil && pol.AllowsModel(id)
}

// allowsCandidate reports whether the policy may use the tier candidate id (a model
// or an adapter): candidate's ok.
func (s *Server) allowsCandidate(pol *policies.Policy, id string) bool {
	_, _, ok := s.candidate(pol, id)
	return ok
}

// adapterModelState is an adapter's state in /v1/models' lmlite extension: its
// base's while the engine does not report adapters apart.
func (s *Server) appendAdapter(b []byte, a *adapter, states map[string]string) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, a.id)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, s.created, 10)
	b = append(b, `,"owned_by":`...)
	owner := a.tenant
	if owner == "" {
		owner = s.ownedBy(a.base.id)
	}
	b = jsonenc.AppendString(b, owner)
	// vLLM lists a LoRA adapter with its base as "parent" (and "root").
	b = append(b, `,"parent":`...)
	b = jsonenc.AppendString(b, a.base.id)
	b = append(b, `,"root":`...)
	b = jsonenc.AppendString(b, a.base.id)
	b = append(b, `,"lmlite":{"embeddings":false,"adapter":true`...)
	if st := states[a.id]; st != "" {
		b = append(b, `,"state":`...)
		b = jsonenc.AppendString(b, st)
	}
	return append(b, "}}"...)
}

// adapterID is the job's adapter's id, "" for none.
func (j *job) adapterID() string {
	if a := j.adapter(); a != nil {
		return a.id
	}
	return ""
}

// adapter is the adapter the job runs with: the chosen entry's (a tier may list an
// adapter), else the one the client named (a request refused before its choice).
func (j *job) adapter() *adapter {
	if j.c.adapter != nil {
		return j.c.adapter
	}
	return j.rt.adapter
}

// AdapterSource is an optional ability of an Engine: its adapters' states (the
// Block's Adapters), shown in /v1/models and the admin API.
type AdapterSource interface {
	Adapters() []engine.AdapterStatus
}

// adapterStates is each adapter's state from the engine (loaded, unloaded), or nil
// when the engine does not report adapters.
func (s *Server) adapterStates() map[string]string {
	src, ok := s.eng.(AdapterSource)
	if !ok || s.eng == nil {
		return nil
	}
	out := map[string]string{}
	for _, st := range src.Adapters() {
		out[st.ID] = st.State
	}
	return out
}

// adapterLoadTimeout bounds an admin load of an adapter (its base model's load
// included).
const adapterLoadTimeout = 10 * time.Minute

// AdapterLoader is an optional ability of an Engine: the admin API loads and
// unloads adapters through it (the Block has it).
type AdapterLoader interface {
	LoadAdapter(ctx context.Context, modelID, id string) error
	UnloadAdapter(modelID, id string) error
}

// adminAdapters serves /admin/adapters (rest: the path after it; an adapter id may
// hold slashes): GET lists them, POST {id}/load and {id}/unload act on one.
func (s *Server) adminAdapters(ctx *fasthttp.RequestCtx, reqID string, rest []string, method string) {
	if len(rest) == 0 && method == "GET" {
		type row struct {
			ID      string `json:"id"`
			Base    string `json:"base"`
			Tenant  string `json:"tenant,omitempty"` // its owner; "": shared
			State   string `json:"state,omitempty"`  // loaded, unloaded; "": the engine does not say
			Bytes   int64  `json:"bytes"`            // what it costs loaded (its file)
			Active  int    `json:"active"`           // requests in flight on it
			Loads   uint64 `json:"loads"`
			Unloads uint64 `json:"unloads"`
		}
		st := map[string]engine.AdapterStatus{}
		if src, ok := s.eng.(AdapterSource); ok && s.eng != nil {
			for _, a := range src.Adapters() {
				st[a.ID] = a
			}
		}
		rows := []row{}
		for _, id := range s.adapterIDs {
			a, e := s.adapters[id], st[id]
			rows = append(rows, row{ID: id, Base: a.base.id, Tenant: a.tenant, State: e.State, Bytes: e.Bytes, Active: e.Active, Loads: e.Loads, Unloads: e.Unloads})
		}
		writeJSON(ctx, 200, map[string]any{"object": "list", "data": rows})
		return
	}
	n := len(rest)
	if n < 2 || method != "POST" || rest[n-1] != "load" && rest[n-1] != "unload" {
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error", message: "unknown admin endpoint " + method + " /admin/adapters/" + strings.Join(rest, "/")})
		return
	}
	id, action := strings.Join(rest[:n-1], "/"), rest[n-1]
	a := s.adapters[id]
	if a == nil {
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error", param: "adapter", message: "unknown adapter '" + id + "'"})
		return
	}
	ld, ok := s.eng.(AdapterLoader)
	if s.eng == nil || !ok {
		s.writeError(ctx, reqID, &apiError{status: 501, typ: "invalid_request_error", message: "adapter '" + id + "' cannot be loaded or unloaded here (the engine cannot)"})
		return
	}
	var err error
	if action == "load" {
		lctx, cancel := context.WithTimeout(context.Background(), adapterLoadTimeout)
		err = ld.LoadAdapter(lctx, a.base.id, id)
		cancel()
	} else {
		err = ld.UnloadAdapter(a.base.id, id)
	}
	s.metrics.admin.WithLabelValues(id, action).Inc()
	if errors.Is(err, engine.ErrAdapterBusy) {
		s.writeError(ctx, reqID, &apiError{status: 409, typ: "invalid_request_error", code: "adapter_busy", message: err.Error()})
		return
	}
	if err != nil {
		s.writeError(ctx, reqID, engineError(err))
		return
	}
	writeJSON(ctx, 200, map[string]any{"id": id, "action": action, "ok": true})
}

// adapterSummary lists the adapters over model id with their states, for the
// operator's dashboard ("ft-0 (loaded), ft-1 (unloaded)"); "": none.
func (s *Server) adapterSummary(id string) string {
	states := s.adapterStates()
	var b strings.Builder
	for _, aid := range s.adapterIDs {
		if s.adapters[aid].base.id != id {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(aid)
		if st := states[aid]; st != "" {
			b.WriteString(" (" + st + ")")
		}
	}
	return b.String()
}
