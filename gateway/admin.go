package gateway

import (
	"errors"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/tenancy"
)

// handleAdmin serves the admin API, guarded by the admin key:
//
//	GET    /admin/models               models with state, memory, replicas, queue depth
//	GET    /admin/devices              devices with memory, utilization and leases (devices.go)
//	GET    /admin/workers              worker processes (workers mode): pid, state, restarts, stderr (workers.go)
//	POST   /admin/models/{id}/load     load a model (engine permitting)
//	POST   /admin/models/{id}/unload   unload a model
//	GET    /admin/adapters             LoRA adapters: base, owner, state, bytes, requests in flight (adapters.go)
//	POST   /admin/adapters/{id}/load   load an adapter (and its base model)
//	POST   /admin/adapters/{id}/unload unload an adapter no request uses
//	GET    /admin/keys                 list keys (never secrets)
//	POST   /admin/keys {"tenant":"T"}  create a key; the answer holds it, once
//	DELETE /admin/keys/{id}            revoke a key
//	GET    /admin/usage?tenant=T       the tenant's spend today and this month
func (s *Server) handleAdmin(ctx *fasthttp.RequestCtx, reqID string) {
	if e := s.checkAdmin(ctx); e != nil {
		s.writeError(ctx, reqID, e)
		return
	}
	path := strings.TrimPrefix(string(ctx.Path()), "/admin/")
	method := string(ctx.Method())
	parts := strings.Split(path, "/")
	switch {
	case path == "devices" && method == "GET":
		s.adminDevices(ctx, reqID)
	case path == "workers" && method == "GET":
		s.adminWorkers(ctx)
	case parts[0] == "adapters":
		s.adminAdapters(ctx, reqID, parts[1:], method)
	case path == "models" && method == "GET":
		type row struct {
			ID          string `json:"id"`
			Kind        string `json:"kind"`
			State       string `json:"state"`
			MemoryBytes int64  `json:"memory_bytes"`
			Replicas    int    `json:"replicas"`
			QueueDepth  int    `json:"queue_depth"`
			MaxModelLen int    `json:"max_model_len"`
			Tier        string `json:"tier,omitempty"`
			Error       string `json:"error,omitempty"`
		}
		var rows []row
		for _, st := range s.modelStatuses() {
			k := "embedded"
			if s.models[st.ID].upstream != nil {
				k = "upstream"
			}
			rows = append(rows, row{st.ID, k, string(st.State), st.MemoryBytes, st.Replicas, st.QueueDepth, st.MaxModelLen, s.models[st.ID].tier, st.Err})
		}
		writeJSON(ctx, 200, map[string]any{"object": "list", "data": rows})
	case len(parts) == 3 && parts[0] == "models" && (parts[2] == "load" || parts[2] == "unload") && method == "POST":
		id := parts[1]
		if _, ok := s.models[id]; !ok {
			s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error", param: "model", message: "unknown model '" + id + "'"})
			return
		}
		err := s.loadModel(id, parts[2])
		if errors.Is(err, errNotLoadable) {
			s.writeError(ctx, reqID, &apiError{status: 501, typ: "invalid_request_error",
				message: "model '" + id + "' cannot be loaded or unloaded here (upstream, or the engine cannot)"})
			return
		}
		if err != nil {
			s.writeError(ctx, reqID, engineError(err))
			return
		}
		writeJSON(ctx, 200, map[string]any{"id": id, "action": parts[2], "ok": true})
	case path == "keys" && method == "GET":
		writeJSON(ctx, 200, map[string]any{"object": "list", "data": s.ten.Store().Keys()})
	case path == "keys" && method == "POST":
		var req struct {
			Tenant string `json:"tenant"`
		}
		if err := jsonv2.Unmarshal(ctx.PostBody(), &req); err != nil || req.Tenant == "" {
			s.writeError(ctx, reqID, badRequest("tenant", "body must be {\"tenant\": \"ID\"}"))
			return
		}
		if _, ok := s.book.Resolve(req.Tenant); !ok {
			s.writeError(ctx, reqID, badRequest("tenant", "unknown tenant '"+req.Tenant+"' (tenants are declared in the config)"))
			return
		}
		key, ki, err := s.ten.Store().CreateKey(req.Tenant, s.now())
		if err != nil {
			s.writeError(ctx, reqID, &apiError{status: 500, typ: "server_error", message: err.Error()})
			return
		}
		s.log.Info("key created", "request_id", reqID, "tenant", ki.Tenant, "key_id", ki.ID)
		writeJSON(ctx, 200, map[string]any{"key": key, "id": ki.ID, "tenant": ki.Tenant, "created": ki.Created})
	case len(parts) == 2 && parts[0] == "keys" && method == "DELETE":
		ki, err := s.ten.Store().RevokeKey(parts[1], s.now())
		if errors.Is(err, tenancy.ErrNoKey) {
			s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error", param: "id", message: err.Error()})
			return
		}
		if err != nil {
			s.writeError(ctx, reqID, &apiError{status: 500, typ: "server_error", message: err.Error()})
			return
		}
		s.log.Info("key revoked", "request_id", reqID, "tenant", ki.Tenant, "key_id", ki.ID)
		ki.Hash = nil
		writeJSON(ctx, 200, ki)
	case path == "usage" && method == "GET":
		tenant := string(ctx.QueryArgs().Peek("tenant"))
		pol, ok := s.book.Resolve(tenant)
		if !ok {
			s.writeError(ctx, reqID, badRequest("tenant", "unknown tenant '"+tenant+"'"))
			return
		}
		day, month, err := s.ten.Spent(tenant, s.now()) // every process's, with Redis
		if errors.Is(err, tenancy.ErrUnavailable) {
			s.writeError(ctx, reqID, unavailable(err))
			return
		}
		if err != nil {
			s.writeError(ctx, reqID, &apiError{status: 500, typ: "server_error", message: err.Error()})
			return
		}
		writeJSON(ctx, 200, map[string]any{"tenant": tenant, "spent_today_usd": day.Dollars(), "spent_month_usd": month.Dollars(),
			"daily_budget_usd": pol.DailyBudget.Dollars(), "monthly_budget_usd": pol.MonthlyBudget.Dollars()})
	default:
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error", message: "unknown admin endpoint " + method + " /admin/" + path})
	}
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := jsonv2.Marshal(v, jsonv2.Deterministic(true))
	if err != nil {
		status, b = 500, []byte(`{"error":{"message":"encoding failed","type":"server_error","param":null,"code":null}}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// errNotLoadable is loadModel's answer for a model it cannot load or unload: not
// configured, served upstream, or an engine without ModelLoader.
var errNotLoadable = errors.New("gateway: model cannot be loaded or unloaded here")

// loadModel is an operator's load or unload (action) of an embedded model, from the
// admin API or the dashboard, counted in the admin actions' series.
func (s *Server) loadModel(id, action string) error {
	m, ok := s.models[id]
	ld, canLoad := s.eng.(ModelLoader)
	if !ok || m.upstream != nil || s.eng == nil || !canLoad {
		return errNotLoadable
	}
	var err error
	if action == "load" {
		err = ld.Load(id)
	} else {
		err = ld.Unload(id)
	}
	s.metrics.admin.WithLabelValues(id, action).Inc()
	return err
}
