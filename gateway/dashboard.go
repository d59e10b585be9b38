package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/usage"
)

// The dashboards (/dashboard): server-rendered HTML (html/template, so every tenant
// id, model name and error text is escaped) with server-side SVG charts; one small
// script (dashboard/app.js) refreshes the panel every 2 s. Assets are embedded; the
// page loads nothing from elsewhere, and its Content-Security-Policy forbids it.
//
// Sign-in is a form taking an API key: a tenant's key opens the tenant view, the
// admin key the operator view. The key itself is not kept: the session (a random id
// in an HttpOnly, SameSite=Strict cookie, Secure under TLS, expiring after
// sessionTTL) holds the tenant. Every POST carries the session's CSRF token.

//go:embed dashboard
var dashboardFS embed.FS

var dashTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"usd":    usdText,
	"num":    numText,
	"ms":     func(d time.Duration) string { return fixedText(float64(d)/1e6, 0) + " ms" },
	"pct":    func(v float64) string { return formatFloat(v*100, 1) + "%" },
	"mib":    func(b int64) string { return fixedText(float64(b)/(1<<20), 1) + " MiB" },
	"since":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04") },
	"deref":  func(p *float64) float64 { return *p },
	"derefi": func(p *int) int { return *p },
	"sub":    func(a, b int) int { return a - b },
	"chartArgs": func(id, budget string, c chart) map[string]any {
		return map[string]any{"ID": id, "Budget": budget, "C": c}
	},
}).ParseFS(dashboardFS, "dashboard/*.html"))

const (
	sessionCookie = "lmlite_dash"
	sessionTTL    = 8 * time.Hour
)

// session is one signed-in browser.
type session struct {
	tenant  string // "" for the operator
	keyID   string // the tenant key signed in with: its revocation ends the session
	admin   bool
	csrf    string
	expires time.Time
}

// sessions are the dashboard's signed-in browsers, in memory (a restart signs out).
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

func (ss *sessions) create(tenant, keyID string, admin bool, now time.Time) (string, *session) {
	id := randomToken()
	se := &session{tenant: tenant, keyID: keyID, admin: admin, csrf: randomToken(), expires: now.Add(sessionTTL)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[string]*session{}
	}
	for k, v := range ss.m { // drop expired sessions
		if now.After(v.expires) {
			delete(ss.m, k)
		}
	}
	ss.m[id] = se
	return id, se
}

func (ss *sessions) get(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	se := ss.m[id]
	if se == nil || now.After(se.expires) {
		delete(ss.m, id)
		return nil
	}
	return se
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

// handleDashboard serves /dashboard and below; false when path is not there.
func (s *Server) handleDashboard(ctx *fasthttp.RequestCtx, reqID string, path []byte) bool {
	p := string(path)
	if p != "/dashboard" && !strings.HasPrefix(p, "/dashboard/") {
		return false
	}
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: Chromium then sends "Origin: null" with forms
	h.Set("Cache-Control", "no-store")
	now := s.now()
	method := string(ctx.Method())
	if rest, ok := strings.CutPrefix(p, "/dashboard/static/"); ok {
		s.dashStatic(ctx, rest)
		return true
	}
	if method == "POST" && !sameOrigin(ctx) {
		dashError(ctx, 403, "cross-origin POST refused")
		return true
	}
	if p == "/dashboard/login" && method == "POST" {
		s.dashLogin(ctx, now)
		return true
	}
	sid := string(ctx.Request.Header.Cookie(sessionCookie))
	se := s.dash.get(sid, now)
	if se != nil && !se.admin && !s.keyLive(se.keyID) {
		s.dash.end(sid) // the key was revoked: so is its session
		se = nil
	}
	if se == nil {
		if method != "GET" {
			dashError(ctx, 401, "sign in first")
			return true
		}
		if p == "/dashboard/panel" {
			ctx.SetStatusCode(401) // the script goes back to the sign-in form
			return true
		}
		s.dashRender(ctx, 200, "login", map[string]any{})
		return true
	}
	if method == "POST" {
		if tok := ctx.PostArgs().Peek("csrf"); subtle.ConstantTimeCompare(tok, []byte(se.csrf)) != 1 {
			dashError(ctx, 403, "missing or wrong CSRF token")
			return true
		}
	}
	switch {
	case p == "/dashboard" && method == "GET":
		s.dashRender(ctx, 200, "page", s.dashData(se, now, ""))
	case p == "/dashboard/panel" && method == "GET":
		s.dashRender(ctx, 200, "panel", s.dashData(se, now, ""))
	case p == "/dashboard/logout" && method == "POST":
		s.dash.end(sid)
		s.setSessionCookie(ctx, "", -1)
		ctx.Redirect("/dashboard", 303)
	case se.admin && method == "POST":
		s.dashAdminAction(ctx, reqID, se, strings.TrimPrefix(p, "/dashboard/"), now)
	default:
		dashError(ctx, 404, "not found")
	}
	return true
}

func dashError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(msg + "\n")
}

