package gateway

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/usage"
)

// The dashboard's numbers have their thousands separated.
func TestDashboardNumberFormats(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{numText(0), "0"},
		{numText(999), "999"},
		{numText(1000), "1,000"},
		{numText(int64(1234567)), "1,234,567"},
		{numText(-12345), "-12,345"},
		{usdText(0), "$0"},
		{usdText(0.000078), "$0.000078"},
		{usdText(1234.5), "$1,234.5"},
		{usdText(1000000), "$1,000,000"},
		{usdText(-2500), "-$2,500"},
		{fixedText(1536, 1), "1,536.0"},
		{fixedText(12.25, 0), "12"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// hourly is a day of hourly buckets with cost (in dollars) spent in the first hour.
func hourly(day time.Time, cost float64) []usage.Bucket {
	bs := make([]usage.Bucket, 24)
	for i := range bs {
		bs[i].Start = day.Add(time.Duration(i) * time.Hour)
		bs[i].End = bs[i].Start.Add(time.Hour)
	}
	var r usage.Result
	r.Cost = money.USD(cost)
	bs[0].Results = []usage.Result{r}
	return bs
}

// topY is the least y (the highest point) of a chart's polyline.
func topY(t *testing.T, c chart) float64 {
	t.Helper()
	top := chartH
	for _, p := range strings.Fields(c.Points) {
		_, y, _ := strings.Cut(p, ",")
		v, err := strconv.ParseFloat(y, 64)
		if err != nil {
			t.Fatalf("point %q", p)
		}
		top = min(top, v)
	}
	return top
}

// A small spend against a large budget climbs the chart (the axis fits the spend and
// the budget is named above it); a spend near its budget shares the axis with the
// budget's line.
func TestSpendChartScalesTheAxisToTheData(t *testing.T) {
	day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	now := day.Add(90 * time.Minute)
	for _, c := range []struct {
		name          string
		spent, budget float64
		offChart      bool
	}{
		{"small spend, large budget", 0.001016, 10, true},
		{"small spend, no budget", 0.000078, 0, false},
		{"spend near the budget", 0.006, 0.01, false},
		{"spend over the budget", 0.03, 0.01, false},
	} {
		ch := spendChart(hourly(day, c.spent), c.budget, now, "15:04", 6)
		if top := topY(t, ch); top > chartH/2 {
			t.Errorf("%s: the line tops at y=%.1f of %.0f: flat", c.name, top, chartH)
		}
		if ch.MaxUSD < c.spent {
			t.Errorf("%s: axis to $%g under the spend $%g", c.name, ch.MaxUSD, c.spent)
		}
		if ch.OffChart != c.offChart {
			t.Errorf("%s: off chart %v, want %v", c.name, ch.OffChart, c.offChart)
		}
		if drawn := ch.Limit >= 0; drawn != (c.budget > 0 && !c.offChart) {
			t.Errorf("%s: budget line at %.1f", c.name, ch.Limit)
		}
		if len(ch.YTicks) == 0 || ch.YTicks[len(ch.YTicks)-1].Text != usdText(ch.MaxUSD) {
			t.Errorf("%s: y ticks %+v, want the axis's top %s", c.name, ch.YTicks, usdText(ch.MaxUSD))
		}
	}
}

// Load applies to a model not loaded, Unload to a ready one, neither while loading.
func TestLoadButtonsApplyToTheModelsState(t *testing.T) {
	for _, c := range []struct {
		st           engine.ModelState
		load, unload bool
	}{
		{engine.StateReady, false, true},
		{engine.StateUnloaded, true, false},
		{engine.StateFailed, true, false},
		{engine.StateLoading, false, false},
	} {
		if l, u := loadButtons(c.st); l != c.load || u != c.unload {
			t.Errorf("%s: load %v unload %v, want %v %v", c.st, l, u, c.load, c.unload)
		}
	}
}

// A tenant's counts past a thousand render with separators in the panel.
func TestDashboardPanelSeparatesThousands(t *testing.T) {
	roll := usage.NewMemory()
	ts := startServerWith(t, dashConfig, newFakeEngine(), Options{Usage: roll}, nil)
	roll.Add(usage.Event{Time: time.Now(), Tenant: "acme", Model: "big", Tier: "deep", Admitted: true, Status: 200,
		InputTokens: 1234567, OutputTokens: 45678, Cost: money.USD(1234.5)})
	web := browser(t)
	send(t, web, "POST", ts.url+"/dashboard/login", url.Values{"key": {ts.keys["acme"]}})
	_, body := send(t, web, "GET", ts.url+"/dashboard/panel", nil)
	for _, want := range []string{`id="total-input">1,234,567<`, `id="total-output">45,678<`, `id="total-cost">$1,234.5<`} {
		if !strings.Contains(body, want) {
			t.Errorf("the panel has no %s", want)
		}
	}
}
