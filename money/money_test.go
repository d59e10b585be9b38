package money

import "testing"

func TestCostRoundsUp(t *testing.T) {
	p := Price{PromptPer1K: USD(0.001), CompletionPer1K: USD(0.002)}
	cases := []struct {
		prompt, completion int
		want               Money
	}{
		{0, 0, 0},
		{1000, 0, USD(0.001)},
		{0, 1000, USD(0.002)},
		{1, 0, 1000}, // 1e6/1000 nano-dollars
		{1, 1, 3000},
		{0, 1, 2000},
	}
	for _, c := range cases {
		if got := p.Cost(c.prompt, c.completion); got != c.want {
			t.Errorf("Cost(%d, %d) = %d, want %d", c.prompt, c.completion, got, c.want)
		}
	}
	odd := Price{PromptPer1K: 1}
	if got := odd.Cost(1, 0); got != 1 { // 1/1000 of a nano-dollar rounds up to one
		t.Errorf("Cost rounds down: %d", got)
	}
	if USD(1.5).String() != "$1.5" || USD(0.25).Dollars() != 0.25 {
		t.Errorf("%s %v", USD(1.5), USD(0.25).Dollars())
	}
}
