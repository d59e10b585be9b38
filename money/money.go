// Package money is lmlite's unit of account: Money, an exact integer amount of
// nano-US-dollars, and Price, a model's price per 1000 tokens. It is a leaf package:
// the tenancy ledger, the policies' budgets and the tier router share it without
// depending on each other.
package money

import (
	"math"
	"strconv"
)

// Money is an amount in nano-US-dollars (1e-9 USD): integer so that reservations and
// settlements add up exactly. The zero value is no money.
type Money int64

// USD converts dollars to Money, rounding to the nearest nano-dollar.
func USD(d float64) Money { return Money(math.Round(d * 1e9)) }

// Dollars converts Money to dollars.
func (m Money) Dollars() float64 { return float64(m) / 1e9 }

// String formats the amount in dollars.
func (m Money) String() string { return "$" + strconv.FormatFloat(m.Dollars(), 'f', -1, 64) }

// Price is a model's price per 1000 prompt and completion tokens. The zero value is
// free.
type Price struct {
	PromptPer1K     Money
	CompletionPer1K Money
}

// Cost is the price of prompt and completion tokens, rounded up to a whole nano-dollar.
func (p Price) Cost(prompt, completion int) Money {
	n := int64(prompt)*int64(p.PromptPer1K) + int64(completion)*int64(p.CompletionPer1K)
	return Money((n + 999) / 1000)
}
