package policies

import (
	"errors"
	"testing"

	"github.com/lmlite/lmlite/tiers"
)

func ptr[T any](v T) *T { return &v }

func TestResolveOverrides(t *testing.T) {
	plans := map[string]Plan{
		"free": {RequestsPerSecond: 2, TokensPerMinute: 1000, MaxConcurrency: 2, DailyBudgetUSD: 1,
			AllowedTiers: []string{"fast", "balanced"}},
		"pro": {RequestsPerSecond: 50, Burst: 100, DailyBudgetUSD: 100, MonthlyBudgetUSD: 1000,
			DefaultTierMode: "deep", AllowedModels: []string{"a", "b"}},
	}
	tenants := []Tenant{
		{ID: "acme", Plan: "free"},
		{ID: "big", Plan: "pro", Overrides: Override{
			Burst: ptr(7), DailyBudgetUSD: ptr(0.5), AllowedModels: &[]string{},
			AllowedTiers: &[]string{"max"}, SharePrefix: ptr(true), Weight: ptr(3.0)}},
	}
	b, err := NewBook(plans, tenants, func(m string) bool { return m == "a" || m == "b" })
	if err != nil {
		t.Fatal(err)
	}
	acme, ok := b.Resolve("acme")
	if !ok {
		t.Fatal("acme missing")
	}
	if acme.Burst != 2 || acme.DailyBudget != tiers.USD(1) || acme.DefaultMode != tiers.ModeBalanced || acme.Weight != 1 {
		t.Errorf("acme: %+v", acme)
	}
	if !acme.AllowsTier(tiers.Fast) || !acme.AllowsTier(tiers.Balanced) || acme.AllowsTier(tiers.Deep) || acme.AllowsTier(tiers.Max) {
		t.Errorf("acme tiers: %v", acme.AllowedTiers())
	}
	if !acme.AllowsModel("anything") {
		t.Error("acme: empty allowed_models must allow all")
	}
	big, _ := b.Resolve("big")
	if big.Burst != 7 || big.RequestsPerSecond != 50 || big.DailyBudget != tiers.USD(0.5) ||
		big.MonthlyBudget != tiers.USD(1000) || big.DefaultMode != tiers.ModeDeep || !big.SharePrefix || big.Weight != 3 {
		t.Errorf("big: %+v", big)
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
	if got := b.Tenants(); len(got) != 2 || got[0] != "acme" {
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
	}
	for _, c := range cases {
		_, err := NewBook(plans, c.tenants, func(m string) bool { return m == "a" })
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.name, err)
		}
	}
}
