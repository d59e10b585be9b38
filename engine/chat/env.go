package chat

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The environment is built once and shared by every template: gonja's sets are
// read-only after construction (their lookups lock), and everything per render lives
// in the render's context.
var (
	hfConfig    = newConfig()
	environment = newEnvironment()
)

// newConfig configures the lexer and parser as transformers configures jinja2.
func newConfig() *config.Config {
	c := config.New()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	c.AutoEscape = false
	c.StrictUndefined = false
	return c
}

// allowedStatements are the control structures a chat template may use. extends,
// include, import and from are left out: a chat template is one self-contained
// string and must not read anything else.
var allowedStatements = []string{
	"autoescape", "block", "filter", "for", "if", "macro", "raw", "set", "with", "do",
	"break", "continue", "call", "trans",
}

func newEnvironment() *exec.Environment {
	statements := map[string]parser.ControlStructureParser{}
	for _, name := range allowedStatements {
		p, ok := controlStructures.All.Get(name)
		if !ok {
			panic("chat: gonja lacks the control structure " + name)
		}
		statements[name] = p
	}
	statements["for"] = guardedFor(statements["for"])
	statements["macro"] = guardedMacro(statements["macro"])
	statements["generation"] = parseGeneration

	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if err := filters.Replace("tojson", filterToJSON); err != nil {
		panic(err)
	}
	if err := filters.Replace("items", filterItems); err != nil {
		panic(err)
	}
	if err := filters.Replace("dictsort", filterDictSort); err != nil {
		panic(err)
	}
	guardFilters(filters)

	globals := map[string]any{}
	for _, name := range []string{"cycler", "dict", "joiner", "namespace"} {
		v, ok := builtins.GlobalFunctions.Get(name)
		if !ok {
			panic("chat: gonja lacks the global " + name)
		}
		globals[name] = v
	}
	globals["range"] = safeRange
	globals["raise_exception"] = raiseException
	globals["strftime_now"] = strftimeNow
	globals[fnGetItem] = getItem
	globals[fnMul] = mul
	globals[fnPow] = pow
	globals[fnAdd] = add
	globals[fnConcat] = concat
	globals[fnTick] = tick
	globals[fnNoCycle] = noCycle
	ctx := exec.NewContext(globals)

	tests := exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests)
	if err := tests.Replace("true", testTrue); err != nil {
		panic(err)
	}
	if err := tests.Replace("false", testFalse); err != nil {
		panic(err)
	}

	return &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             tests,
		ControlStructures: exec.NewControlStructureSet(statements),
		Methods:           newMethods(),
	}
}

func compile(src string) (tpl *exec.Template, err error) {
	defer func() {
		if p := recover(); p != nil {
			tpl, err = nil, fmt.Errorf("%w: parser panic: %v", ErrTemplate, p)
		}
	}()
	src = rewriteConditionals(src)
	loader, err := newLoader(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	tpl, err = exec.NewTemplate(rootName, hfConfig, loader, environment)
	if err != nil {
		msg := err.Error()
		// gonja quotes the whole source in its message; keep the reason only.
		if i := strings.LastIndex(msg, "': "); i >= 0 && strings.HasPrefix(msg, "failed to parse template") {
			msg = msg[i+3:]
		}
		return nil, fmt.Errorf("%w: %s", ErrTemplate, msg)
	}
	rewriteTree(tpl.Root())
	return tpl, nil
}

// raiseException is transformers' raise_exception(message): the render fails.
func raiseException(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	msg := ""
	if len(params.Args) > 0 {
		msg = params.Args[0].String()
	}
	return exec.AsValue(raise(fmt.Errorf("%w: %s", ErrException, msg)))
}

// strftimeNow is transformers' strftime_now(format) on the template's clock.
func strftimeNow(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	if len(params.Args) != 1 || !params.Args[0].IsString() {
		return exec.AsValue(fmt.Errorf("%w: strftime_now takes one format string", ErrRender))
	}
	b := budgetOf(e.Environment.Context)
	if b == nil {
		return exec.AsValue(fmt.Errorf("%w: no clock", ErrRender))
	}
	return exec.AsValue(strftime(params.Args[0].String(), b.now()))
}

// safeRange is range() with jinja's sandbox limit of MaxRange items. Unlike gonja's
// own it returns a list, not a channel fed by a goroutine that leaks when the
// iteration stops early.
func safeRange(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	var start, stop, step = 0, 0, 1
	for _, a := range params.Args {
		if !a.IsInteger() {
			return exec.AsValue(fmt.Errorf("%w: range takes integers", ErrRender))
		}
	}
	switch len(params.Args) {
	case 1:
		stop = params.Args[0].Integer()
	case 2:
		start, stop = params.Args[0].Integer(), params.Args[1].Integer()
	case 3:
		start, stop, step = params.Args[0].Integer(), params.Args[1].Integer(), params.Args[2].Integer()
	default:
		return exec.AsValue(fmt.Errorf("%w: range takes 1 to 3 integers", ErrRender))
	}
	if step == 0 {
		return exec.AsValue(fmt.Errorf("%w: range step is 0", ErrRender))
	}
	var n int64
	if step > 0 && stop > start {
		n = (int64(stop) - int64(start) + int64(step) - 1) / int64(step)
	} else if step < 0 && stop < start {
		n = (int64(start) - int64(stop) - int64(step) - 1) / -int64(step)
	}
	if n > MaxRange {
		return exec.AsValue(raise(fmt.Errorf("%w: range of %d items, more than %d", ErrTooLong, n, MaxRange)))
	}
	out := make([]any, n)
	for i := range out {
		out[i] = start + i*step
	}
	return exec.AsValue(out)
}

// guardedFor wraps the for statement so that every iteration takes a step from the
// render's budget: a tick statement is put first in the loop body.
func guardedFor(inner parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := inner(p, args)
		if err != nil {
			return nil, err
		}
		f, ok := cs.(*controlStructures.ForControlStructure)
		if !ok || f.BodyWrapper == nil {
			return nil, fmt.Errorf("chat: unexpected for statement %T", cs)
		}
		if f.Recursive {
			// Each level of loop(...) nests the context one deeper and gonja
			// looks names up through every level: deep recursion is quadratic
			// and has no hook to bound it. Chat templates recurse with macros.
			return nil, errors.New("chat: recursive for loops are not supported")
		}
		tick := &nodes.ControlStructureBlock{Location: f.BodyWrapper.Location, Name: "tick", ControlStructure: tickStatement{loc: f.BodyWrapper.Location}}
		f.BodyWrapper.Nodes = append([]nodes.Node{tick}, f.BodyWrapper.Nodes...)
		if f.IfCondition != nil {
			f.IfCondition = call(fnTick, f.BodyWrapper.Location, f.IfCondition)
		}
		return f, nil
	}
}

