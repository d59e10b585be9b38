package chat

import (
	"fmt"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// generationBlock is transformers' {% generation %} ... {% endgeneration %}
// (its AssistantTracker extension, which marks the assistant's tokens for training
// masks): rendering, it writes its body as it is. Phi-4-reasoning's and rnj-1's
// templates use it.
type generationBlock struct {
	wrapper *nodes.Wrapper
}

func (g *generationBlock) Position() *tokens.Token { return g.wrapper.Position() }

func (g *generationBlock) String() string {
	t := g.Position()
	return fmt.Sprintf("GenerationControlStructure(Line=%d Col=%d)", t.Line, t.Col)
}

func (g *generationBlock) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.ExecuteWrapper(g.wrapper)
}

func parseGeneration(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	if !args.Stream().End() {
		return nil, args.Error("generation takes no arguments", nil)
	}
	wrapper, _, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	return &generationBlock{wrapper: wrapper}, nil
}
