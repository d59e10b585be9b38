package engine

import (
	"fmt"
	"slices"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/engine/sched"
	"github.com/lmlite/lmlite/engine/tokenizer"
	"github.com/lmlite/lmlite/kvcache"
)

// Draft models (spec.Config.DraftModel): another configured model with the same
// vocabulary drafts for this one, greedily, the last draft source after the
// prediction, prompt lookup and the tenant's pool. Each replica of the target maps
// the draft model's weights and keeps a KV pool of its own for it (draftConfig);
// before a step, the sequences that draft from it run through the draft model
// together, one batched draft step per drafted position (drafter.draft), and the
// target's step verifies the drafts as any other's (speculate.go). Whatever the
// draft model proposes, the output is the target's alone, bit for bit: a draft is
// accepted only where it is the token the target samples there.

// draftConfig is what a replica needs to run its model's draft model.
type draftConfig struct {
	id, path string
	kv       kvcache.Config
	fileSize int64
}

// bytes is the memory a replica's draft model takes: its file (mapped by each
// replica) and its KV pool.
func (c *draftConfig) bytes() int64 { return c.fileSize + c.kv.Bytes() }

// newDraftConfig checks the draft model of mc (its id in the Block's models, not
// mc itself, with tok's vocabulary: the same tokens with the same texts, and a
// context that holds mc's longest sequence and a draft) and sizes its KV pool for
// mc's sequences and their drafts.
func newDraftConfig(models []ModelConfig, mc ModelConfig, tok *tokenizer.Tokenizer) (*draftConfig, error) {
	id := mc.Speculative.DraftModel
	if id == mc.ID {
		return nil, configErrorf("engine: model %s: speculative.draft_model is the model itself", mc.ID)
	}
	k := slices.IndexFunc(models, func(m ModelConfig) bool { return m.ID == id })
	if k < 0 {
		return nil, configErrorf("engine: model %s: speculative.draft_model %q is not a configured model", mc.ID, id)
	}
	dmc := models[k]
	f, err := gguf.Open(dmc.Path)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: draft model %s: %w", mc.ID, id, err)
	}
	defer f.Close()
	dtok, _, dcfg, err := readMeta(f, id)
	if err != nil {
		return nil, fmt.Errorf("engine: model %s: draft model: %w", mc.ID, err)
	}
	if err := sameVocab(tok, dtok); err != nil {
		return nil, configErrorf("engine: model %s: speculative.draft_model %s: %w", mc.ID, id, err)
	}
	if need := mc.MaxModelLen + mc.Speculative.Max(); dcfg.Context < need {
		return nil, configErrorf("engine: model %s: speculative.draft_model %s: its context length %d is below the model's max_model_len %d and a draft of %d (lower max_model_len)",
			mc.ID, id, dcfg.Context, mc.MaxModelLen, mc.Speculative.Max())
	}
	kc := kvcache.Config{Layers: dcfg.Layers, KVHeads: dcfg.KVHeads, HeadDim: dcfg.HeadDim, BlockTokens: kvBlockTokens}
	if kc.TypeK, kc.TypeV, err = kvTypes(dmc, dcfg.HeadDim); err != nil {
		return nil, err
	}
	kc.Blocks = kc.BlocksFor(mc.MaxModelLen+1+mc.Speculative.Max(), mc.MaxModelConcurrency, 0)
	return &draftConfig{id: id, path: dmc.Path, kv: kc, fileSize: f.Size()}, nil
}

// sameVocab reports how a draft model's vocabulary differs from its target's: the
// number of tokens, or the first token whose text differs.
func sameVocab(t, d *tokenizer.Tokenizer) error {
	if t.VocabSize() != d.VocabSize() {
		return fmt.Errorf("the vocabularies differ: %d tokens in the draft model, %d in the model", d.VocabSize(), t.VocabSize())
	}
	for id := range int32(t.VocabSize()) {
		if a, b := t.TokenText(id), d.TokenText(id); a != b {
			return fmt.Errorf("the vocabularies differ: token %d is %q in the draft model, %q in the model", id, b, a)
		}
	}
	return nil
}

// drafter is a replica's draft model, owned by its loop.
type drafter struct {
	f     *gguf.File
	batch *model.Batch
	pool  *kvcache.Pool
	seqs  map[sched.ID]*draftSeq
	chunk int         // the most tokens a draft run's first step computes (the target's sched.Config.StepTokens)
	queue []*draftSeq // the sequences drafting in this step
	work  []*draftSeq // draft's buffer
	items []model.Item
}

// draftSeq is one sequence's state in the draft model.
type draftSeq struct {
	id   sched.ID
	kv   *kvcache.Seq
	toks []int32 // the tokens whose rows kv holds, in order
	job  *job
	want int // the drafts it asks for in this step
}