func (s *Server) setSessionCookie(ctx *fasthttp.RequestCtx, id string, maxAge int) {
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(sessionCookie)
	c.SetValue(id)
	c.SetPath("/dashboard")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetSecure(ctx.IsTLS())
	c.SetMaxAge(maxAge)
	ctx.Response.Header.SetCookie(c)
}

// dashLogin takes the key of the sign-in form: a tenant's key or the admin key.
func (s *Server) dashLogin(ctx *fasthttp.RequestCtx, now time.Time) {
	key := bytes.TrimSpace(ctx.PostArgs().Peek("key"))
	var id string
	switch {
	case s.admin != nil && len(key) > 0 && subtle.ConstantTimeCompare(key, s.admin) == 1:
		id, _ = s.dash.create("", "", true, now)
	default:
		tenant, keyID, err := s.ten.Store().Authenticate(string(key))
		if _, ok := s.book.Resolve(tenant); err != nil || !ok {
			s.dashRender(ctx, 401, "login", map[string]any{"Error": "That key is not valid."})
			return
		}
		id, _ = s.dash.create(tenant, keyID, false, now)
	}
	s.setSessionCookie(ctx, id, int(sessionTTL/time.Second))
	ctx.Redirect("/dashboard", 303)
}

func (s *Server) dashStatic(ctx *fasthttp.RequestCtx, name string) {
	types := map[string]string{"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
	typ, ok := types[name]
	if !ok {
		dashError(ctx, 404, "not found")
		return
	}
	b, _ := dashboardFS.ReadFile("dashboard/" + name)
	ctx.SetContentType(typ)
	ctx.Response.Header.Set("Cache-Control", "max-age=300")
	ctx.SetBody(b)
}

func (s *Server) dashRender(ctx *fasthttp.RequestCtx, status int, name string, data any) {
	var b bytes.Buffer
	if err := dashTemplates.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("dashboard template", "template", name, "error", err)
		dashError(ctx, 500, "internal error")
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(b.Bytes())
}

// dashAdminAction runs an operator's POST: models/ID/load|unload, keys (create),
// keys/ID/revoke.
func (s *Server) dashAdminAction(ctx *fasthttp.RequestCtx, reqID string, se *session, p string, now time.Time) {
	parts := strings.Split(p, "/")
	flash := ""
	switch {
	case len(parts) == 3 && parts[0] == "models" && (parts[2] == "load" || parts[2] == "unload"):
		id := parts[1]
		err := s.loadModel(id, parts[2])
		if errors.Is(err, errNotLoadable) {
			dashError(ctx, 404, "no such embedded model")
			return
		}
		s.log.Info("dashboard model action", "request_id", reqID, "model", id, "action", parts[2], "error", err)
		flash = parts[2] + " " + id + ": ok"
		if err != nil {
			flash = parts[2] + " " + id + ": " + err.Error()
		}
	case len(parts) == 1 && parts[0] == "keys":
		tenant := string(ctx.PostArgs().Peek("tenant"))
		if _, ok := s.book.Resolve(tenant); !ok {
			dashError(ctx, 400, "unknown tenant")
			return
		}
		key, ki, err := s.ten.Store().CreateKey(tenant, now)
		if err != nil {
			dashError(ctx, 500, "creating the key failed")
			return
		}
		s.log.Info("key created", "request_id", reqID, "tenant", ki.Tenant, "key_id", ki.ID)
		d := s.dashData(se, now, "")
		d.NewKey, d.NewKeyTenant = key, tenant // shown once, in this answer only
		s.dashRender(ctx, 200, "page", d)
		return
	case len(parts) == 3 && parts[0] == "keys" && parts[2] == "revoke":
		ki, err := s.ten.Store().RevokeKey(parts[1], now)
		if err != nil {
			dashError(ctx, 404, "no such key")
			return
		}
		s.log.Info("key revoked", "request_id", reqID, "tenant", ki.Tenant, "key_id", ki.ID)
		flash = "revoked key " + ki.ID
	default:
		dashError(ctx, 404, "not found")
		return
	}
	s.dashRender(ctx, 200, "page", s.dashData(se, now, flash))
}

// quantiles are a histogram's p50, p95 and p99.
type quantiles struct{ P50, P95, P99 time.Duration }

func quantilesOf(h *usage.Hist) quantiles {
	return quantiles{h.Quantile(.5), h.Quantile(.95), h.Quantile(.99)}
}

// keyLive reports whether the key id exists and is not revoked.
func (s *Server) keyLive(id string) bool {
	for _, k := range s.ten.Store().Keys() {
		if k.ID == id {
			return k.Revoked.IsZero()
		}
	}
	return false
}

// sameOrigin reports whether a POST's Origin header, when the browser sent one, is
// this server (a sign-in form on another site is refused, besides the CSRF tokens).
func sameOrigin(ctx *fasthttp.RequestCtx) bool {
	o := ctx.Request.Header.Peek("Origin")
	if len(o) == 0 {
		return true
	}
	scheme := "http://"
	if ctx.IsTLS() {
		scheme = "https://"
	}
	return string(o) == scheme+string(ctx.Host())
}
