package openai

import (
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/internal/sse"
)

// This file renders OpenAI's chat completions and (legacy) completions: the core's
// result as chat.completion or text_completion JSON, or their chunks as server-sent
// events ending with data: [DONE], and errors ({"error": {...}}).

// ChatOptions are what a chat or completions output needs of its request.
type ChatOptions struct {
	Chat      bool // chat completions; false: (legacy) completions
	Logprobs  bool // logprobs asked for
	Echo      bool // completions' echo: the prompt comes first
	Legacy    bool // the deprecated functions API: a call is message.function_call
	Usage     bool // stream_options.include_usage: a usage chunk ends the stream
	PromptLen int  // completions: the prompt's length in bytes (the echo's text_offset)
}

// ChatOutput renders one chat or completions request's result in OpenAI's shape:
// chat.completion or text_completion, or their chunks and data: [DONE]
// (core.Output).
type ChatOutput struct {
	m   *core.Meta
	opt ChatOptions
	// offset is, per choice, the length of a completion's text sent so far (the
	// text_offset of its next token's logprobs).
	offset   [engine.MaxChoices]int
	delta    []byte // the chunk's delta being made
	deltaBuf [256]byte
}

// NewChatOutput starts rendering one request's result; m is read during the calls
// (the caller keeps it).
func NewChatOutput(m *core.Meta, opt ChatOptions) *ChatOutput {
	o := &ChatOutput{m: m, opt: opt}
	o.delta = o.deltaBuf[:0]
	return o
}

// ContentType is the answer's Content-Type.
func (o *ChatOutput) ContentType(stream bool) string { return core.ContentType(stream) }

// finishReason is OpenAI's finish_reason for the core's (a cancelled request, whose
// answer nobody reads, says "stop").
func finishReason(f string) string {
	if f == "cancelled" {
		return "stop"
	}
	return f
}

// appendID appends the answer's id as a JSON string: "chatcmpl-" or "cmpl-" and the
// request id without its "req_".
func (o *ChatOutput) appendID(b []byte) []byte {
	p := "chatcmpl-"
	if !o.opt.Chat {
		p = "cmpl-"
	}
	b = append(b, '"')
	b = append(b, p...)
	n := len(b)
	b = jsonenc.AppendString(b, strings.TrimPrefix(o.m.ReqID, "req_"))
	copy(b[n:], b[n+1:]) // AppendString's opening quote
	return b[:len(b)-1]
}

func (o *ChatOutput) appendHead(b []byte, object string) []byte {
	b = append(b, `{"id":`...)
	b = o.appendID(b)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, o.m.Created, 10)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, o.m.Model)
	return b
}

