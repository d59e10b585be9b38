package batch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/lmlite/lmlite/money"
)

// Limits of an input file (OpenAI's).
const (
	MaxFileBytes = 200 << 20
	MaxFileLines = 50000
	maxErrors    = 100 // line errors reported for one file
)

// Endpoints a batch may target: OpenAI's chat completions, completions and Responses
// API, and Anthropic's Messages API (each line's body, and its answer, in that API's
// shape).
var endpoints = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/responses": true, "/v1/messages": true}

// EndpointMessage refuses an endpoint a batch may not target.
const EndpointMessage = "endpoint must be /v1/chat/completions, /v1/completions, /v1/responses or /v1/messages"

// ValidEndpoint reports whether a batch may target endpoint.
func ValidEndpoint(endpoint string) bool { return endpoints[endpoint] }

// Line is one validated request of an input file.
type Line struct {
	Index    int // 0-based; the file's line number is Index+1
	CustomID string
	Body     []byte      // Validate's; nil in a job's plan (read from the file when the line starts: Line.Read)
	Worst    money.Money // the worst-case cost the Checker priced
	Offset   int64       // where the line starts in the file
	Len      int         // its length in the file (with its newline)
	Group    int         // the index of the first line with the same leading system message (RunOrder)
}

// LineError is one entry of a failed batch's errors.data (OpenAI's shape).
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Line    int    `json:"line,omitempty"`
}

// Checker is what validation needs from the gateway: whether the tenant's plan lets a
// request body run on the endpoint (its model or tier), and its worst-case cost.
type Checker interface {
	Check(tenant, endpoint string, body []byte) (worst money.Money, err error)
}

