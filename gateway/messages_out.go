package gateway

import (
	"github.com/lmlite/lmlite/gateway/anthropic"
)

// This file renders a Messages request's result (messages.go) through package
// anthropic (output.go: the core's events become an anthropic.Stream's, its whole
// an anthropic Message, its errors Anthropic's shape).

// newOutput starts rendering one Messages request's result.
func (c *messagesCodec) newOutput(m *outMeta) output {
	return anthropic.NewOutput(&m.Meta, m.in.feat.Parallel)
}

// appendBroken ends a relayed Messages stream that broke with an error event
// (brokenAppender); nothing follows it, as in a stream that fails here.
func (c *messagesCodec) appendBroken(b []byte, _ int, e *apiError) []byte {
	return anthropic.AppendCoreErrorEvent(b, e.wire())
}

// appendError appends e in Anthropic's error shape (anthropic.ErrorOf).
func (c *messagesCodec) appendError(b []byte, e *apiError) []byte {
	return anthropic.AppendCoreError(b, e.wire())
}

// errorStatus is e's status, but 529 for an overloaded engine or server, as
// Anthropic answers (its clients retry it).
func (c *messagesCodec) errorStatus(e *apiError) int {
	return anthropic.Status(e.status, e.code)
}

var (
	_ codec  = (*messagesCodec)(nil)
	_ output = (*anthropic.Output)(nil)
	_ pinger = (*anthropic.Output)(nil)
)
