package openai

import (
	"strconv"

	"github.com/lmlite/lmlite/internal/jsonenc"
)

// This file renders the Responses API's items: as output items (in a Response and
// its events) and as input_items lists them (and as they are stored).

// AppendOutputItem appends an output item with status: a message (its text as one
// output_text part, or, while in progress and not whole, no parts yet) or a
// function_call.
func AppendOutputItem(b []byte, it *Item, status string, whole bool) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, it.ID)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, it.Type)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, '"')
	if it.Type == "message" {
		b = append(b, `,"role":"assistant","content":[`...)
		if whole || status != "in_progress" {
			b = append(b, `{"type":"output_text","text":`...)
			b = jsonenc.AppendString(b, it.Text)
			b = append(b, `,"annotations":[],"logprobs":[]}`...)
		}
		return append(b, "]}"...)
	}
	b = append(b, `,"call_id":`...)
	b = jsonenc.AppendString(b, it.CallID)
	b = append(b, `,"name":`...)
	b = jsonenc.AppendString(b, it.Name)
	b = append(b, `,"arguments":`...)
	b = jsonenc.AppendString(b, it.Arguments)
	return append(b, '}')
}

// AppendItemsPage appends a page of input items as OpenAI lists them:
// {"object":"list","data":[…],"first_id","last_id","has_more"}.
func AppendItemsPage(b []byte, items []Item, more bool) []byte {
	b = append(b, `{"object":"list","data":[`...)
	for i := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendItem(b, &items[i], "completed")
	}
	b = append(b, `],"first_id":`...)
	if len(items) > 0 {
		b = jsonenc.AppendString(b, items[0].ID)
		b = append(b, `,"last_id":`...)
		b = jsonenc.AppendString(b, items[len(items)-1].ID)
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, more)
	return append(b, '}')
}

// AppendItem appends an item in OpenAI's shape with status: a message with
// input_text parts (output_text, with annotations, for the assistant's), a
// function_call or a function_call_output.
func AppendItem(b []byte, it *Item, status string) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, it.ID)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, it.Type)
	switch it.Type {
	case "message":
		b = append(b, `,"role":`...)
		b = jsonenc.AppendString(b, it.Role)
		if it.Role == "assistant" {
			b = append(b, `,"content":[{"type":"output_text","text":`...)
			b = jsonenc.AppendString(b, it.Text)
			b = append(b, `,"annotations":[],"logprobs":[]}]`...)
		} else {
			b = append(b, `,"content":[{"type":"input_text","text":`...)
			b = jsonenc.AppendString(b, it.Text)
			b = append(b, `}]`...)
		}
	case "function_call":
		b = append(b, `,"call_id":`...)
		b = jsonenc.AppendString(b, it.CallID)
		b = append(b, `,"name":`...)
		b = jsonenc.AppendString(b, it.Name)
		b = append(b, `,"arguments":`...)
		b = jsonenc.AppendString(b, it.Arguments)
	case "function_call_output":
		b = append(b, `,"call_id":`...)
		b = jsonenc.AppendString(b, it.CallID)
		b = append(b, `,"output":`...)
		b = jsonenc.AppendString(b, it.Output)
	}
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	return append(b, `"}`...)
}