type inputLine struct {
	CustomID *string         `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// Validate reads a JSONL input file for a batch on endpoint. It returns the lines, or
// the errors with their line numbers: bad JSON, a missing or duplicate custom_id, a
// method other than POST, a url other than the endpoint (mixed endpoints), and what
// the Checker refuses (a model or tier the plan forbids).
func Validate(r io.Reader, tenant, endpoint string, c Checker) ([]Line, []LineError) {
	var lines []Line
	_, errs := ValidateTo(r, tenant, endpoint, c, func(l *Line) error {
		l.Body = bytes.Clone(l.Body)
		lines = append(lines, *l)
		return nil
	})
	if errs != nil {
		return nil, errs
	}
	return lines, nil
}

// ValidateTo is Validate as a stream: it hands each good line to emit as it reads it
// (its Body valid only during the call) and keeps none, so a file of any size is
// validated in the memory of one line (and 32 bytes per custom_id and per distinct
// system message, to find duplicates and groups). It returns the number of good
// lines, or the errors; when there are errors, what emit got is to be dropped. An
// error of emit stops it (as an invalid_file error).
func ValidateTo(r io.Reader, tenant, endpoint string, c Checker, emit func(*Line) error) (int, []LineError) {
	if !endpoints[endpoint] {
		return 0, []LineError{{Code: "invalid_endpoint", Param: "endpoint", Message: EndpointMessage}}
	}
	var errs []LineError
	add := func(n int, code, param, msg string) {
		if len(errs) < maxErrors {
			errs = append(errs, LineError{Code: code, Param: param, Line: n, Message: msg})
		}
	}
	seen := map[[sha256.Size]byte]int{}   // custom_id's hash → its line number
	groups := map[[sha256.Size]byte]int{} // leading system message's hash → the first line's index
	var pos, next int64                   // where the current and the next line start
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxFileBytes)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		if tok != nil {
			pos, next = next, next+int64(adv)
		}
		return adv, tok, err
	})
	n, good := 0, 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		if n > MaxFileLines {
			add(n, "too_many_lines", "", fmt.Sprintf("the file has more than %d lines", MaxFileLines))
			break
		}
		in, ok := parseLine(raw, func(code, param, msg string) { add(n, code, param, msg) })
		if !ok {
			continue
		}
		idHash := sha256.Sum256([]byte(*in.CustomID))
		switch {
		case seen[idHash] > 0:
			add(n, "duplicate_custom_id", "custom_id", fmt.Sprintf("custom_id %q is already used on line %d", *in.CustomID, seen[idHash]))
			continue
		case in.Method != "POST":
			add(n, "invalid_method", "method", "method must be POST")
			continue
		case in.URL != endpoint:
			add(n, "mismatched_endpoint", "url", fmt.Sprintf("url %q differs from the batch's endpoint %s (a batch has one endpoint)", in.URL, endpoint))
			continue
		case len(in.Body) == 0 || in.Body[0] != '{':
			add(n, "invalid_body", "body", "body must be a JSON object")
			continue
		}
		seen[idHash] = n
		var worst money.Money
		if c != nil {
			w, err := c.Check(tenant, endpoint, in.Body)
			if err != nil {
				add(n, "invalid_request", "body", err.Error())
				continue
			}
			worst = w
		}
		gh := sha256.Sum256([]byte(systemPrompt(in.Body)))
		g, ok := groups[gh]
		if !ok {
			g = good
			groups[gh] = g
		}
		if errs == nil {
			l := Line{Index: good, CustomID: *in.CustomID, Body: in.Body, Worst: worst, Offset: pos, Len: int(next - pos), Group: g}
			if err := emit(&l); err != nil {
				add(n, "invalid_file", "", "storing the file's lines: "+err.Error())
				break
			}
		}
		good++
	}
	if err := sc.Err(); err != nil {
		add(n+1, "invalid_file", "", "reading the file: "+err.Error())
	}
	if len(errs) == 0 && good == 0 {
		add(0, "empty_file", "input_file_id", "the input file has no requests")
	}
	if len(errs) > 0 {
		return 0, errs
	}
	return good, nil
}

// parseLine decodes one line of an input file (bad: its error, and false).
func parseLine(raw []byte, bad func(code, param, msg string)) (inputLine, bool) {
	var in inputLine
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		bad("invalid_json_line", "", "line is not a valid request object: "+err.Error())
		return in, false
	}
	if in.CustomID == nil || *in.CustomID == "" {
		bad("missing_required_parameter", "custom_id", "custom_id is required")
		return in, false
	}
	return in, true
}

// Read reads the line's request body from the input file it was validated from.
func (l *Line) Read(f io.ReaderAt) ([]byte, error) {
	raw := make([]byte, l.Len)
	if _, err := f.ReadAt(raw, l.Offset); err != nil {
		return nil, fmt.Errorf("batch: reading line %d of the input file: %w", l.Index+1, err)
	}
	var msg string
	in, ok := parseLine(bytes.TrimSpace(raw), func(_, _, m string) { msg = m })
	if !ok || *in.CustomID != l.CustomID {
		return nil, fmt.Errorf("batch: line %d of the input file changed since it was validated %s", l.Index+1, msg)
	}
	return in.Body, nil
}

// RunOrder is the order to run lines in: lines sharing a leading system message run
// together (in file order within a group, groups in the order they first appear), so
// the prefix cache serves the shared prompt while it is warm.
func RunOrder(lines []Line) []*Line {
	first := map[string]int{}
	keys := make([]string, len(lines))
	for i := range lines {
		keys[i] = systemPrompt(lines[i].Body)
		if _, ok := first[keys[i]]; !ok {
			first[keys[i]] = i
		}
	}
	order := make([]*Line, len(lines))
	for i := range lines {
		order[i] = &lines[i]
	}
	sort.SliceStable(order, func(a, b int) bool { return first[keys[order[a].Index]] < first[keys[order[b].Index]] })
	return order
}

// systemPrompt is the system prompt of a line's body ("" if none): a chat body's
// leading system (or developer) message, a Messages body's system, a Responses
// body's instructions.
func systemPrompt(body []byte) string {
	var b struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		System       json.RawMessage `json:"system"`
		Instructions json.RawMessage `json:"instructions"`
	}
	switch {
	case json.Unmarshal(body, &b) != nil:
		return ""
	case len(b.System) > 0:
		return string(b.System)
	case len(b.Instructions) > 0:
		return string(b.Instructions)
	case len(b.Messages) == 0 || (b.Messages[0].Role != "system" && b.Messages[0].Role != "developer"):
		return ""
	}
	return string(b.Messages[0].Content)
}
