package respstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is returned for a response that is missing, expired, deleted or
// another tenant's: the four are the same to a caller (responses are keyed by tenant
// and id, so each is one lookup that misses).
var ErrNotFound = errors.New("respstore: response not found")

// ErrInvalid is wrapped by the errors of a malformed Record given to Put and of a
// Page outside its bounds (an unknown order, a limit outside 1–100, an after that is
// not one of the response's input items): the caller's 400.
var ErrInvalid = errors.New("respstore: invalid")

// ErrLimit is wrapped by the LimitError of a Put that would pass its tenant's Limits.
var ErrLimit = errors.New("respstore: over the tenant's stored responses limit")

// LimitError says which of a tenant's Limits a Put would pass.
type LimitError struct {
	Limit string // "responses_max_count" or "responses_max_bytes"
	Max   int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("respstore: over the tenant's %s of %d", e.Limit, e.Max)
}
func (e *LimitError) Unwrap() error { return ErrLimit }

// ErrConversationTooLong is wrapped by the ConversationError of a conversation past
// Options.MaxDepth responses or Options.MaxConversationBytes bytes of items.
var ErrConversationTooLong = errors.New("respstore: conversation too long")

// ConversationError says which bound of Conversation a chain passes.
type ConversationError struct {
	Limit string // "depth" (responses chained) or "bytes" (of the items)
	Max   int64
}

func (e *ConversationError) Error() string {
	what := "responses"
	if e.Limit == "bytes" {
		what = "bytes of items"
	}
	return fmt.Sprintf("respstore: the conversation has more than %d %s (previous_response_id chain)", e.Max, what)
}
func (e *ConversationError) Unwrap() error { return ErrConversationTooLong }

// Defaults of Options' zero fields.
const (
	DefaultRetention            = 30 * 24 * time.Hour
	DefaultMaxDepth             = 1000
	DefaultMaxConversationBytes = 32 << 20
)

// Item is one input or output item of a response (a message, a function call, a
// function call's output), as the API renders it.
type Item struct {
	ID   string // the item's id, as its JSON has it ("msg_…", "fc_…"); unique in its list
	JSON []byte // the item's JSON
}

// Record is one stored response. Times are kept to the millisecond.
type Record struct {
	Tenant   string
	ID       string // "resp_…" (NewID)
	Created  time.Time
	Expires  time.Time // zero: Created + Options.Retention
	Model    string
	Previous string // the previous_response_id it continues; "" starts a conversation
	Response []byte // the Response's JSON, as the API returns it
	Input    []Item // this request's own input items, in order
	Output   []Item // the response's output items, in order
}

// Size is what the record counts against its tenant's responses_max_bytes: its
// Response and its items' ids and JSON.
func (r *Record) Size() int64 {
	n := int64(len(r.Response))
	for _, l := range [2][]Item{r.Input, r.Output} {
		for i := range l {
			n += int64(len(l[i].ID) + len(l[i].JSON))
		}
	}
	return n
}

// itemBytes is what the record's items add to a conversation
// (Options.MaxConversationBytes): the bytes of their JSON.
func (r *Record) itemBytes() int64 {
	var n int64
	for _, l := range [2][]Item{r.Input, r.Output} {
		for i := range l {
			n += int64(len(l[i].JSON))
		}
	}
	return n
}

// Usage is what a tenant's stored responses take, counting expired ones that no
// Sweep (or Put of the tenant's) has removed yet.
type Usage struct {
	Count int64
	Bytes int64 // Record.Size of each
}

// Limits bound a tenant's stored responses; 0: no limit.
type Limits struct {
	MaxCount int64 // responses stored
	MaxBytes int64 // their Record.Size, together
}

// Full reports the limit that a tenant whose stored responses take u is at: one
// more response, of any size, would pass it (nil: there is room). A caller admits a
// request that will store a response with it before doing the request's work; the
// Put at its end (PutWithin) still checks, since the response's size is known only
// then and other requests may have stored in between.
func (l Limits) Full(u Usage) *LimitError {
	switch {
	case l.MaxCount > 0 && u.Count >= l.MaxCount:
		return &LimitError{Limit: "responses_max_count", Max: l.MaxCount}
	case l.MaxBytes > 0 && u.Bytes >= l.MaxBytes:
		return &LimitError{Limit: "responses_max_bytes", Max: l.MaxBytes}
	}
	return nil
}

