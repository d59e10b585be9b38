// Package policies resolves a tenant to its effective policy: the plan it is on, from
// the config file, with the tenant's own overrides applied.
//
// Plans and overrides are plain data (YAML in the config). New validates them all
// once at start-up and resolves every tenant to an immutable Policy; Book.Resolve is
// then a map lookup per request.
package policies

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tiers"
)

// Plan is a named bundle of limits. Zero values mean "no limit" (or the stated default).
type Plan struct {
	RequestsPerSecond float64  `yaml:"requests_per_second"` // 0: unlimited
	Burst             int      `yaml:"burst"`               // requests allowed at once above the rate; 0: max(1, ceil(rps))
	TokensPerMinute   int      `yaml:"tokens_per_minute"`   // prompt + completion tokens; 0: unlimited
	MaxConcurrency    int      `yaml:"max_concurrency"`     // requests in flight; 0: unlimited
	DailyBudgetUSD    float64  `yaml:"daily_budget_usd"`    // per UTC day; 0: none
	MonthlyBudgetUSD  float64  `yaml:"monthly_budget_usd"`  // per UTC calendar month; 0: none
	AllowedTiers      []string `yaml:"allowed_tiers"`       // tier names; empty: all (binds named models too: Policy.AllowsServing)
	AllowedModels     []string `yaml:"allowed_models"`      // model ids; empty: all
	// AllowedAdapters are the LoRA adapters (configs' adapters:, named as a request's
	// model) the plan may use; empty: every adapter it can see (the shared ones and
	// the tenant's own). An adapter also needs its base model allowed.
	AllowedAdapters []string `yaml:"allowed_adapters"`
	DefaultTierMode string   `yaml:"default_tier_mode"` // for model "auto": balanced, deep, max; "": balanced
	SharePrefix     bool     `yaml:"share_prefix"`      // share the prefix cache with other tenants
	Weight          float64  `yaml:"weight"`            // fair-queue share; 0: 1
	BatchDiscount   float64  `yaml:"batch_discount"`    // the part of the price batch lines do not pay (0.5: half price); 0: none
	// BatchMaxConcurrency is how many lines of one of the tenant's batch jobs run at
	// once; 0: the server's batch concurrency.
	BatchMaxConcurrency int `yaml:"batch_max_concurrency"`

	// The Batch API's quotas (0: the default written beside; -1: no limit).
	FilesMaxBytes         int64 `yaml:"files_max_bytes"`          // bytes of the tenant's stored files, uploads and batch outputs; 0: 2 GiB
	FilesMaxCount         int   `yaml:"files_max_count"`          // the tenant's stored files; 0: 500
	FileUploadsPerMinute  int   `yaml:"file_uploads_per_minute"`  // POST /v1/files; 0: 30 (a token bucket: as many at once, then one every 60/N s)
	BatchCreatesPerMinute int   `yaml:"batch_creates_per_minute"` // POST /v1/batches; 0: 30 (a token bucket, as file_uploads_per_minute)
	BatchMaxUnfinished    int   `yaml:"batch_max_unfinished"`     // the tenant's jobs not yet ended; 0: 10
	// The stored responses of /v1/responses (0: the default written beside; -1: no limit).
	ResponsesMaxCount int64 `yaml:"responses_max_count"` // the tenant's stored responses; 0: 10,000
	ResponsesMaxBytes int64 `yaml:"responses_max_bytes"` // their bytes (the Response JSON and its items); 0: 1 GiB
	// AllowShortKeepAlive lets the tenant's requests shorten a model's idle timeout
	// with lmlite.keep_alive (down to the server's min_keep_alive, and never below
	// what another tenant's recent use keeps it for); without it a shorter
	// keep_alive is ignored. Lengthening it (up to max_keep_alive) needs no flag.
	AllowShortKeepAlive bool `yaml:"allow_short_keep_alive"`
}