// AppendEvent appends ev's chunk (core.Output).
func (o *ChatOutput) AppendEvent(b []byte, ev *core.Event) []byte {
	d := o.delta[:0]
	switch ev.Kind {
	case core.EventStart:
		if !o.opt.Chat {
			return b
		}
		d = append(d, `"role":"assistant","content":""`...)
		b = o.appendChunk(b, ev.Choice, d, false, nil, "")
	case core.EventText:
		switch {
		case ev.Echo && o.opt.Logprobs:
			d = jsonenc.AppendString(d, ev.Text)
			b = o.appendChunk(b, ev.Choice, d, true, ev, "")
		case ev.Echo:
			d = jsonenc.AppendString(d, ev.Text)
			b = o.appendChunk(b, ev.Choice, d, false, nil, "")
		case o.opt.Chat:
			d = jsonenc.AppendString(append(d, `"content":`...), ev.Text)
			b = o.appendChunk(b, ev.Choice, d, true, ev, "")
		default:
			d = jsonenc.AppendString(d, ev.Text)
			b = o.appendChunk(b, ev.Choice, d, true, ev, "")
		}
	case core.EventCall:
		if o.opt.Legacy { // the functions API's delta: function_call
			d = append(d, `"function_call":{`...)
			if ev.Name != "" {
				d = append(d, `"name":`...)
				d = jsonenc.AppendString(d, ev.Name)
				d = append(d, ',')
			}
			d = append(d, `"arguments":`...)
			d = jsonenc.AppendString(d, ev.Args)
			d = append(d, '}')
		} else {
			d = append(d, `"tool_calls":[{"index":`...)
			d = strconv.AppendInt(d, int64(ev.Call), 10)
			if ev.Name != "" {
				d = append(d, `,"id":`...)
				d = jsonenc.AppendString(d, ev.CallID)
				d = append(d, `,"type":"function","function":{"name":`...)
				d = jsonenc.AppendString(d, ev.Name)
				d = append(d, `,"arguments":`...)
			} else {
				d = append(d, `,"function":{"arguments":`...)
			}
			d = jsonenc.AppendString(d, ev.Args)
			d = append(d, "}}]"...)
		}
		b = o.appendChunk(b, ev.Choice, d, true, ev, "")
	case core.EventFinish:
		if !o.opt.Chat {
			d = append(d, `""`...)
		}
		b = o.appendChunk(b, ev.Choice, d, len(ev.Tokens) > 0, ev, finishReason(ev.Finish))
	case core.EventUsage:
		if o.opt.Usage {
			var at int
			b, at = sse.Begin(b, "")
			if o.opt.Chat {
				b = o.appendHead(b, "chat.completion.chunk")
			} else {
				b = o.appendHead(b, "text_completion")
			}
			b = append(b, `,"choices":[],`...)
			b = appendUsage(b, ev.Usage)
			b = sse.End(append(b, '}'), at)
		}
	case core.EventError:
		b = AppendErrorEvent(b, ev.Err)
	}
	o.delta = d
	return b
}

// AppendEnd appends data: [DONE].
func (o *ChatOutput) AppendEnd(b []byte) []byte { return AppendDone(b) }

// AppendDone appends the event that ends an OpenAI stream: data: [DONE].
func AppendDone(b []byte) []byte {
	b, at := sse.Begin(b, "")
	return sse.End(append(b, "[DONE]"...), at)
}

// AppendErrorEvent appends the event of an error in the middle of an OpenAI
// stream: data: {"error": {...}}.
func AppendErrorEvent(b []byte, e *core.Error) []byte {
	b, at := sse.Begin(b, "")
	return sse.End(AppendError(b, e), at)
}

// appendChunk appends one SSE event for choice i: delta holds the chat delta's
// members (or a completion's text as a JSON string); with lp (and logprobs asked
// for), ev's tokens' logprobs go with it (none: null); finish is "" until the
// choice's last chunk.
func (o *ChatOutput) appendChunk(b []byte, i int, delta []byte, lp bool, ev *core.Event, finish string) []byte {
	b, at := sse.Begin(b, "")
	if o.opt.Chat {
		b = o.appendHead(b, "chat.completion.chunk")
	} else {
		b = o.appendHead(b, "text_completion")
	}
	b = append(b, `,"choices":[{"index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	if o.opt.Chat {
		b = append(b, `,"delta":{`...)
		b = append(b, delta...)
		b = append(b, `},"logprobs":`...)
	} else {
		b = append(b, `,"text":`...)
		b = append(b, delta...)
		b = append(b, `,"logprobs":`...)
	}
	switch {
	case !lp || !o.opt.Logprobs:
		b = append(b, "null"...)
	case o.opt.Chat:
		b = appendChatLogprobs(b, ev.Tokens)
	case ev.Echo && len(ev.Tokens) > 0: // the echoed prompt's tokens
		b = appendLegacyLogprobs(b, ev.Tokens, o.opt.PromptLen, nil, 0)
		o.offset[i] = o.opt.PromptLen
	default:
		b = appendLegacyLogprobs(b, nil, 0, ev.Tokens, o.offset[i])
		for _, t := range ev.Tokens {
			o.offset[i] += len(t.Text)
		}
	}
	b = append(b, `,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, finish...)
		b = append(b, '"')
	}
	b = append(b, "}]"...)
	if o.opt.Usage {
		b = append(b, `,"usage":null`...)
	}
	return sse.End(append(b, '}'), at)
}

