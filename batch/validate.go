package batch

import (
	"bufio"
	"bytes"
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

// Endpoints a batch may target.
var endpoints = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true}

// Line is one validated request of an input file.
type Line struct {
	Index    int // 0-based; the file's line number is Index+1
	CustomID string
	Body     []byte
	Worst    money.Money // the worst-case cost the Checker priced
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
	if !endpoints[endpoint] {
		return nil, []LineError{{Code: "invalid_endpoint", Param: "endpoint", Message: "endpoint must be /v1/chat/completions or /v1/completions"}}
	}
	var lines []Line
	var errs []LineError
	add := func(n int, code, param, msg string) {
		if len(errs) < maxErrors {
			errs = append(errs, LineError{Code: code, Param: param, Line: n, Message: msg})
		}
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxFileBytes)
	n := 0
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
		var in inputLine
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			add(n, "invalid_json_line", "", "line is not a valid request object: "+err.Error())
			continue
		}
		switch {
		case in.CustomID == nil || *in.CustomID == "":
			add(n, "missing_required_parameter", "custom_id", "custom_id is required")
			continue
		case seen[*in.CustomID] > 0:
			add(n, "duplicate_custom_id", "custom_id", fmt.Sprintf("custom_id %q is already used on line %d", *in.CustomID, seen[*in.CustomID]))
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
		seen[*in.CustomID] = n
		var worst money.Money
		if c != nil {
			w, err := c.Check(tenant, endpoint, in.Body)
			if err != nil {
				add(n, "invalid_request", "body", err.Error())
				continue
			}
			worst = w
		}
		lines = append(lines, Line{Index: len(lines), CustomID: *in.CustomID, Body: in.Body, Worst: worst})
	}
	if err := sc.Err(); err != nil {
		add(n+1, "invalid_file", "", "reading the file: "+err.Error())
	}
	if len(errs) == 0 && len(lines) == 0 {
		add(0, "empty_file", "input_file_id", "the input file has no requests")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return lines, nil
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

// systemPrompt is the content of a chat body's leading system message ("" if none).
func systemPrompt(body []byte) string {
	var b struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &b) != nil || len(b.Messages) == 0 || (b.Messages[0].Role != "system" && b.Messages[0].Role != "developer") {
		return ""
	}
	return string(b.Messages[0].Content)
}
