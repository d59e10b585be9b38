package gateway

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/respstore"
)

// This file renders a /v1/responses request's result through package
// gateway/openai (responses_out.go: the Response object, or OpenAI's event
// sequence) and keeps the response for its tenant (store: true) when the output
// asks, before the bytes that end the answer are written.

// newOutput starts rendering one Responses request's result; with store: true and a
// store, the output keeps the response through c.save.
func (c *responsesCodec) newOutput(m *outMeta) output {
	ri := m.in.resp
	if ri == nil {
		ri = &respInput{}
	}
	opt := openai.ResponseOptions{Parallel: m.in.feat.Parallel, Echo: ri.echo, StoreAt: ri.storeAt}
	if ri.store && c.store != nil {
		ri.saver = respSaver{c: c, m: m, ri: ri}
		opt.Store = &ri.saver
		if cs, ok := c.store.(carrier); ok && cs.Carries() && m.job != nil {
			m.job.carry = &carriedSettle{on: true} // settled in the Put (responses_carry.go)
		}
	}
	return openai.NewResponseOutput(&m.Meta, opt)
}

// respSaver stores one request's response (openai.Storer) through its codec's save;
// it lives in the request's respInput, so that it costs no allocation.
type respSaver struct {
	c  *responsesCodec
	m  *outMeta
	ri *respInput
}

func (s *respSaver) StoreResponse(id string, output []respItem, body []byte) error {
	return s.c.save(s.m, s.ri, id, output, body)
}

// appendError appends an error in OpenAI's shape, its fields named as the Responses
// API names them (respNames).
func (c *responsesCodec) appendError(b []byte, e *apiError) []byte {
	return appendErrorJSON(b, respNames(e))
}

func (c *responsesCodec) errorStatus(e *apiError) int { return e.status }

// appendBroken ends a relayed Responses stream that broke with an error event
// (brokenAppender; openai.AppendBrokenStream).
func (c *responsesCodec) appendBroken(b []byte, events int, e *apiError) []byte {
	return openai.AppendBrokenStream(b, events, e.wire())
}

// save keeps the response id for its tenant: its Response object (body) and its
// conversation (the input items, ids given to those that had none, and the output's
// items), within the plan's limits (admitStore kept them). A Put that fails is
// logged and the answer goes on, not stored: the Response it carries says "store":
// false (a GET of its id is a 404), as when the request said so. That is a race at
// the limit (requests admitted together, the last Puts refused: respstore's Put is
// atomic, so the limit is never passed), a response whose own size passes
// responses_max_bytes, or the store down.
func (c *responsesCodec) save(m *outMeta, ri *respInput, id string, output []respItem, body []byte) error {
	hex := strings.TrimPrefix(id, "resp_")
	in := make([]respItem, len(ri.own))
	seen := make(map[string]bool, len(in))
	for i, it := range ri.own {
		if !validItemID(it.ID) || seen[it.ID] { // ids are unique in a response's list, and fit a store's keys
			it.ID = inputItemID(it.Type, hex, i)
		}
		seen[it.ID] = true
		in[i] = it
	}
	r := &storedResponse{ID: id, Tenant: m.Tenant, Created: m.Created, Model: m.Model, Previous: ri.previous,
		Input: in, Output: output, Body: body}
	var err error
	if cs, ok := c.store.(carrier); ok && m.job != nil && m.job.carry != nil && m.job.carry.on {
		err = cs.PutCarried(context.Background(), r, ri.limits, m.job.settleCarried)
	} else {
		err = c.store.Put(context.Background(), r, ri.limits)
	}
	if err == nil {
		return nil
	}
	var le *respstore.LimitError
	switch {
	case c.log == nil:
	case errors.As(err, &le):
		c.log.Warn("responses: not stored: the tenant's stored responses reached the plan's limit since the request was admitted, or this response passes it",
			"request_id", m.ReqID, "tenant", m.Tenant, "limit", le.Limit, "max", le.Max)
	default:
		c.log.Error("responses: store", "request_id", m.ReqID, "error", err)
	}
	return err
}

// validItemID reports whether a client's item id is kept as it is: 1 to 256
// printable ASCII bytes without spaces, '/', '{' or '}' (respstore's ids).
func validItemID(s string) bool {
	if len(s) == 0 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '/' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// inputItemID is the id of input item i of the response whose request id's hex is
// hex, for an item the client sent without one.
func inputItemID(typ, hex string, i int) string {
	p := "msg_"
	switch typ {
	case "function_call":
		p = "fc_"
	case "function_call_output":
		p = "fco_"
	}
	return p + hex + "_in" + strconv.Itoa(i)
}
