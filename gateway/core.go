package gateway

import (
	"net"

	"github.com/valyala/fasthttp"
)

// A request may enter the core without HTTP: a batch line (RunLine) hands the core
// its body and gets its answer back as a coreResult, with no request context. Such
// a job has body and res set, and the job's methods get a nil ctx: the answer goes to
// res (job.answer, job.writeError), the routing fields come from the body alone
// (job.header: no header), and there is no connection to watch.

// coreResult is the answer of a request that entered the core directly: its status
// (the codec's: errorStatus for an error), its body in the codec's shape (the result,
// or the error), and the error itself (nil when the request was answered).
type coreResult struct {
	status int
	body   []byte
	err    *apiError
}

// runCore runs j, a request that entered the core directly (j.body, j.pol, j.keyID,
// j.reqID set; a batch line's j.line), in the wire format of c, through the same
// steps as an HTTP request's (job.serve): decode, route, admit, decide, reserve, run,
// settle. It cannot stream.
func (s *Server) runCore(j *job, c codec) coreResult {
	var res coreResult
	j.res = &res
	j.plans = j.planBuf[:0]
	j.serve(nil, c)
	return res
}

// header is the request's HTTP header, where routing fields may also come from: a
// request that entered the core directly has none (an empty header).
func (j *job) header(ctx *fasthttp.RequestCtx) *fasthttp.RequestHeader {
	if ctx == nil {
		return &fasthttp.RequestHeader{}
	}
	return &ctx.Request.Header
}

// requestBody is the request's body.
func (j *job) requestBody(ctx *fasthttp.RequestCtx) []byte {
	if ctx == nil {
		return j.body
	}
	return ctx.PostBody()
}

// answer answers the request with body (status 200 unless given, of type
// contentType): the HTTP response, or the result of a request that entered the core
// directly.
func (j *job) answer(ctx *fasthttp.RequestCtx, status int, contentType string, body []byte) {
	if ctx == nil {
		j.res.status, j.res.body, j.res.err = status, body, nil
		return
	}
	if status != 200 {
		ctx.SetStatusCode(status)
	}
	ctx.SetContentType(contentType)
	ctx.SetBody(body)
}

// connOf is the client's connection (nil for a request that entered the core
// directly: nobody to go away).
func connOf(ctx *fasthttp.RequestCtx) net.Conn {
	if ctx == nil {
		return nil
	}
	return ctx.Conn()
}