// Defaults of the Batch API's quotas (a Plan's zero value).
const (
	DefaultFilesMaxBytes         int64 = 2 << 30
	DefaultFilesMaxCount               = 500
	DefaultFileUploadsPerMinute        = 30
	DefaultBatchCreatesPerMinute       = 30
	DefaultBatchMaxUnfinished          = 10
	DefaultResponsesMaxCount     int64 = 10_000
	DefaultResponsesMaxBytes     int64 = 1 << 30
)

// Override holds the fields a tenant changes from its plan; nil fields keep the plan's.
type Override struct {
	RequestsPerSecond *float64  `yaml:"requests_per_second"`
	Burst             *int      `yaml:"burst"`
	TokensPerMinute   *int      `yaml:"tokens_per_minute"`
	MaxConcurrency    *int      `yaml:"max_concurrency"`
	DailyBudgetUSD    *float64  `yaml:"daily_budget_usd"`
	MonthlyBudgetUSD  *float64  `yaml:"monthly_budget_usd"`
	AllowedTiers      *[]string `yaml:"allowed_tiers"`
	AllowedModels     *[]string `yaml:"allowed_models"`
	AllowedAdapters   *[]string `yaml:"allowed_adapters"`
	DefaultTierMode   *string   `yaml:"default_tier_mode"`
	SharePrefix       *bool     `yaml:"share_prefix"`
	Weight            *float64  `yaml:"weight"`
	BatchDiscount     *float64  `yaml:"batch_discount"`

	BatchMaxConcurrency *int `yaml:"batch_max_concurrency"`

	FilesMaxBytes         *int64 `yaml:"files_max_bytes"`
	FilesMaxCount         *int   `yaml:"files_max_count"`
	FileUploadsPerMinute  *int   `yaml:"file_uploads_per_minute"`
	BatchCreatesPerMinute *int   `yaml:"batch_creates_per_minute"`
	BatchMaxUnfinished    *int   `yaml:"batch_max_unfinished"`
	ResponsesMaxCount     *int64 `yaml:"responses_max_count"`
	ResponsesMaxBytes     *int64 `yaml:"responses_max_bytes"`
	AllowShortKeepAlive   *bool  `yaml:"allow_short_keep_alive"`
}

// Apply returns the plan with the override's set fields replacing its own.
func (p Plan) Apply(o Override) Plan {
	if o.RequestsPerSecond != nil {
		p.RequestsPerSecond = *o.RequestsPerSecond
	}
	if o.Burst != nil {
		p.Burst = *o.Burst
	}
	if o.TokensPerMinute != nil {
		p.TokensPerMinute = *o.TokensPerMinute
	}
	if o.MaxConcurrency != nil {
		p.MaxConcurrency = *o.MaxConcurrency
	}
	if o.DailyBudgetUSD != nil {
		p.DailyBudgetUSD = *o.DailyBudgetUSD
	}
	if o.MonthlyBudgetUSD != nil {
		p.MonthlyBudgetUSD = *o.MonthlyBudgetUSD
	}
	if o.AllowedTiers != nil {
		p.AllowedTiers = *o.AllowedTiers
	}
	if o.AllowedModels != nil {
		p.AllowedModels = *o.AllowedModels
	}
	if o.AllowedAdapters != nil {
		p.AllowedAdapters = *o.AllowedAdapters
	}
	if o.DefaultTierMode != nil {
		p.DefaultTierMode = *o.DefaultTierMode
	}
	if o.SharePrefix != nil {
		p.SharePrefix = *o.SharePrefix
	}
	if o.Weight != nil {
		p.Weight = *o.Weight
	}
	if o.BatchDiscount != nil {
		p.BatchDiscount = *o.BatchDiscount
	}
	if o.BatchMaxConcurrency != nil {
		p.BatchMaxConcurrency = *o.BatchMaxConcurrency
	}
	if o.FilesMaxBytes != nil {
		p.FilesMaxBytes = *o.FilesMaxBytes
	}
	if o.FilesMaxCount != nil {
		p.FilesMaxCount = *o.FilesMaxCount
	}
	if o.FileUploadsPerMinute != nil {
		p.FileUploadsPerMinute = *o.FileUploadsPerMinute
	}
	if o.BatchCreatesPerMinute != nil {
		p.BatchCreatesPerMinute = *o.BatchCreatesPerMinute
	}
	if o.BatchMaxUnfinished != nil {
		p.BatchMaxUnfinished = *o.BatchMaxUnfinished
	}
	if o.AllowShortKeepAlive != nil {
		p.AllowShortKeepAlive = *o.AllowShortKeepAlive
	}
	if o.ResponsesMaxCount != nil {
		p.ResponsesMaxCount = *o.ResponsesMaxCount
	}
	if o.ResponsesMaxBytes != nil {
		p.ResponsesMaxBytes = *o.ResponsesMaxBytes
	}
	return p
}

