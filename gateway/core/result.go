package core

import "github.com/lmlite/lmlite/engine"

// This file is the result half of the contract between the gateway's core and its
// codecs: the core produces a request's result as Events while streaming (or a
// Whole otherwise) and an Output of the request's codec renders it in its wire
// format (JSON, or server-sent events framed by internal/sse). A codec package
// (gateway/openai, gateway/anthropic) implements Output with these types alone.

// Error is an error as a codec renders it: its HTTP status, OpenAI's type, code and
// param ("" for null), and the message. The gateway makes it from its own error.
type Error struct {
	Status                     int
	Type, Code, Param, Message string
}

func (e *Error) Error() string { return e.Message }

// EventKind is the kind of an Event.
type EventKind uint8

const (
	// EventStart: Choice begins; exactly once per choice, before its other events.
	EventStart EventKind = iota
	// EventText: content text of Choice (Text), with the logprobs of the tokens that
	// made it (Tokens; only when logprobs were asked for). White space before a tool
	// call is never sent as text (the core holds it back). Echo: the text is the
	// prompt echoed (completions' echo), its Tokens the prompt's tokens.
	EventText
	// EventCall: a fragment of tool call number Call of Choice: its first fragment
	// carries CallID and Name; every fragment may carry a piece of the arguments'
	// JSON text (Args, possibly ""). Calls of a choice come in order; a call's
	// fragments are contiguous; content text does not follow a call.
	EventCall
	// EventFinish: Choice ended with Finish ("stop", "length", "tool_calls",
	// "function_call" for the legacy functions API, "cancelled").
	EventFinish
	// EventUsage: the request's usage (every choice's output, the prompt once),
	// after every choice's EventFinish. Always sent; a codec decides whether to
	// render it.
	EventUsage
	// EventError: the generation failed after the stream began (Err); nothing
	// follows.
	EventError
)

// Event is one event of a request's result as it is produced. It and what it
// points to are valid only during Output.AppendEvent (the core reuses them).
type Event struct {
	Kind   EventKind
	Choice int
	Text   string // EventText
	Echo   bool   // EventText: Text is the echoed prompt
	// Tokens: with logprobs asked, the tokens (with their logprobs) of the choice's
	// output not yet sent: on EventText, EventCall and EventFinish (a token whose
	// text went to no event, such as markup or held white space, goes with the
	// next).
	Tokens []engine.Token
	Call   int          // EventCall: the call's index within its choice
	CallID string       // EventCall, first fragment: the call's id
	Name   string       // EventCall, first fragment: the function's name
	Args   string       // EventCall: a fragment of the arguments' JSON text
	Finish string       // EventFinish
	Usage  engine.Usage // EventUsage
	Err    *Error       // EventError
}

// Whole is a request's whole result, for an answer that is not streamed.
type Whole struct {
	Choices []Choice
	Usage   engine.Usage
}

// Choice is one choice's whole output.
type Choice struct {
	Content string         // the text (without the tool calls' markup; completions' echo: the prompt first)
	Calls   []ToolCall     // tool calls parsed from the output
	Finish  string         // as EventFinish's
	Tokens  []engine.Token // logprobs asked: the output's tokens with theirs (not for Finisher.Finished after a stream)
	Prompt  []engine.Token // completions' echo with logprobs: the prompt's tokens
}

// ToolCall is one complete tool call.
type ToolCall struct {
	ID, Name, Arguments string
}

// Meta is what an output knows of its request before the first event.
type Meta struct {
	ReqID   string // the server's request id ("req_" + hex): a codec derives its ids from it
	Model   string // the model that serves it
	Created int64  // Unix seconds of the request's start
	// StartMilli is the request's start in Unix milliseconds (0: not known; a
	// response id then has no time: openai.ResponseID).
	StartMilli int64
	Tenant     string
	Prompt     int // the prompt's tokens on the model (Anthropic's message_start reports them)
}

// An Output renders one request's result. The core calls AppendEvent for each event
// while streaming, then AppendEnd once; or AppendWhole once for an answer that is
// not streamed. An Output may keep state between calls (Responses' and Messages'
// events close what they opened).
type Output interface {
	// ContentType is the answer's Content-Type ("text/event-stream" when streamed).
	ContentType(stream bool) string
	// AppendEvent appends ev's SSE bytes (nothing, for an event the format does
	// not render).
	AppendEvent(b []byte, ev *Event) []byte
	// AppendEnd appends what ends the stream (OpenAI's "data: [DONE]",
	// Anthropic's message_stop); called after the last event, also after an
	// EventError.
	AppendEnd(b []byte) []byte
	// AppendWhole appends the whole answer's body.
	AppendWhole(b []byte, w *Whole) []byte
}

// Pinger is an Output that writes its own keep-alive event while the stream waits
// (Anthropic's "ping"); other outputs get an SSE comment.
type Pinger interface {
	AppendPing(b []byte) []byte
}

// Finisher is an Output told the request's end after it is settled: a format that
// stores its results (Responses' store) does so here, before the answer completes
// (a stream: before its EventFinish events; else before AppendWhole). err is nil on
// success (w nil on an error). It is called only once the model took the request
// (the Output exists): an error before that is answered by the codec's error alone.
type Finisher interface {
	Finished(w *Whole, err *Error)
}

// ContentType is the Content-Type of an answer: "text/event-stream" when streamed,
// else "application/json".
func ContentType(stream bool) string {
	if stream {
		return "text/event-stream"
	}
	return "application/json"
}
