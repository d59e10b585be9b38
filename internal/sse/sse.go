// Package sse reads and writes server-sent event streams. Reader reads them as
// OpenAI-compatible servers write them: it is the one reader of that format in
// lmlite, shared by the gateway's upstream relay and the load tester's client.
// AppendEvent, Begin/End, AppendComment and Writer (writer.go) frame and write
// them: every stream the gateway serves goes through them.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ErrLineTooLong is returned by Next and NextEvent for a line (or, by NextEvent, an
// event's data) longer than the Reader's MaxLine.
var ErrLineTooLong = errors.New("sse: line too long")

// Reader returns the data of an event stream as it arrives, line by line (Next) or
// event by event (NextEvent). Lines that are not data (":" comments, event:, id: and
// retry: fields) are skipped; a data line's payload is what follows "data:", the
// optional space after it and trailing spaces removed. "[DONE]" is returned like
// any other data: the caller decides what ends its stream.
type Reader struct {
	// MaxLine bounds one line in bytes, and one event's data in NextEvent; 0: no bound.
	MaxLine int

	rd   *bufio.Reader
	long []byte // a line longer than rd's buffer, gathered whole
	ev   []byte // NextEvent's data
}

// NewReader reads r through a buffer of size bytes (lines up to that size are
// returned without copying).
func NewReader(r io.Reader, size int) *Reader {
	return &Reader{rd: bufio.NewReaderSize(r, size)}
}

// line returns the next line with its line ending, valid until the next call; at
// the end of the stream, a last line without a newline is returned with the error.
func (r *Reader) line() ([]byte, error) {
	line, err := r.rd.ReadSlice('\n')
	if err == bufio.ErrBufferFull { // a long line: gather it whole
		r.long = append(r.long[:0], line...)
		for err == bufio.ErrBufferFull {
			if r.MaxLine > 0 && len(r.long) > r.MaxLine {
				return nil, ErrLineTooLong
			}
			line, err = r.rd.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	if r.MaxLine > 0 && len(line) > r.MaxLine {
		return nil, ErrLineTooLong
	}
	return line, err
}

// Next returns the next data line's payload, valid until the next call. OpenAI's
// streams put one JSON object on each; NextEvent joins the lines of an event. At the
// end of the stream it returns io.EOF (a last line without a newline is returned
// first); a read error is returned as it is.
func (r *Reader) Next() ([]byte, error) {
	for {
		line, err := r.line()
		if len(line) == 0 && err != nil {
			return nil, err
		}
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimSpace(data), nil // a read error, if any, comes on the next call
		}
		if err != nil {
			return nil, err
		}
	}
}

// NextEvent returns the data of the next event that has some, valid until the next
// call: its data lines' payloads joined by "\n", as the SSE specification says (a
// JSON object written over several lines comes back whole). An event ends at a blank
// line; an event the stream's end cuts short is returned too. At the end of the
// stream it returns io.EOF; a read error is returned as it is, after the event it
// cut short.
func (r *Reader) NextEvent() ([]byte, error) {
	r.ev = r.ev[:0]
	has := false
	for {
		line, err := r.line()
		if err == ErrLineTooLong {
			return nil, err
		}
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if has {
				r.ev = append(r.ev, '\n')
			}
			data = bytes.TrimRight(data, " \t\r\n")
			data, _ = bytes.CutPrefix(data, []byte(" "))
			r.ev = append(r.ev, data...)
			has = true
			if r.MaxLine > 0 && len(r.ev) > r.MaxLine {
				return nil, ErrLineTooLong
			}
		} else if has && len(bytes.TrimRight(line, "\r\n")) == 0 && err == nil {
			return r.ev, nil // the blank line that ends the event
		}
		if err != nil {
			if has {
				return r.ev, nil // the error comes on the next call
			}
			return nil, err
		}
	}
}
