package tenancy

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptPipe sends the scripts of concurrent requests to Redis together (client-side
// auto-pipelining): each of its senders takes a call and every other one waiting, and
// sends them as one pipeline, so that Redis and this process pay one write and one
// read for all of them instead of one each. A call alone goes out at once. Each
// request still waits for one round trip (its own script's answer).
type scriptPipe struct {
	c     redis.UniversalClient
	calls chan *scriptCall
	stop  chan struct{}
}

type scriptCall struct {
	s    *redis.Script
	keys []string
	args []any
	cmd  *redis.Cmd
	done chan struct{}
}

// pipeSenders is how many pipelines may be in flight at once; pipeMax the most
// scripts in one.
const (
	pipeSenders = 4
	pipeMax     = 64
)

func newScriptPipe(c redis.UniversalClient) *scriptPipe {
	p := &scriptPipe{c: c, calls: make(chan *scriptCall, 1024), stop: make(chan struct{})}
	for range pipeSenders {
		go p.send()
	}
	return p
}

func (p *scriptPipe) close() { close(p.stop) }

// run runs s as Script.Run does (EVALSHA, EVAL when Redis answers NOSCRIPT), in the
// next pipeline.
func (p *scriptPipe) run(s *redis.Script, keys []string, args ...any) *redis.Cmd {
	call := &scriptCall{s: s, keys: keys, args: args, done: make(chan struct{})}
	select {
	case p.calls <- call:
		<-call.done
		return call.cmd
	case <-p.stop:
		c, cancel := ctx()
		defer cancel()
		return s.Run(c, p.c, keys, args...)
	}
}

func (p *scriptPipe) send() {
	batch := make([]*scriptCall, 0, pipeMax)
	for {
		batch = batch[:0]
		select {
		case <-p.stop:
			return
		case call := <-p.calls:
			batch = append(batch, call)
		}
	more:
		for len(batch) < pipeMax {
			select {
			case call := <-p.calls:
				batch = append(batch, call)
			default:
				break more
			}
		}
		p.exec(batch)
	}
}

func (p *scriptPipe) exec(batch []*scriptCall) {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if len(batch) == 1 {
		b := batch[0]
		b.cmd = b.s.Run(c, p.c, b.keys, b.args...)
		close(b.done)
		return
	}
	pipe := p.c.Pipeline()
	for _, b := range batch {
		b.cmd = b.s.EvalSha(c, pipe, b.keys, b.args...)
	}
	_, _ = pipe.Exec(c) // each command has its own answer or error
	for _, b := range batch {
		if redis.HasErrorPrefix(b.cmd.Err(), "NOSCRIPT") { // Redis restarted or flushed its scripts
			b.cmd = b.s.Run(c, p.c, b.keys, b.args...)
		}
		close(b.done)
	}
}