// newDrafter maps the draft model and makes its KV pool; chunk is the most tokens
// a draft run's first step computes.
func newDrafter(c *draftConfig, chunk int) (*drafter, error) {
	f, err := gguf.Open(c.path)
	if err != nil {
		return nil, fmt.Errorf("draft model %s: %w", c.id, err)
	}
	m, err := model.Load(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("draft model %s: %w", c.id, err)
	}
	pool, err := kvcache.New(c.kv)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("draft model %s: %w", c.id, err)
	}
	return &drafter{f: f, batch: m.NewBatch(), pool: pool, seqs: map[sched.ID]*draftSeq{}, chunk: chunk}, nil
}

// close releases the sequences, the pool and the mapping.
func (d *drafter) close() {
	for id, s := range d.seqs {
		s.kv.Release()
		delete(d.seqs, id)
	}
	d.pool.Close()
	d.f.Close()
}

// forget drops the draft state of sequences that are no longer live.
func (d *drafter) forget(live map[sched.ID]*job) {
	for id, s := range d.seqs {
		if live[id] != s.job {
			s.kv.Release()
			delete(d.seqs, id)
		}
	}
}

// ask queues sequence id (job j) for want drafts in this step's draft run.
func (d *drafter) ask(id sched.ID, j *job, want int) {
	s := d.seqs[id]
	if s == nil {
		s = &draftSeq{id: id, kv: d.pool.NewSeq(""), job: j}
		d.seqs[id] = s
	}
	s.want = want
	d.queue = append(d.queue, s)
}

// draft runs the queued sequences through the draft model, batched: the first
// draft step computes each one's tokens the draft model has not seen (rolling back
// its rejected drafts first: its KV keeps the longest prefix it shares with the
// sequence), each further step one drafted token, and each draft is the draft
// model's greedy token. The drafts go to each job's draft, and their number to
// set (the scheduler's SetDraft); a sequence the draft pool has no room for drafts
// fewer or none. The first step computes at most chunk tokens, all sequences
// together, as the target's step does its prefill chunks: a sequence the draft
// model has not seen with a long prompt (a new one, or one whose prefix the
// target found cached) catches up over several steps, drafting nothing until it
// has, rather than stalling the batch behind one long draft-model prefill.
func (d *drafter) draft(set func(id sched.ID, n int)) {
	defer func() {
		for _, s := range d.queue {
			set(s.id, len(s.job.draft))
		}
		clear(d.queue)
		d.queue = d.queue[:0]
	}()
	queue := append(d.work[:0], d.queue...)
	defer func() { clear(queue[:cap(queue)]); d.work = queue[:0] }()
	budget := d.chunk // the first step's tokens, all sequences together
	for step := 0; len(queue) > 0; step++ {
		items := d.items[:0]
		n := 0
		for _, s := range queue {
			toks := s.job.tokens
			var it model.Item
			if step == 0 {
				common := min(commonPrefix(s.toks, toks), len(toks)-1) // at least the last token to compute
				if budget <= 0 {
					continue // the step's tokens are spent: no drafts this time
				}
				end := min(len(toks), common+budget)
				budget -= end - common
				s.kv.Truncate(common)
				s.toks = append(s.toks[:common], toks[common:end]...)
				it = model.Item{KV: s.kv, Start: common, Tokens: toks[common:end], Logits: 1}
				if end < len(toks) {
					it.Logits = 0 // a chunk of the prompt: drafts once it has all of it
				}
			} else {
				last := s.job.draft[len(s.job.draft)-1]
				it = model.Item{KV: s.kv, Start: len(s.toks), Tokens: []int32{last}, Logits: 1}
				s.toks = append(s.toks, last)
			}
			if err := s.kv.Grow(len(s.toks)); err != nil {
				s.toks = s.toks[:it.Start] // nothing written: try again next step
				continue
			}
			items = append(items, it)
			queue[n] = s
			n++
		}
		queue = queue[:n]
		d.items = items
		if len(items) == 0 {
			break
		}
		out, err := d.batch.Forward(items)
		clear(d.items)
		if err != nil {
			for _, s := range queue { // no drafts this step; the KV is rolled back by the next
				s.job.draft = s.job.draft[:0]
			}
			return
		}
		n = 0
		for k, s := range queue {
			if len(s.toks) < len(s.job.tokens) {
				continue // still catching up with its prompt (step 0's chunk)
			}
			s.job.draft = append(s.job.draft, greedy(out[k]))
			if len(s.job.draft) < s.want {
				queue[n] = s
				n++
			}
		}
		queue = queue[:n]
	}
}

// greedy is the row's highest logit's token (the lowest id among equals).
func greedy(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
