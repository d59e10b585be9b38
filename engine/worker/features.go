package worker

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/lmlite/lmlite/engine/api"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/toolcall"
)

// This file holds the Pool's side of the gateway's Features (structured outputs,
// tools, n > 1, embeddings), with Block's semantics: grammars are compiled and
// prompts rendered in the parent (engine.Prep) and cross to the worker in their wire
// form; n choices and embeddings run in the worker's Block.

// CompileSchema is Block.CompileSchema, done in the parent: the same text returns the
// same Grammar, which crosses to the worker in its compiled form (grammar's
// MarshalJSON) inside the submit frame's request.
func (p *Pool) CompileSchema(schema []byte) (*grammar.Grammar, error) {
	return p.schemas.Compile(schema)
}

// ChatTokensTools is Block.ChatTokensTools, done in the parent.
func (p *Pool) ChatTokensTools(modelID string, msgs []api.Message, tools []api.Tool) ([]int32, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.ChatTokensTools(msgs, tools)
}

// ToolSyntax is Block.ToolSyntax, done in the parent.
func (p *Pool) ToolSyntax(modelID string) (toolcall.Syntax, error) {
	m, ok := p.models[modelID]
	if !ok {
		return 0, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.ToolSyntax(), nil
}

// ToolGrammar is Block.ToolGrammar, done in the parent.
func (p *Pool) ToolGrammar(modelID string, tools []api.Tool) (*grammar.Grammar, error) {
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	return m.prep.ToolGrammar(tools, p.CompileSchema)
}

// GenerateN is Block.GenerateN run in the worker (one submit-n frame): the worker's
// Block starts choice 0, and the others once it has its first token, so they share
// its prompt's KV blocks through the prefix cache; choice i is sampled with
// api.ChoiceSeed(req.Sampling.Seed, i). Each choice streams back under its own
// request id. A request that can never run fails at once; a worker crash ends every
// choice with an error matching api.ErrRestarting.
func (p *Pool) GenerateN(ctx context.Context, modelID string, req api.Request, n int) ([]*api.Stream, error) {
	if n < 1 || n > api.MaxChoices {
		return nil, fmt.Errorf("engine: n %d is outside [1, %d]", n, api.MaxChoices)
	}
	m, ok := p.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	if err := m.prep.Check(modelID, req); err != nil {
		return nil, err
	}
	pr, cold, err := m.g.acquire(ctx, modelID)
	if err != nil {
		return nil, err
	}
	streams := make([]*api.Stream, n)
	for i := range streams {
		streams[i] = api.NewStream()
	}
	cs, ids, err := pr.beginN(fSubmitN, submitMsg{Model: modelID, Req: req, N: n}, streams)
	if err == nil {
		err = <-cs[0].answer // choice 0 accepted (the worker accepts all n at once), or not
	}
	if err != nil {
		pr.drop(ids)
		m.g.release(modelID)
		return nil, err
	}
	// The worker accepts the other choices at once after choice 0; a choice whose
	// acceptance is an error (the worker died in between) ends with it.
	for i := 1; i < n; i++ {
		if err := <-cs[i].answer; err != nil {
			cs[i].box.finish(api.Usage{}, err)
		}
	}
	var left atomic.Int32
	left.Store(int32(n))
	for i := range n {
		s := streams[i]
		go func() {
			u, err := forward(ctx, pr, ids[i], cs[i])
			if left.Add(-1) == 0 {
				m.g.releaseKeep(modelID, req.KeepAlive)
			}
			if i == 0 {
				u.ColdStart += cold
			}
			s.Finish(u, err)
		}()
	}
	return streams, nil
}

// Embed is Block.Embed run in the worker (an embed frame answered by an embeddings
// frame), with its errors (api.ErrNoEmbeddings, ErrTooLong, ErrQueueFull ...
// match across the socket). A cancelled context cancels it in the worker.
func (p *Pool) Embed(ctx context.Context, modelID string, req api.EmbedRequest) (api.Embeddings, error) {
	m, ok := p.models[modelID]
	if !ok {
		return api.Embeddings{}, fmt.Errorf("%w: %q", api.ErrUnknownModel, modelID)
	}
	if !m.prep.Embeddings() { // at once, without starting a stopped worker
		return api.Embeddings{}, fmt.Errorf("%w: %s (set embeddings: true in its model config)", api.ErrNoEmbeddings, modelID)
	}
	pr, _, err := m.g.acquire(ctx, modelID)
	if err != nil {
		return api.Embeddings{}, err
	}
	defer m.g.release(modelID)
	c, id, err := pr.begin(fEmbed, embedMsg{Model: modelID, Req: req}, nil)
	if err != nil {
		return api.Embeddings{}, err
	}
	select {
	case err = <-c.answer:
	case <-ctx.Done():
		pr.cancel(id)
		if err = <-c.answer; err != nil { // the worker ends it at its next step, or the worker dies
			err = ctx.Err()
		}
	}
	if err != nil {
		return api.Embeddings{}, err
	}
	return c.emb, nil
}
