package gateway

import (
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/internal/sse"
)

// This file is the codec of OpenAI's chat completions and (legacy) completions: it
// decodes their bodies into the core request (parse.go) and renders the core's
// result as OpenAI's JSON and server-sent events (chat.completion, text_completion,
// their chunks, data: [DONE]) and errors ({"error": {...}}).

// openaiCodec is the codec of POST /v1/chat/completions (kindChat) or
// /v1/completions (kindCompletion).
type openaiCodec struct{ kind kind }

// chatCodec and completionsCodec are the codecs of OpenAI's two generation
// endpoints (pointers, so that an interface holds them without allocating).
var (
	chatCodec        = &openaiCodec{kind: kindChat}
	completionsCodec = &openaiCodec{kind: kindCompletion}
)

// codecForEndpoint is the codec of a batch line's endpoint (batch.Request.Endpoint,
// checked when the batch was created: chat or completions).
func codecForEndpoint(endpoint string) codec {
	if endpoint == "/v1/completions" {
		return completionsCodec
	}
	return chatCodec
}

func (c *openaiCodec) decode(in *input, body []byte, _ string) *apiError {
	if c.kind == kindChat {
		return in.decodeChat(body)
	}
	return in.decodeCompletion(body)
}

func (c *openaiCodec) newOutput(m *outMeta) output {
	o := &openaiOutput{m: m, chat: c.kind == kindChat}
	o.delta = o.deltaBuf[:0]
	return o
}

func (c *openaiCodec) appendError(b []byte, e *apiError) []byte { return appendErrorJSON(b, e) }

func (c *openaiCodec) errorStatus(e *apiError) int { return e.status }

// openaiOutput renders one request's result in OpenAI's shape.
type openaiOutput struct {
	m    *outMeta
	chat bool
	// offset is, per choice, the length of a completion's text sent so far (the
	// text_offset of its next token's logprobs).
	offset   [engine.MaxChoices]int
	delta    []byte // the chunk's delta being made
	deltaBuf [256]byte
}

func (o *openaiOutput) contentType(stream bool) string {
	if stream {
		return "text/event-stream"
	}
	return "application/json"
}

// openaiFinish is OpenAI's finish_reason for the core's (a cancelled request, whose
// answer nobody reads, says "stop").
func openaiFinish(f string) string {
	if f == "cancelled" {
		return "stop"
	}
	return f
}

// appendID appends the answer's id as a JSON string: "chatcmpl-" or "cmpl-" and the
// request id without its "req_".
func (o *openaiOutput) appendID(b []byte) []byte {
	p := "chatcmpl-"
	if !o.chat {
		p = "cmpl-"
	}
	b = append(b, '"')
	b = append(b, p...)
	n := len(b)
	b = jsonenc.AppendString(b, strings.TrimPrefix(o.m.reqID, "req_"))
	copy(b[n:], b[n+1:]) // AppendString's opening quote
	return b[:len(b)-1]
}

func (o *openaiOutput) appendHead(b []byte, object string) []byte {
	b = append(b, `{"id":`...)
	b = o.appendID(b)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, o.m.created, 10)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, o.m.model)
	return b
}

func (o *openaiOutput) appendEvent(b []byte, ev *outEvent) []byte {
	in := o.m.in
	d := o.delta[:0]
	switch ev.kind {
	case outStart:
		if !o.chat {
			return b
		}
		d = append(d, `"role":"assistant","content":""`...)
		b = o.appendChunk(b, ev.choice, d, false, nil, "")
	case outText:
		switch {
		case ev.echo && in.feat.logprobs:
			d = jsonenc.AppendString(d, ev.text)
			b = o.appendChunk(b, ev.choice, d, true, ev, "")
		case ev.echo:
			d = jsonenc.AppendString(d, ev.text)
			b = o.appendChunk(b, ev.choice, d, false, nil, "")
		case o.chat:
			d = jsonenc.AppendString(append(d, `"content":`...), ev.text)
			b = o.appendChunk(b, ev.choice, d, true, ev, "")
		default:
			d = jsonenc.AppendString(d, ev.text)
			b = o.appendChunk(b, ev.choice, d, true, ev, "")
		}
	case outCall:
		if in.feat.legacy { // the functions API's delta: function_call
			d = append(d, `"function_call":{`...)
			if ev.name != "" {
				d = append(d, `"name":`...)
				d = jsonenc.AppendString(d, ev.name)
				d = append(d, ',')
			}
			d = append(d, `"arguments":`...)
			d = jsonenc.AppendString(d, ev.args)
			d = append(d, '}')
		} else {
			d = append(d, `"tool_calls":[{"index":`...)
			d = strconv.AppendInt(d, int64(ev.call), 10)
			if ev.name != "" {
				d = append(d, `,"id":`...)
				d = jsonenc.AppendString(d, ev.callID)
				d = append(d, `,"type":"function","function":{"name":`...)
				d = jsonenc.AppendString(d, ev.name)
				d = append(d, `,"arguments":`...)
			} else {
				d = append(d, `,"function":{"arguments":`...)
			}
			d = jsonenc.AppendString(d, ev.args)
			d = append(d, "}}]"...)
		}
		b = o.appendChunk(b, ev.choice, d, true, ev, "")
	case outFinish:
		if !o.chat {
			d = append(d, `""`...)
		}
		b = o.appendChunk(b, ev.choice, d, len(ev.lps) > 0, ev, openaiFinish(ev.finish))
	case outUsage:
		if in.usage {
			var at int
			b, at = sse.Begin(b, "")
			if o.chat {
				b = o.appendHead(b, "chat.completion.chunk")
			} else {
				b = o.appendHead(b, "text_completion")
			}
			b = append(b, `,"choices":[],`...)
			b = appendUsage(b, ev.usage)
			b = sse.End(append(b, '}'), at)
		}
	case outError:
		b = appendOpenAIErrorEvent(b, ev.err)
	}
	o.delta = d
	return b
}

