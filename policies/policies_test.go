package policies

import (
	"errors"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tiers"
)

func ptr[T any](v T) *T { return &v }

func TestResolveOverrides(t *testing.T) {
	plans := map[string]Plan{
		"free": {RequestsPerSecond: 2, TokensPerMinute: 1000, MaxConcurrency: 2, DailyBudgetUSD: 1,
			AllowedTiers: []string{"fast", "balanced"}},
		"pro": {RequestsPerSecond: 50, Burst: 100, DailyBudgetUSD: 100, MonthlyBudgetUSD: 1000,
			DefaultTierMode: "deep", AllowedModels: []string{"a", "b"}, BatchMaxConcurrency: 16, AllowShortKeepAlive: true},
	}
	tenants := []Tenant{
		{ID: "acme", Plan: "free"},
		{ID: "pro", Plan: "pro", Overrides: Override{AllowShortKeepAlive: ptr(false)}},
		{ID: "big", Plan: "pro", Overrides: Override{
			Burst: ptr(7), DailyBudgetUSD: ptr(0.5), AllowedModels: &[]string{},
			AllowedTiers: &[]string{"max"}, SharePrefix: ptr(true), Weight: ptr(3.0), BatchMaxConcurrency: ptr(2)}},
	}
	b, err := NewBook(plans, tenants, func(m string) bool { return m == "a" || m == "b" })
	if err != nil {
		t.Fatal(err)
	}
	acme, ok := b.Resolve("acme")
	if !ok {
		t.Fatal("acme missing")
	}
	if acme.Burst != 2 || acme.DailyBudget != money.USD(1) || acme.DefaultMode != tiers.ModeBalanced || acme.Weight != 1 || acme.BatchConcurrency != 0 {
		t.Errorf("acme: %+v", acme)
	}
	if !acme.AllowsTier(tiers.Fast) || !acme.AllowsTier(tiers.Balanced) || acme.AllowsTier(tiers.Deep) || acme.AllowsTier(tiers.Max) {
		t.Errorf("acme tiers: %v", acme.AllowedTiers())
	}
	if !acme.AllowsModel("anything") {
		t.Error("acme: empty allowed_models must allow all")
	}
	big, _ := b.Resolve("big")
	if big.Burst != 7 || big.RequestsPerSecond != 50 || big.DailyBudget != money.USD(0.5) ||
		big.MonthlyBudget != money.USD(1000) || big.DefaultMode != tiers.ModeDeep || !big.SharePrefix || big.Weight != 3 || big.BatchConcurrency != 2 {
		t.Errorf("big: %+v", big)
	}
	if pro, _ := b.Resolve("pro"); acme.ShortKeepAlive || !big.ShortKeepAlive || pro.ShortKeepAlive {
		t.Errorf("allow_short_keep_alive: free plan %v, pro plan %v, overridden to false %v", acme.ShortKeepAlive, big.ShortKeepAlive, pro.ShortKeepAlive)
	}
	if !big.AllowsModel("c") { // the override emptied the list: all allowed
		t.Error("big: override to [] must allow all models")
	}
	if big.AllowsTier(tiers.Fast) || !big.AllowsTier(tiers.Max) {
		t.Errorf("big tiers: %v", big.AllowedTiers())
	}
	if _, ok := b.Resolve("nobody"); ok {
		t.Error("unknown tenant resolved")
	}
	if got := b.Tenants(); len(got) != 3 || got[0] != "acme" {
		t.Errorf("Tenants = %v", got)
	}
}

func TestInvalid(t *testing.T) {
	plans := map[string]Plan{"p": {}}
	cases := []struct {
		name    string
		tenants []Tenant
	}{
		{"unknown plan", []Tenant{{ID: "a", Plan: "q"}}},
		{"duplicate", []Tenant{{ID: "a", Plan: "p"}, {ID: "a", Plan: "p"}}},
		{"empty id", []Tenant{{ID: "", Plan: "p"}}},
		{"negative rps", []Tenant{{ID: "a", Plan: "p", Overrides: Override{RequestsPerSecond: ptr(-1.0)}}}},
		{"bad tier", []Tenant{{ID: "a", Plan: "p", Overrides: Override{AllowedTiers: &[]string{"huge"}}}}},
		{"fixed default", []Tenant{{ID: "a", Plan: "p", Overrides: Override{DefaultTierMode: ptr("fixed")}}}},
		{"unknown model", []Tenant{{ID: "a", Plan: "p", Overrides: Override{AllowedModels: &[]string{"zzz"}}}}},
		{"negative budget", []Tenant{{ID: "a", Plan: "p", Overrides: Override{MonthlyBudgetUSD: ptr(-2.0)}}}},
		{"negative batch concurrency", []Tenant{{ID: "a", Plan: "p", Overrides: Override{BatchMaxConcurrency: ptr(-1)}}}},
	}
	for _, c := range cases {
		_, err := NewBook(plans, c.tenants, func(m string) bool { return m == "a" })
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.name, err)
		}
	}
}