type tickStatement struct{ loc *tokens.Token }

func (t tickStatement) Position() *tokens.Token { return t.loc }
func (t tickStatement) String() string          { return "tick" }
func (t tickStatement) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	if b := budgetOf(r.Environment.Context); b != nil {
		return b.step()
	}
	return nil
}

// guardedMacro wraps macro definitions so that each call takes a step and recursion
// stops at MaxMacroDepth (unbounded recursion would overflow the goroutine's stack,
// which Go cannot recover from).
func guardedMacro(inner parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := inner(p, args)
		if err != nil {
			return nil, err
		}
		m, ok := cs.(*controlStructures.MacroControlStructure)
		if !ok {
			return nil, fmt.Errorf("chat: unexpected macro statement %T", cs)
		}
		return &macroStatement{m}, nil
	}
}

type macroStatement struct {
	*controlStructures.MacroControlStructure
}

func (m *macroStatement) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	fn, err := exec.MacroNodeToFunc(m.Macro, r)
	if err != nil {
		return fmt.Errorf("%w: macro %s: %w", ErrRender, m.Name, err)
	}
	b := budgetOf(r.Environment.Context)
	guarded := exec.Macro(func(params *exec.VarArgs) *exec.Value {
		if b != nil {
			if err := b.step(); err != nil {
				return exec.AsValue(err)
			}
			if b.depth >= MaxMacroDepth {
				b.fail(fmt.Errorf("%w: macro recursion deeper than %d", ErrTooLong, MaxMacroDepth))
				return exec.AsValue(b.err)
			}
			b.depth++
			defer func() { b.depth-- }()
		}
		return fn(params)
	})
	r.Environment.Context.Set(m.Name, guarded)
	return nil
}

// checkNesting rejects templates nested deeper than MaxNesting: brackets, and
// statements with a body. gonja parses and renders them by recursion.
func checkNesting(src string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: lexer panic: %v", ErrTemplate, p)
		}
	}()
	s := tokens.LexAll(src, hfConfig)
	depth, inBlock, blockName, blockAssign := 0, false, "", false
	for ; !s.End(); s.Next() {
		tok := s.Current()
		switch tok.Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth++
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			depth--
		case tokens.BlockBegin:
			inBlock, blockName, blockAssign = true, "", false
		case tokens.Name:
			if inBlock && blockName == "" {
				blockName = tok.Val
				switch {
				case strings.HasPrefix(blockName, "end"):
					depth--
				case blockName == "if" || blockName == "for" || blockName == "macro" || blockName == "call" ||
					blockName == "filter" || blockName == "with" || blockName == "block" ||
					blockName == "autoescape" || blockName == "trans":
					depth++
				}
			}
		case tokens.Assign:
			blockAssign = true
		case tokens.BlockEnd:
			if inBlock && blockName == "set" && !blockAssign {
				depth++ // {% set x %}...{% endset %}
			}
			inBlock = false
		}
		if depth > MaxNesting {
			return fmt.Errorf("%w: nested deeper than %d (line %d)", ErrTemplate, MaxNesting, tok.Line)
		}
		if depth < 0 {
			depth = 0
		}
	}
	if s.IsError() {
		tok := s.Current()
		return fmt.Errorf("%w: line %d: %s", ErrTemplate, tok.Line, tok.Val)
	}
	return nil
}
