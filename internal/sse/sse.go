// Package sse reads server-sent event streams as OpenAI-compatible servers write
// them: each event's payload on one "data:" line. It is the one reader of that format
// in lmlite, shared by the gateway's upstream relay and the load tester's client.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ErrLineTooLong is returned by Next for a line longer than the Reader's MaxLine.
var ErrLineTooLong = errors.New("sse: line too long")

// Reader returns the data lines of an event stream as they arrive. Lines that are
// not data (blank separators, ":" comments, event: and id: fields) are skipped; each
// data line is returned on its own (OpenAI's streams put one JSON object on each),
// with the optional space after "data:" and trailing spaces removed. "[DONE]" is
// returned like any other data: the caller decides what ends its stream.
type Reader struct {
	// MaxLine bounds one line in bytes; 0: no bound.
	MaxLine int

	rd   *bufio.Reader
	long []byte // a line longer than rd's buffer, gathered whole
}

// NewReader reads r through a buffer of size bytes (lines up to that size are
// returned without copying).
func NewReader(r io.Reader, size int) *Reader {
	return &Reader{rd: bufio.NewReaderSize(r, size)}
}

// Next returns the next data line's payload, valid until the next call. At the end
// of the stream it returns io.EOF (a last line without a newline is returned first);
// a read error is returned as it is.
func (r *Reader) Next() ([]byte, error) {
	for {
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
