package model

import (
	"testing"

	"github.com/lmlite/lmlite/engine/kernels"
)

// TestAttnF32MinDefaultsWhereFast: a model's attention_f32_min_prompt of 0 means
// llama.cpp's threshold where the float32 kernels run on assembly and none
// elsewhere; -1 means none anywhere; a positive value is taken as it is.
func TestAttnF32MinDefaultsWhereFast(t *testing.T) {
	for _, c := range []struct {
		configured int
		fast       bool
		want       int
	}{
		{0, true, AttnF32MinPrompt},
		{0, false, 0},
		{-1, true, 0},
		{-1, false, 0},
		{-7, true, 0},
		{1, false, 1},
		{128, true, 128},
	} {
		if got := attnF32Min(c.configured, c.fast); got != c.want {
			t.Errorf("attnF32Min(%d, fast %v) = %d, want %d", c.configured, c.fast, got, c.want)
		}
	}
	// The exported rule asks the kernels about the model's head size.
	for _, hd := range []int{64, 128} {
		want := 0
		if kernels.FastAttnF32(hd) {
			want = AttnF32MinPrompt
		}
		if got := AttnF32MinPromptFor(0, hd); got != want {
			t.Errorf("AttnF32MinPromptFor(0, %d) = %d, want %d", hd, got, want)
		}
	}
}
