package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine/model"
)

func init() {
	register("score", "next-token distributions of a token sequence (teacher forcing)", func(args []string) error {
		fs := newFlags("score")
		path := fs.String("model", "", "GGUF model (required)")
		idsArg := fs.String("ids", "", "comma-separated token ids, BOS included if wanted (required)")
		top := fs.Int("top", 10, "most likely tokens to print per step")
		ctx := fs.Int("ctx", 0, "context size (0: the model's context length)")
		attnF32 := fs.Int("attention-f32-min-prompt", 0, "sequences of at least this many ids run the float32 attention, as a request of that prompt would be served (a model's attention_f32_min_prompt); 0: the server's default (64 on AVX-512 with head size 64, else none); -1: binary16 for all (llama.cpp's one-query numerics)")
		var loras loraFlag
		fs.Var(&loras, "lora", loraUsage)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *path == "" || *idsArg == "" {
			return fmt.Errorf("--model and --ids are required")
		}
		if *top < 1 {
			return fmt.Errorf("--top must be at least 1")
		}
		var ids []int32
		for _, f := range strings.Split(*idsArg, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return fmt.Errorf("--ids: %q is not a token id", f)
			}
			ids = append(ids, int32(id))
		}
		m, err := model.Open(*path)
		if err != nil {
			return err
		}
		defer m.Close()
		ls, err := loras.open(m)
		if err != nil {
			return err
		}
		defer func() {
			for _, l := range ls {
				l.Adapter.Close()
			}
		}()
		steps, err := score(m, ids, *top, *ctx, *attnF32, ls)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(struct {
			Steps []scoreStep `json:"steps"`
		}{steps})
	})
}

// scoreStep is the top of one next-token distribution: [id, probability] pairs.
type scoreStep struct {
	Top [][2]any `json:"top"`
}

// score runs ids through m as one batch and returns, for each position i, the top k
// of the distribution of the token after ids[0..i], in the attention mode the
// server gives a prompt of ids when the model's attention_f32_min_prompt is attnMin
// (model.AttnF32MinPromptFor): the prompt logprobs a request of it would get. The
// adapters loras, if any, apply to every position.
func score(m *model.Model, ids []int32, k, ctx, attnMin int, loras []model.LoRA) ([]scoreStep, error) {
	st := m.NewState(ctx)
	st.SetLoRA(loras)
	st.SetAttention(model.AttentionFor(len(ids), model.AttnF32MinPromptFor(attnMin, m.Config().HeadDim)))
	logits, err := st.Forward(ids, true)
	if err != nil {
		return nil, err
	}
	V := m.Config().Vocab
	steps := make([]scoreStep, len(ids))
	for i := range ids {
		for _, tp := range model.TopProbs(logits[i*V:(i+1)*V], k) {
			steps[i].Top = append(steps[i].Top, [2]any{tp.ID, tp.P})
		}
	}
	return steps, nil
}