// appendWhole appends a whole response with every choice.
func (o *ChatOutput) AppendWhole(b []byte, w *core.Whole) []byte {
	if o.opt.Chat {
		b = o.appendHead(b, "chat.completion")
	} else {
		b = o.appendHead(b, "text_completion")
	}
	b = append(b, `,"choices":[`...)
	for i := range w.Choices {
		c := &w.Choices[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		if !o.opt.Chat {
			b = append(b, `,"text":`...)
			b = jsonenc.AppendString(b, c.Content)
			b = append(b, `,"logprobs":`...)
			if o.opt.Logprobs {
				off := 0
				if o.opt.Echo {
					off = o.opt.PromptLen
				}
				b = appendLegacyLogprobs(b, c.Prompt, o.opt.PromptLen, c.Tokens, off)
			} else {
				b = append(b, "null"...)
			}
		} else {
			b = append(b, `,"message":{"role":"assistant","content":`...)
			if len(c.Calls) > 0 && c.Content == "" {
				b = append(b, "null"...)
			} else {
				b = jsonenc.AppendString(b, c.Content)
			}
			if len(c.Calls) > 0 && o.opt.Legacy { // the functions API's answer: one call
				b = append(b, `,"function_call":{"name":`...)
				b = jsonenc.AppendString(b, c.Calls[0].Name)
				b = append(b, `,"arguments":`...)
				b = jsonenc.AppendString(b, c.Calls[0].Arguments)
				b = append(b, '}')
			} else if len(c.Calls) > 0 {
				b = append(b, `,"tool_calls":[`...)
				for k, tc := range c.Calls {
					if k > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"id":`...)
					b = jsonenc.AppendString(b, tc.ID)
					b = append(b, `,"type":"function","function":{"name":`...)
					b = jsonenc.AppendString(b, tc.Name)
					b = append(b, `,"arguments":`...)
					b = jsonenc.AppendString(b, tc.Arguments)
					b = append(b, "}}"...)
				}
				b = append(b, ']')
			}
			b = append(b, `,"refusal":null},"logprobs":`...)
			if o.opt.Logprobs {
				b = appendChatLogprobs(b, c.Tokens)
			} else {
				b = append(b, "null"...)
			}
		}
		b = append(b, `,"finish_reason":"`...)
		b = append(b, finishReason(c.Finish)...)
		b = append(b, `"}`...)
	}
	b = append(b, "],"...)
	b = appendUsage(b, w.Usage)
	return append(b, '}')
}

// appendUsage appends OpenAI's usage object; prompt_tokens_details.cached_tokens is
// the prompt tokens the prefix cache served.
func appendUsage(b []byte, u engine.Usage) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens+u.CompletionTokens), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CachedTokens), 10)
	b = append(b, '}')
	b = appendPredictionUsage(b, u)
	return append(b, '}')
}

// appendPredictionUsage appends OpenAI's completion_tokens_details to a usage
// object being written, for a request that had a prediction (u.Predicted):
// accepted_prediction_tokens, the prediction's drafts the output took, and
// rejected_prediction_tokens, those computed and thrown away, which (as OpenAI's)
// are part of completion_tokens and billed with them (the gateway's billed).
func appendPredictionUsage(b []byte, u engine.Usage) []byte {
	if !u.Predicted {
		return b
	}
	b = append(b, `,"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PredictionAccepted), 10)
	b = append(b, `,"rejected_prediction_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PredictionRejected), 10)
	return append(b, '}')
}

// AppendError appends e in OpenAI's error shape: {"error": {"message", "type",
// "param", "code"}} (param and code null when empty).
func AppendError(b []byte, e *core.Error) []byte {
	b = append(b, `{"error":{"message":`...)
	b = jsonenc.AppendString(b, e.Message)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, e.Type)
	b = append(b, `,"param":`...)
	if e.Param == "" {
		b = append(b, "null"...)
	} else {
		b = jsonenc.AppendString(b, e.Param)
	}
	b = append(b, `,"code":`...)
	if e.Code == "" {
		b = append(b, "null"...)
	} else {
		b = jsonenc.AppendString(b, e.Code)
	}
	return append(b, "}}"...)
}
