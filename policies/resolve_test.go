package policies

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"gopkg.in/yaml.v3"

	"github.com/lmlite/lmlite/tiers"
)

// TestResolveData runs testdata/resolve.txt: "book" takes plans and tenants in the
// config file's YAML and prints each tenant's effective policy (or the error);
// rewrite with `go test ./policies -rewrite`.
func TestResolveData(t *testing.T) {
	datadriven.RunTest(t, "testdata/resolve.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "book" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var in struct {
			Plans   map[string]Plan `yaml:"plans"`
			Tenants []Tenant        `yaml:"tenants"`
			Models  []string        `yaml:"models"`
		}
		dec := yaml.NewDecoder(strings.NewReader(d.Input))
		dec.KnownFields(true)
		if err := dec.Decode(&in); err != nil {
			return "yaml: " + err.Error()
		}
		known := func(m string) bool {
			for _, x := range in.Models {
				if x == m {
					return true
				}
			}
			return false
		}
		b, err := NewBook(in.Plans, in.Tenants, known)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				d.Fatalf(t, "NewBook: %v is not ErrInvalid", err)
			}
			return "error: " + err.Error()
		}
		var sb strings.Builder
		for _, id := range b.Tenants() {
			p, _ := b.Resolve(id)
			fmt.Fprintf(&sb, "%s (%s): rps=%g burst=%d tpm=%d conc=%d day=%v month=%v mode=%s share=%v weight=%g tiers=",
				p.Tenant, p.Plan, p.RequestsPerSecond, p.Burst, p.TokensPerMinute, p.MaxConcurrency,
				p.DailyBudget, p.MonthlyBudget, p.DefaultMode, p.SharePrefix, p.Weight)
			var ts []string
			for t := tiers.Fast; t <= tiers.Max; t++ {
				if p.AllowsTier(t) {
					ts = append(ts, t.String())
				}
			}
			sb.WriteString(strings.Join(ts, ","))
			var ms []string
			for _, m := range in.Models {
				if p.AllowsModel(m) {
					ms = append(ms, m)
				}
			}
			fmt.Fprintf(&sb, " models=%s\n", strings.Join(ms, ","))
		}
		return sb.String()
	})
}