// Policy is a tenant's effective policy. It is immutable: its fields are values and
// its sets are reached only through methods.
type Policy struct {
	Tenant            string
	Plan              string
	RequestsPerSecond float64 // 0: unlimited
	Burst             int
	TokensPerMinute   int         // 0: unlimited
	MaxConcurrency    int         // 0: unlimited
	DailyBudget       money.Money // 0: none
	MonthlyBudget     money.Money // 0: none
	DefaultMode       tiers.Mode
	SharePrefix       bool
	Weight            float64
	BatchDiscount     float64 // batch lines pay (1 - BatchDiscount) of the price
	BatchConcurrency  int     // lines of one batch job at once; 0: the server's default
	ShortKeepAlive    bool    // its lmlite.keep_alive may shorten a model's idle timeout (Plan.AllowShortKeepAlive)

	// The Batch API's quotas, resolved (a plan's 0 is its default here); 0: no limit.
	FilesMaxBytes         int64 // bytes of the tenant's stored files
	FilesMaxCount         int   // the tenant's stored files
	FileUploadsPerMinute  int   // POST /v1/files
	BatchCreatesPerMinute int   // POST /v1/batches
	BatchMaxUnfinished    int   // the tenant's jobs not yet ended
	ResponsesMaxCount     int64 // the tenant's stored responses (/v1/responses)
	ResponsesMaxBytes     int64 // their bytes

	allowTiers    [tiers.NumTiers]bool
	allowModels   map[string]struct{} // nil: all
	allowAdapters map[string]struct{} // nil: all
}

// AllowedTiers returns which tiers the policy allows.
func (p *Policy) AllowedTiers() [tiers.NumTiers]bool { return p.allowTiers }

// AllowsTier reports whether the policy allows tier t.
func (p *Policy) AllowsTier(t tiers.Tier) bool {
	return t >= 0 && int(t) < tiers.NumTiers && p.allowTiers[t]
}

// AllowsModel reports whether the policy allows model id.
func (p *Policy) AllowsModel(id string) bool {
	if p.allowModels == nil {
		return true
	}
	_, ok := p.allowModels[id]
	return ok
}

// AllowsAdapter reports whether the plan's allowed_adapters lets the policy use
// the adapter id. Whether the tenant may see the adapter at all (a private one is
// its owner's alone) and whether its base model is allowed are the caller's
// checks.
func (p *Policy) AllowsAdapter(id string) bool {
	if p.allowAdapters == nil {
		return true
	}
	_, ok := p.allowAdapters[id]
	return ok
}