// Options configure a store; the zero value has every default.
type Options struct {
	Retention            time.Duration              // how long a response is kept when its Record has no Expires; 0: DefaultRetention (30 days)
	MaxDepth             int                        // responses a Conversation may chain; 0: DefaultMaxDepth (1000)
	MaxConversationBytes int64                      // of a Conversation's items' JSON; 0: DefaultMaxConversationBytes (32 MiB)
	Limits               Limits                     // every tenant's, unless LimitsOf says otherwise; zero: none
	LimitsOf             func(tenant string) Limits // a tenant's limits (its plan's); nil: Limits
	// ProcessSync (Bolt): a Put returns once its journal record is written to the OS,
	// without waiting for its fdatasync: it survives the process being killed, not a
	// power cut before bbolt's next commit (fsynced, at most about commitEvery later).
	// The server sets it with ledger: {sync: process}, the same choice it makes for
	// the usage ledger. False (the default): every group's record is fdatasynced
	// before its Puts return.
	ProcessSync bool
}

func (o Options) withDefaults() Options {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxConversationBytes <= 0 {
		o.MaxConversationBytes = DefaultMaxConversationBytes
	}
	return o
}

func (o *Options) limitsOf(tenant string) Limits {
	if o.LimitsOf != nil {
		return o.LimitsOf(tenant)
	}
	return o.Limits
}

// Store keeps the stored responses of every tenant. Bolt and Redis implement it, and
// behave the same (one test suite runs against both).
type Store interface {
	// Put stores rec (replacing the tenant's response of that id, if any), within its
	// tenant's Limits (a LimitError), after removing the tenant's responses expired at
	// rec.Created. A malformed rec is an error wrapping ErrInvalid.
	Put(ctx context.Context, rec Record) error
	// PutWithin is Put within lim rather than the Options' limits of the tenant (the
	// gateway passes the tenant's plan's).
	PutWithin(ctx context.Context, rec Record, lim Limits) error
	// Get returns the tenant's response id, or ErrNotFound (also when it expired at now).
	Get(ctx context.Context, tenant, id string, now time.Time) (Record, error)
	// Delete removes the tenant's response id, or answers ErrNotFound as Get does.
	Delete(ctx context.Context, tenant, id string, now time.Time) error
	// InputItems is one page of the response's own input items (Page), and whether
	// more follow it.
	InputItems(ctx context.Context, tenant, id string, p Page, now time.Time) ([]Item, bool, error)
	// Conversation returns the items a request continuing the tenant's response id
	// starts from: for each response of its previous_response_id chain, oldest
	// first, its input items then its output items. ErrNotFound when id or one of the
	// responses before it is missing or expired; a ConversationError past
	// Options.MaxDepth or Options.MaxConversationBytes.
	Conversation(ctx context.Context, tenant, id string, now time.Time) ([]Item, error)
	// Sweep removes every response expired at now, and says how many it removed.
	Sweep(ctx context.Context, now time.Time) (int, error)
	// SweepTenant is Sweep of the tenant's responses alone. When none has expired it
	// writes nothing (one read: a bbolt read transaction, a Redis script that reads
	// one sorted set's head).
	SweepTenant(ctx context.Context, tenant string, now time.Time) (int, error)
	// Usage is what the tenant's stored responses take (expired ones included until
	// a sweep removes them): one read, a bbolt read transaction or a Redis HMGET.
	Usage(ctx context.Context, tenant string) (Usage, error)
}

// NewID returns prefix followed by 48 random hex digits (192 bits from crypto/rand):
// an id that says nothing of when it was made and cannot be guessed, e.g.
// NewID("resp_"), NewID("msg_").
func NewID(prefix string) string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("respstore: crypto/rand: " + err.Error()) // never fails on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

// maxIDLen bounds tenants' and responses' ids and items' ids.
const maxIDLen = 256

