package engine

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/engine/tokenizer"
	"github.com/lmlite/lmlite/engine/toolcall"
)

// This file holds what the engine's modes share: the in-process Block and the
// worker processes of engine/worker both serve the Block API, and a caller (the
// gateway) cannot tell them apart.

// Prep prepares requests for one model without its weights: the tokenizer, the chat
// template (with its tools support) and the length limit, read from the file's metadata. The worker mode's
// parent process tokenizes with it while the weights live in a child process.
type Prep struct {
	tok    *tokenizer.Tokenizer
	tmpl   *chat.Template
	maxLen int
	embeds bool
}

// OpenPrep reads a model's tokenizer, chat template and context length. mc.MaxModelLen
// is checked against the context length as New checks it.
func OpenPrep(mc ModelConfig) (*Prep, error) {
	mf, err := openModelFile(mc)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	return &Prep{tok: mf.tok, tmpl: mf.tmpl, maxLen: mf.maxLen, embeds: poolingOf(mf.File, mc) != model.PoolNone}, nil
}

// Embeddings reports whether Block.Embed serves this model (ModelStatus.Embeddings),
// also while it is not loaded.
func (p *Prep) Embeddings() bool { return p.embeds }

// MaxModelLen is the model's length limit (prompt + output tokens).
func (p *Prep) MaxModelLen() int { return p.maxLen }

// Tokenize is Block.Tokenize for this model.
func (p *Prep) Tokenize(text string) []int32 { return p.tok.Encode(text, p.tok.AddBOS(), true) }

// ChatTokens is Block.ChatTokens for this model.
func (p *Prep) ChatTokens(msgs []Message) ([]int32, error) { return chatTokens(p.tok, p.tmpl, msgs, 0) }

// TokenizeCapped is Block.TokenizeCapped for this model.
func (p *Prep) TokenizeCapped(text string, limit int) ([]int32, error) {
	return tokenizeCapped(p.tok, text, limit)
}

// ChatTokensCapped is Block.ChatTokensCapped for this model.
func (p *Prep) ChatTokensCapped(msgs []Message, tools []Tool, limit int) ([]int32, error) {
	return chatTokensTools(p.tok, p.tmpl, msgs, tools, limit)
}

// Check fails a request that can never run, as Block.Generate does at once: an empty
// prompt, a token outside the vocabulary, negative max tokens, or longer than the
// limit (ErrTooLong).
func (p *Prep) Check(modelID string, req Request) error {
	if len(req.Prompt) == 0 {
		return fmt.Errorf("engine: empty prompt (give at least BOS)")
	}
	for _, id := range req.Prompt {
		if id < 0 || int(id) >= p.tok.VocabSize() {
			return fmt.Errorf("engine: prompt token %d is outside the vocabulary of %d", id, p.tok.VocabSize())
		}
	}
	if req.MaxTokens < 0 {
		return fmt.Errorf("engine: max tokens %d is negative", req.MaxTokens)
	}
	if len(req.Prompt) >= p.maxLen || len(req.Prompt)+req.MaxTokens > p.maxLen {
		return fmt.Errorf("%w: %d prompt tokens + %d max tokens > max_model_len %d of model %s",
			ErrTooLong, len(req.Prompt), req.MaxTokens, p.maxLen, modelID)
	}
	return nil
}

// ChatTokensTools is Block.ChatTokensTools for this model.
func (p *Prep) ChatTokensTools(msgs []Message, tools []Tool) ([]int32, error) {
	return chatTokensTools(p.tok, p.tmpl, msgs, tools, 0)
}

// ToolSyntax is Block.ToolSyntax for this model.
func (p *Prep) ToolSyntax() toolcall.Syntax { return toolSyntax(p.tok, p.tmpl) }

// ToolGrammar is Block.ToolGrammar for this model, compiling its schema with compile
// (the caller's cache, as Block.CompileSchema is the Block's).
func (p *Prep) ToolGrammar(tools []Tool, compile func([]byte) (*grammar.Grammar, error)) (*grammar.Grammar, error) {
	return toolGrammar(p.ToolSyntax(), tools, compile)
}

// ToolsNative is Block.ToolsNative for this model.
func (p *Prep) ToolsNative() bool { return templateHasTools(p.tmpl.Source()) }