// TestAllowsServing: a model is allowed when the plan allows it and at least one tier
// it serves in; a model in no tier only when allowed_models names it (or the plan
// limits nothing).
func TestAllowsServing(t *testing.T) {
	deepOnly := [tiers.NumTiers]bool{tiers.Deep: true, tiers.Max: true}
	fast := [tiers.NumTiers]bool{tiers.Fast: true}
	var none [tiers.NumTiers]bool
	cases := []struct {
		name  string
		plan  Plan
		model string
		in    [tiers.NumTiers]bool
		want  bool
	}{
		{"open plan, tiered model", Plan{}, "m", deepOnly, true},
		{"open plan, tierless model", Plan{}, "m", none, true},
		{"tiers limited, model only in others", Plan{AllowedTiers: []string{"fast", "balanced"}}, "m", deepOnly, false},
		{"tiers limited, model in an allowed one", Plan{AllowedTiers: []string{"fast", "balanced"}}, "m", fast, true},
		{"tiers limited, tierless model not named", Plan{AllowedTiers: []string{"fast"}}, "m", none, false},
		{"tierless model named", Plan{AllowedTiers: []string{"fast"}, AllowedModels: []string{"m"}}, "m", none, true},
		{"named but its tiers forbidden", Plan{AllowedTiers: []string{"fast"}, AllowedModels: []string{"m"}}, "m", deepOnly, false},
		{"not named", Plan{AllowedModels: []string{"x"}}, "m", fast, false},
		{"not named, tierless", Plan{AllowedModels: []string{"x"}}, "m", none, false},
	}
	for _, c := range cases {
		p, err := Resolve("t", "p", c.plan, Override{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AllowsServing(c.model, c.in); got != c.want {
			t.Errorf("%s: AllowsServing = %v, want %v", c.name, got, c.want)
		}
	}
}

// The Batch API's quotas: a plan's 0 takes the default, -1 is no limit (0 in the
// Policy), an override replaces the plan's, and below -1 is refused naming the field.
func TestBatchQuotasDefaultAndUnlimited(t *testing.T) {
	one := 1
	b, err := NewBook(map[string]Plan{
		"std":  {},
		"free": {FilesMaxBytes: -1, FilesMaxCount: 3, FileUploadsPerMinute: -1, BatchCreatesPerMinute: 6, BatchMaxUnfinished: -1},
	}, []Tenant{{ID: "a", Plan: "std"}, {ID: "b", Plan: "free", Overrides: Override{BatchMaxUnfinished: &one}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := b.Resolve("a")
	if a.FilesMaxBytes != DefaultFilesMaxBytes || a.FilesMaxCount != DefaultFilesMaxCount || a.FileUploadsPerMinute != DefaultFileUploadsPerMinute ||
		a.BatchCreatesPerMinute != DefaultBatchCreatesPerMinute || a.BatchMaxUnfinished != DefaultBatchMaxUnfinished {
		t.Fatalf("defaults: %+v", a)
	}
	p, _ := b.Resolve("b")
	if p.FilesMaxBytes != 0 || p.FilesMaxCount != 3 || p.FileUploadsPerMinute != 0 || p.BatchCreatesPerMinute != 6 || p.BatchMaxUnfinished != 1 {
		t.Fatalf("free: %+v", p)
	}
	_, err = NewBook(map[string]Plan{"x": {FilesMaxCount: -2}}, []Tenant{{ID: "a", Plan: "x"}}, nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "files_max_count") {
		t.Fatalf("files_max_count -2: %v", err)
	}
}

// The stored responses' quotas: a plan's 0 takes the default, -1 is no limit (0 in
// the Policy), an override replaces the plan's, and below -1 is refused naming it.
func TestResponsesQuotasDefaultAndUnlimited(t *testing.T) {
	five := int64(5)
	b, err := NewBook(map[string]Plan{
		"std":  {},
		"free": {ResponsesMaxCount: -1, ResponsesMaxBytes: 1000},
	}, []Tenant{{ID: "a", Plan: "std"}, {ID: "b", Plan: "free"}, {ID: "c", Plan: "free", Overrides: Override{ResponsesMaxCount: &five}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tenant       string
		count, bytes int64
	}{{"a", DefaultResponsesMaxCount, DefaultResponsesMaxBytes}, {"b", 0, 1000}, {"c", 5, 1000}} {
		p, _ := b.Resolve(c.tenant)
		if p.ResponsesMaxCount != c.count || p.ResponsesMaxBytes != c.bytes {
			t.Errorf("%s: %d, %d; want %d, %d", c.tenant, p.ResponsesMaxCount, p.ResponsesMaxBytes, c.count, c.bytes)
		}
	}
	_, err = NewBook(map[string]Plan{"x": {ResponsesMaxBytes: -2}}, []Tenant{{ID: "a", Plan: "x"}}, nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "responses_max_bytes") {
		t.Fatalf("responses_max_bytes -2: %v", err)
	}
}

// TestAllowsAdapter: an empty allowed_adapters allows every adapter, a list only
// its own, and a tenant's override replaces the plan's.
func TestAllowsAdapter(t *testing.T) {
	all, err := Resolve("t", "p", Plan{}, Override{}, nil)
	if err != nil || !all.AllowsAdapter("x") {
		t.Fatalf("empty allowed_adapters: %v, allows x %v", err, all.AllowsAdapter("x"))
	}
	some, _ := Resolve("t", "p", Plan{AllowedAdapters: []string{"a"}}, Override{}, nil)
	if !some.AllowsAdapter("a") || some.AllowsAdapter("b") {
		t.Error("allowed_adapters [a] must allow a and only a")
	}
	over, _ := Resolve("t", "p", Plan{AllowedAdapters: []string{"a"}}, Override{AllowedAdapters: &[]string{"b"}}, nil)
	if over.AllowsAdapter("a") || !over.AllowsAdapter("b") {
		t.Error("the override's [b] must replace the plan's [a]")
	}
}
