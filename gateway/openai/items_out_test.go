package openai

import (
	"encoding/json"
	"testing"
)

// TestItemsRenderAndParseBack: an item rendered as input_items lists it (and as it
// is stored) parses back into the same item, and a page names its first and last.
func TestItemsRenderAndParseBack(t *testing.T) {
	items := []Item{
		{Type: "message", ID: "msg_1", Role: "user", Text: "hi \"there\""},
		{Type: "message", ID: "msg_2", Role: "assistant", Text: "yes"},
		{Type: "function_call", ID: "fc_1", CallID: "call_1", Name: "f", Arguments: `{"a":1}`},
		{Type: "function_call_output", ID: "fco_1", CallID: "call_1", Output: "42"},
	}
	for _, it := range items {
		b := AppendItem(nil, &it, "completed")
		back, ferr := ParseItem(b, "item")
		if ferr != nil || back != it {
			t.Errorf("%s parsed back as %+v, %v", b, back, ferr)
		}
	}
	var page struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		FirstID *string           `json:"first_id"`
		LastID  *string           `json:"last_id"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(AppendItemsPage(nil, items, true), &page); err != nil {
		t.Fatal(err)
	}
	if page.Object != "list" || len(page.Data) != 4 || *page.FirstID != "msg_1" || *page.LastID != "fco_1" || !page.HasMore {
		t.Fatalf("page = %+v", page)
	}
	if err := json.Unmarshal(AppendItemsPage(nil, nil, false), &page); err != nil || page.FirstID != nil || page.LastID != nil {
		t.Fatalf("empty page: %+v, %v", page, err)
	}
}

// TestAppendOutputItem: a message in progress has no parts yet; whole or done, its
// text is one output_text part.
func TestAppendOutputItem(t *testing.T) {
	it := Item{Type: "message", ID: "msg_1", Role: "assistant", Text: "x"}
	if got := string(AppendOutputItem(nil, &it, "in_progress", false)); got != `{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}` {
		t.Errorf("in progress: %s", got)
	}
	if got := string(AppendOutputItem(nil, &it, "completed", false)); got != `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"x","annotations":[],"logprobs":[]}]}` {
		t.Errorf("completed: %s", got)
	}
	fc := Item{Type: "function_call", ID: "fc_1", CallID: "call_1", Name: "f", Arguments: "{}"}
	if got := string(AppendOutputItem(nil, &fc, "completed", true)); got != `{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":"{}"}` {
		t.Errorf("function_call: %s", got)
	}
}
