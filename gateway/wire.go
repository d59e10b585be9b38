package gateway

import (
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/jsonenc"
)

func (j *job) newID() string {
	p := "chatcmpl-"
	if j.in.kind == kindCompletion {
		p = "cmpl-"
	}
	return p + strings.TrimPrefix(j.reqID, "req_")
}

func (j *job) appendHead(b []byte, id, object string) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, j.start.Unix(), 10)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, j.c.m.id)
	return b
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
	return append(b, "}}"...)
}

// appendResponse appends a whole (non-streamed) response body.
func (j *job) appendResponse(b []byte, id, text, finish string, u engine.Usage) []byte {
	if j.in.kind == kindChat {
		b = j.appendHead(b, id, "chat.completion")
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = jsonenc.AppendString(b, text)
		b = append(b, `,"refusal":null},"logprobs":null,"finish_reason":"`...)
	} else {
		b = j.appendHead(b, id, "text_completion")
		b = append(b, `,"choices":[{"index":0,"text":`...)
		b = jsonenc.AppendString(b, text)
		b = append(b, `,"logprobs":null,"finish_reason":"`...)
	}
	b = append(b, finish...)
	b = append(b, `"}],`...)
	b = appendUsage(b, u)
	return append(b, '}')
}

// appendChunk appends one SSE event of a stream: the role (first), a text delta, or
// the finish reason (last).
func (j *job) appendChunk(b []byte, id, text string, role bool, finish string) []byte {
	b = append(b, "data: "...)
	if j.in.kind == kindChat {
		b = j.appendHead(b, id, "chat.completion.chunk")
		b = append(b, `,"choices":[{"index":0,"delta":{`...)
		switch {
		case role:
			b = append(b, `"role":"assistant","content":""`...)
		case finish == "":
			b = append(b, `"content":`...)
			b = jsonenc.AppendString(b, text)
		}
		b = append(b, `},"logprobs":null,"finish_reason":`...)
	} else {
		b = j.appendHead(b, id, "text_completion")
		b = append(b, `,"choices":[{"index":0,"text":`...)
		b = jsonenc.AppendString(b, text)
		b = append(b, `,"logprobs":null,"finish_reason":`...)
	}
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, finish...)
		b = append(b, '"')
	}
	b = append(b, "}]"...)
	if j.in.usage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, "}\n\n"...)
}

func (j *job) appendUsageChunk(b []byte, id string, u engine.Usage) []byte {
	b = append(b, "data: "...)
	obj := "chat.completion.chunk"
	if j.in.kind == kindCompletion {
		obj = "text_completion"
	}
	b = j.appendHead(b, id, obj)
	b = append(b, `,"choices":[],`...)
	b = appendUsage(b, u)
	return append(b, "}\n\n"...)
}

// connClosed reports whether the client closed conn, by peeking at the socket without
// consuming anything (the handler owns the connection while it runs).
func connClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil
		return true // never wait
	})
	return closed
}