func (o *openaiOutput) appendEnd(b []byte) []byte { return appendDone(b) }

// appendDone appends the event that ends an OpenAI stream: data: [DONE].
func appendDone(b []byte) []byte {
	b, at := sse.Begin(b, "")
	return sse.End(append(b, "[DONE]"...), at)
}

// appendOpenAIErrorEvent appends the event of an error in the middle of an OpenAI
// stream: data: {"error": {...}}.
func appendOpenAIErrorEvent(b []byte, e *apiError) []byte {
	b, at := sse.Begin(b, "")
	return sse.End(appendErrorJSON(b, e), at)
}

// appendChunk appends one SSE event for choice i: delta holds the chat delta's
// members (or a completion's text as a JSON string); with lp (and logprobs asked
// for), ev's tokens' logprobs go with it (none: null); finish is "" until the
// choice's last chunk.
func (o *openaiOutput) appendChunk(b []byte, i int, delta []byte, lp bool, ev *outEvent, finish string) []byte {
	in := o.m.in
	b, at := sse.Begin(b, "")
	if o.chat {
		b = o.appendHead(b, "chat.completion.chunk")
	} else {
		b = o.appendHead(b, "text_completion")
	}
	b = append(b, `,"choices":[{"index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	if o.chat {
		b = append(b, `,"delta":{`...)
		b = append(b, delta...)
		b = append(b, `},"logprobs":`...)
	} else {
		b = append(b, `,"text":`...)
		b = append(b, delta...)
		b = append(b, `,"logprobs":`...)
	}
	switch {
	case !lp || !in.feat.logprobs:
		b = append(b, "null"...)
	case o.chat:
		b = appendChatLogprobs(b, ev.lps)
	case ev.echo && len(ev.lps) > 0: // the echoed prompt's tokens
		b = appendLegacyLogprobs(b, ev.lps, len(in.prompt), nil, 0)
		o.offset[i] = len(in.prompt)
	default:
		b = appendLegacyLogprobs(b, nil, 0, ev.lps, o.offset[i])
		for _, t := range ev.lps {
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
	if in.usage {
		b = append(b, `,"usage":null`...)
	}
	return sse.End(append(b, '}'), at)
}

// appendWhole appends a whole response with every choice.
func (o *openaiOutput) appendWhole(b []byte, w *whole) []byte {
	in := o.m.in
	if o.chat {
		b = o.appendHead(b, "chat.completion")
	} else {
		b = o.appendHead(b, "text_completion")
	}
	b = append(b, `,"choices":[`...)
	for i := range w.choices {
		c := &w.choices[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		if !o.chat {
			b = append(b, `,"text":`...)
			b = jsonenc.AppendString(b, c.content)
			b = append(b, `,"logprobs":`...)
			if in.feat.logprobs {
				off := 0
				if in.feat.echo {
					off = len(in.prompt)
				}
				b = appendLegacyLogprobs(b, c.prompt, len(in.prompt), c.lps, off)
			} else {
				b = append(b, "null"...)
			}
		} else {
			b = append(b, `,"message":{"role":"assistant","content":`...)
			if len(c.calls) > 0 && c.content == "" {
				b = append(b, "null"...)
			} else {
				b = jsonenc.AppendString(b, c.content)
			}
			if len(c.calls) > 0 && in.feat.legacy { // the functions API's answer: one call
				b = append(b, `,"function_call":{"name":`...)
				b = jsonenc.AppendString(b, c.calls[0].name)
				b = append(b, `,"arguments":`...)
				b = jsonenc.AppendString(b, c.calls[0].arguments)
				b = append(b, '}')
			} else if len(c.calls) > 0 {
				b = append(b, `,"tool_calls":[`...)
				for k, tc := range c.calls {
					if k > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"id":`...)
					b = jsonenc.AppendString(b, tc.id)
					b = append(b, `,"type":"function","function":{"name":`...)
					b = jsonenc.AppendString(b, tc.name)
					b = append(b, `,"arguments":`...)
					b = jsonenc.AppendString(b, tc.arguments)
					b = append(b, "}}"...)
				}
				b = append(b, ']')
			}
			b = append(b, `,"refusal":null},"logprobs":`...)
			if in.feat.logprobs {
				b = appendChatLogprobs(b, c.lps)
			} else {
				b = append(b, "null"...)
			}
		}
		b = append(b, `,"finish_reason":"`...)
		b = append(b, openaiFinish(c.finish)...)
		b = append(b, `"}`...)
	}
	b = append(b, "],"...)
	b = appendUsage(b, w.usage)
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