// AllowsServing reports whether the policy allows model id, which serves in the tiers
// marked in servesIn: the plan must allow the model and at least one of its tiers. A
// model in no tier is allowed only when allowed_models names it, or when the plan
// limits neither tiers nor models.
func (p *Policy) AllowsServing(id string, servesIn [tiers.NumTiers]bool) bool {
	if !p.AllowsModel(id) {
		return false
	}
	inAny := false
	for t, in := range servesIn {
		if in {
			inAny = true
			if p.allowTiers[t] {
				return true
			}
		}
	}
	if inAny {
		return false
	}
	return p.allowModels != nil || p.allowTiers == tiers.AllTiers
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("policies: invalid policy")

// Resolve validates a plan with a tenant's overrides applied and returns the effective
// policy. knownModel, when not nil, rejects allowed models that do not exist.
func Resolve(tenant, planName string, plan Plan, o Override, knownModel func(string) bool) (Policy, error) {
	p := plan.Apply(o)
	bad := func(field, format string, args ...any) (Policy, error) {
		return Policy{}, fmt.Errorf("%w: tenant %q (plan %q): %s: %s", ErrInvalid, tenant, planName, field, fmt.Sprintf(format, args...))
	}
	switch {
	case p.RequestsPerSecond < 0 || math.IsNaN(p.RequestsPerSecond) || math.IsInf(p.RequestsPerSecond, 0):
		return bad("requests_per_second", "must be a number ≥ 0")
	case p.Burst < 0:
		return bad("burst", "must be ≥ 0")
	case p.TokensPerMinute < 0:
		return bad("tokens_per_minute", "must be ≥ 0")
	case p.MaxConcurrency < 0:
		return bad("max_concurrency", "must be ≥ 0")
	case p.DailyBudgetUSD < 0 || math.IsNaN(p.DailyBudgetUSD) || math.IsInf(p.DailyBudgetUSD, 0):
		return bad("daily_budget_usd", "must be a number ≥ 0")
	case p.MonthlyBudgetUSD < 0 || math.IsNaN(p.MonthlyBudgetUSD) || math.IsInf(p.MonthlyBudgetUSD, 0):
		return bad("monthly_budget_usd", "must be a number ≥ 0")
	case p.Weight < 0 || math.IsNaN(p.Weight):
		return bad("weight", "must be ≥ 0")
	case !(p.BatchDiscount >= 0 && p.BatchDiscount < 1):
		return bad("batch_discount", "must be ≥ 0 and < 1")
	case p.BatchMaxConcurrency < 0:
		return bad("batch_max_concurrency", "must be ≥ 0")
	case p.FilesMaxBytes < -1:
		return bad("files_max_bytes", "must be ≥ 0, or -1 for no limit")
	case p.FilesMaxCount < -1:
		return bad("files_max_count", "must be ≥ 0, or -1 for no limit")
	case p.FileUploadsPerMinute < -1:
		return bad("file_uploads_per_minute", "must be ≥ 0, or -1 for no limit")
	case p.BatchCreatesPerMinute < -1:
		return bad("batch_creates_per_minute", "must be ≥ 0, or -1 for no limit")
	case p.BatchMaxUnfinished < -1:
		return bad("batch_max_unfinished", "must be ≥ 0, or -1 for no limit")
	case p.ResponsesMaxCount < -1:
		return bad("responses_max_count", "must be ≥ 0, or -1 for no limit")
	case p.ResponsesMaxBytes < -1:
		return bad("responses_max_bytes", "must be ≥ 0, or -1 for no limit")
	}
	pol := Policy{
		Tenant:            tenant,
		Plan:              planName,
		RequestsPerSecond: p.RequestsPerSecond,
		Burst:             p.Burst,
		TokensPerMinute:   p.TokensPerMinute,
		MaxConcurrency:    p.MaxConcurrency,
		DailyBudget:       money.USD(p.DailyBudgetUSD),
		MonthlyBudget:     money.USD(p.MonthlyBudgetUSD),
		SharePrefix:       p.SharePrefix,
		Weight:            p.Weight,
		BatchDiscount:     p.BatchDiscount,
		BatchConcurrency:  p.BatchMaxConcurrency,

		FilesMaxBytes:         quota(p.FilesMaxBytes, DefaultFilesMaxBytes),
		FilesMaxCount:         int(quota(int64(p.FilesMaxCount), DefaultFilesMaxCount)),
		FileUploadsPerMinute:  int(quota(int64(p.FileUploadsPerMinute), DefaultFileUploadsPerMinute)),
		BatchCreatesPerMinute: int(quota(int64(p.BatchCreatesPerMinute), DefaultBatchCreatesPerMinute)),
		BatchMaxUnfinished:    int(quota(int64(p.BatchMaxUnfinished), DefaultBatchMaxUnfinished)),
		ShortKeepAlive:        p.AllowShortKeepAlive,
		ResponsesMaxCount:     quota(p.ResponsesMaxCount, DefaultResponsesMaxCount),
		ResponsesMaxBytes:     quota(p.ResponsesMaxBytes, DefaultResponsesMaxBytes),
	}
	if pol.Burst == 0 && pol.RequestsPerSecond > 0 {
		pol.Burst = max(1, int(math.Ceil(pol.RequestsPerSecond)))
	}
	if pol.Weight == 0 {
		pol.Weight = 1
	}
	if p.DefaultTierMode == "" {
		pol.DefaultMode = tiers.ModeBalanced
	} else {
		m, err := tiers.ParseMode(p.DefaultTierMode)
		if err != nil || m == tiers.ModeFixed {
			return bad("default_tier_mode", "%q is not balanced, deep or max", p.DefaultTierMode)
		}
		pol.DefaultMode = m
	}
	if len(p.AllowedTiers) == 0 {
		pol.allowTiers = tiers.AllTiers
	}
	for _, n := range p.AllowedTiers {
		t, err := tiers.ParseTier(n)
		if err != nil {
			return bad("allowed_tiers", "%q is not fast, balanced, deep or max", n)
		}
		pol.allowTiers[t] = true
	}
	if len(p.AllowedModels) > 0 {
		pol.allowModels = make(map[string]struct{}, len(p.AllowedModels))
		for _, m := range p.AllowedModels {
			if knownModel != nil && !knownModel(m) {
				return bad("allowed_models", "unknown model %q", m)
			}
			pol.allowModels[m] = struct{}{}
		}
	}
	if len(p.AllowedAdapters) > 0 {
		pol.allowAdapters = make(map[string]struct{}, len(p.AllowedAdapters))
		for _, a := range p.AllowedAdapters {
			pol.allowAdapters[a] = struct{}{}
		}
	}
	return pol, nil
}

// quota resolves a plan's quota field: 0 is the default, -1 no limit (0).
func quota(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Tenant declares one tenant: its plan and overrides.
type Tenant struct {
	ID        string   `yaml:"id"`
	Plan      string   `yaml:"plan"`
	Overrides Override `yaml:"overrides"`
}

// Book holds the effective policy of every tenant. It is immutable and safe for
// concurrent use.
type Book struct {
	byTenant map[string]*Policy
}

// NewBook resolves every tenant against the plans.
func NewBook(plans map[string]Plan, tenants []Tenant, knownModel func(string) bool) (*Book, error) {
	b := &Book{byTenant: make(map[string]*Policy, len(tenants))}
	for i, t := range tenants {
		if t.ID == "" || strings.ContainsAny(t.ID, " \t\n/") {
			return nil, fmt.Errorf("%w: tenants[%d]: id %q must be non-empty without spaces or slashes", ErrInvalid, i, t.ID)
		}
		if _, dup := b.byTenant[t.ID]; dup {
			return nil, fmt.Errorf("%w: tenants[%d]: tenant %q declared twice", ErrInvalid, i, t.ID)
		}
		plan, ok := plans[t.Plan]
		if !ok {
			names := make([]string, 0, len(plans))
			for n := range plans {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("%w: tenants[%d] (%s): unknown plan %q (plans: %s)", ErrInvalid, i, t.ID, t.Plan, strings.Join(names, ", "))
		}
		p, err := Resolve(t.ID, t.Plan, plan, t.Overrides, knownModel)
		if err != nil {
			return nil, err
		}
		b.byTenant[t.ID] = &p
	}
	return b, nil
}

// Resolve returns the tenant's effective policy, or false for an unknown tenant. The
// Policy must not be modified.
func (b *Book) Resolve(tenant string) (*Policy, bool) {
	p, ok := b.byTenant[tenant]
	return p, ok
}

// Tenants lists the tenant ids, sorted.
func (b *Book) Tenants() []string {
	out := make([]string, 0, len(b.byTenant))
	for id := range b.byTenant {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