// validID reports whether s can be a tenant's or a response's id: 1 to 256 printable
// ASCII bytes without spaces, '/', '{' or '}' (so that it cannot change the shape of
// a key: '/' separates bbolt's, braces are Redis's hash tags).
func validID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '/' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// prepare checks rec and fills in its Expires.
func (o *Options) prepare(rec Record) (Record, error) {
	bad := func(format string, a ...any) (Record, error) {
		return Record{}, fmt.Errorf("%w record: "+format, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case !validID(rec.Tenant):
		return bad("tenant %q", rec.Tenant)
	case !validID(rec.ID):
		return bad("id %q", rec.ID)
	case rec.Previous != "" && !validID(rec.Previous):
		return bad("previous %q", rec.Previous)
	case rec.Previous == rec.ID:
		return bad("%s continues itself", rec.ID)
	case rec.Created.IsZero():
		return bad("%s has no created time", rec.ID)
	}
	if rec.Expires.IsZero() {
		rec.Expires = rec.Created.Add(o.Retention)
	}
	if rec.Expires.UnixMilli() <= rec.Created.UnixMilli() {
		return bad("%s expires before it is created", rec.ID)
	}
	for _, l := range [2][]Item{rec.Input, rec.Output} {
		seen := make(map[string]bool, len(l))
		for i := range l {
			if l[i].ID == "" || len(l[i].ID) > maxIDLen || seen[l[i].ID] {
				return bad("%s: item %d's id %q is empty, too long or repeated", rec.ID, i, l[i].ID)
			}
			seen[l[i].ID] = true
		}
	}
	rec.Created = time.UnixMilli(rec.Created.UnixMilli())
	rec.Expires = time.UnixMilli(rec.Expires.UnixMilli())
	return rec, nil
}

// expired reports whether a response expiring at exp (Unix ms) has expired at now.
func expired(exp int64, now time.Time) bool { return now.UnixMilli() >= exp }

// Order is the order of a Page's items.
type Order string

const (
	Asc  Order = "asc"  // the order the request gave them
	Desc Order = "desc" // the reverse (OpenAI's default)
)

// Page selects a page of a list as OpenAI's list endpoints do: the items after the
// one with id After ("" : from the start) in Order ("" : Desc), at most Limit of them
// (0: 20; otherwise 1 to 100).
type Page struct {
	After string
	Limit int
	Order Order
}

// page returns p's page of items and whether more follow it.
func page(items []Item, p Page) ([]Item, bool, error) {
	limit := p.Limit
	if limit == 0 {
		limit = 20
	}
	if limit < 1 || limit > 100 {
		return nil, false, fmt.Errorf("%w limit %d: it must be 1 to 100", ErrInvalid, p.Limit)
	}
	n := len(items)
	at := func(i int) int { return i } // the i-th item in the page's order
	switch p.Order {
	case Asc:
	case Desc, "":
		at = func(i int) int { return n - 1 - i }
	default:
		return nil, false, fmt.Errorf("%w order %q: it must be asc or desc", ErrInvalid, p.Order)
	}
	start := 0
	if p.After != "" {
		start = -1
		for i := range n {
			if items[at(i)].ID == p.After {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, false, fmt.Errorf("%w after %q: not an input item of the response", ErrInvalid, p.After)
		}
	}
	end := min(start+limit, n)
	out := make([]Item, 0, end-start)
	for i := start; i < end; i++ {
		out = append(out, items[at(i)])
	}
	return out, end < n, nil
}

// isOwn reports whether err is one of the package's own errors (already prefixed).
func isOwn(err error) bool {
	for _, e := range [...]error{ErrNotFound, ErrInvalid, ErrLimit, ErrConversationTooLong, errCorrupt} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// missingError is Conversation's error for a response before id in its chain
// (previous) that is missing or expired.
func missingError(previous, id string) error {
	return fmt.Errorf("%w: %s, which %s continues", ErrNotFound, previous, id)
}

// oldestFirst joins a chain's items (newest response first) oldest first.
func oldestFirst(chain [][]Item) []Item {
	n := 0
	for _, c := range chain {
		n += len(c)
	}
	out := make([]Item, 0, n)
	for i := len(chain) - 1; i >= 0; i-- {
		out = append(out, chain[i]...)
	}
	return out
}

// sweepTenants sweeps each tenant in turn (a store's Sweep), stopping at the first
// error; it returns the responses removed.
func sweepTenants(ctx context.Context, tenants []string, now time.Time, sweep func(context.Context, string, time.Time) (int, error)) (int, error) {
	removed := 0
	for _, t := range tenants {
		n, err := sweep(ctx, t, now)
		removed += n
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}
