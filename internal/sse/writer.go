package sse

import (
	"bytes"
	"io"
	"strings"
)

// The writing half: every event stream lmlite serves (the gateway's chat,
// Responses and Messages streams, its upstream relay and its forwarder's relay) is
// framed by these functions and written through a Writer.
//
// An event is an optional "event: name" line, then its data as data lines, then a
// blank line. A line break in the data ("\n", "\r\n" or "\r", as the SSE
// specification counts them) starts a new data line, so a reader gets the data back
// with its line breaks as "\n" and can never be made to see a field or an event
// boundary that the writer did not write.

// AppendEvent appends one event: "event: name" when name is not "", data framed as
// data lines, and the blank line that ends it. name must be one line (a line break
// in it is a programmer's error: AppendEvent panics).
func AppendEvent(b []byte, name string, data []byte) []byte {
	b, at := Begin(b, name)
	b = append(b, data...)
	return End(b, at)
}

// Begin appends the head of an event whose data the caller appends in place next
// (the common case: a JSON object rendered straight into b): "event: name\n" when
// name is not "", then "data: ". It returns b and where the data starts, for End.
func Begin(b []byte, name string) ([]byte, int) {
	if name != "" {
		if strings.ContainsAny(name, "\r\n") {
			panic("sse: an event name with a line break: " + name)
		}
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	return b, len(b)
}

// End ends the event Begin started at data (its offset in b): the data appended
// since, each line break in it starting a new data line, then the blank line.
func End(b []byte, data int) []byte {
	if bytes.IndexByte(b[data:], '\n') < 0 && bytes.IndexByte(b[data:], '\r') < 0 {
		return append(b, "\n\n"...) // the common case (JSON): one line
	}
	tail := append([]byte(nil), b[data:]...)
	b = b[:data]
	for {
		i := bytes.IndexAny(tail, "\r\n")
		if i < 0 {
			break
		}
		b = append(b, tail[:i]...)
		b = append(b, "\ndata: "...)
		if tail[i] == '\r' && i+1 < len(tail) && tail[i+1] == '\n' {
			i++
		}
		tail = tail[i+1:]
	}
	b = append(b, tail...)
	return append(b, "\n\n"...)
}

// AppendComment appends a comment (": text", one line for each of text's lines),
// which readers ignore: a keep-alive.
func AppendComment(b []byte, text string) []byte {
	for {
		i := strings.IndexAny(text, "\r\n")
		if i < 0 {
			break
		}
		b = append(b, ": "...)
		b = append(b, text[:i]...)
		b = append(b, '\n')
		if text[i] == '\r' && i+1 < len(text) && text[i+1] == '\n' {
			i++
		}
		text = text[i+1:]
	}
	b = append(b, ": "...)
	b = append(b, text...)
	return append(b, "\n\n"...)
}

// Flusher is what a Writer writes to: a buffered writer whose Flush sends what it
// holds (a *bufio.Writer, as fasthttp's stream writers get).
type Flusher interface {
	io.Writer
	Flush() error
}

// A Writer writes framed events to a client, flushing after each write (streamed
// tokens go out at once). Once a write or a flush fails (the client went away), it
// writes nothing more and Gone reports it. The zero Writer needs Reset.
type Writer struct {
	w    Flusher
	gone bool
	buf  []byte // Event's and Comment's framing
}

// NewWriter returns a Writer to w.
func NewWriter(w Flusher) *Writer { return &Writer{w: w} }

// Reset makes wr write to w, as new (a Writer held by value in a larger struct).
func (wr *Writer) Reset(w Flusher) {
	wr.w, wr.gone, wr.buf = w, false, wr.buf[:0]
}

// Write writes events already framed (AppendEvent, Begin/End, AppendComment, or
// whole events relayed from another server) and flushes them. Nothing is written
// for an empty events. It returns false once the client is gone.
func (wr *Writer) Write(events []byte) bool {
	if wr.gone {
		return false
	}
	if len(events) == 0 {
		return true
	}
	if _, err := wr.w.Write(events); err != nil || wr.w.Flush() != nil {
		wr.gone = true
	}
	return !wr.gone
}

// Event writes one event (AppendEvent) and flushes it.
func (wr *Writer) Event(name string, data []byte) bool {
	wr.buf = AppendEvent(wr.buf[:0], name, data)
	return wr.Write(wr.buf)
}

// Comment writes a comment (AppendComment) and flushes it.
func (wr *Writer) Comment(text string) bool {
	wr.buf = AppendComment(wr.buf[:0], text)
	return wr.Write(wr.buf)
}

// Gone reports whether a write failed: the client went away.
func (wr *Writer) Gone() bool { return wr.gone }
