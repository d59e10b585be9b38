package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/responses"
)

// The fields the agent CLIs send that the SDK tests did not: recorded from Claude
// Code 2.1.332 against a real lmlite (the bodies, trimmed, in testdata/clis).

// TestSDKBetaMessagesClaudeCodeBetas: the beta fields Claude Code sends on every
// request are served as the API defines them, through the official Go SDK's beta
// client: a message with role "system" is a system message in its place (one with
// clear_at "next_user_message" is gone once a later user message exists), a tool
// with defer_loading is left out of the prompt, context_management's
// clear_thinking edit is accepted; count_tokens equals chat/completions' prompt
// tokens for the same conversation as the chat API has it. The context edits the
// server does not do are a 400 naming the field. (Before: 400 "unrecognized
// request argument supplied: context_management", then messages[1].role.)
func TestSDKBetaMessagesClaudeCodeBetas(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	c := anthropicClient(es.base, es.key)
	text := func(s string) []anthropic.BetaSystemMessageParamContentUnion {
		return []anthropic.BetaSystemMessageParamContentUnion{{OfText: &anthropic.BetaTextBlockParam{Text: s}}}
	}
	msgs := []anthropic.BetaMessageParam{
		anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("hi")),
		{OfSystem: &anthropic.BetaSystemMessageParam{ClearAt: "next_user_message", Content: text("only until the next user turn")}},
		{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{anthropic.NewBetaTextBlock("hello")}}},
		anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("say hi")),
		{OfSystem: &anthropic.BetaSystemMessageParam{Content: text("be brief"),
			OutputConfig: anthropic.BetaSystemMessageOutputConfigParam{Effort: "high"}}},
	}
	tool := func(name string, deferred bool) anthropic.BetaToolUnionParam {
		t := anthropic.BetaToolUnionParamOfTool(anthropic.BetaToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}, name)
		t.OfTool.Description = anthropic.String("the weather in a city")
		if deferred {
			t.OfTool.DeferLoading = anthropic.Bool(true)
		}
		return t
	}
	tools := []anthropic.BetaToolUnionParam{tool("get_weather", false), tool("placeholder", true)}
	cm := anthropic.BetaContextManagementConfigParam{Edits: []anthropic.BetaContextManagementConfigEditUnionParam{
		{OfClearThinking20251015: &anthropic.BetaClearThinking20251015EditParam{Keep: anthropic.BetaClearThinking20251015EditKeepUnionParam{OfAll: "all"}}}}}
	beta := aoption.WithHeader("anthropic-beta", "context-management-2025-06-27,advanced-tool-use-2025-11-20")
	n, err := c.Beta.Messages.CountTokens(ctx, anthropic.BetaMessageCountTokensParams{Model: "tiny", Messages: msgs, Tools: toBetaCountTools(tools), ContextManagement: cm}, beta)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := es.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "tiny", MaxTokens: openai.Int(1),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi"), openai.AssistantMessage("hello"), openai.UserMessage("say hi"), openai.SystemMessage("be brief")},
		Tools: []openai.ChatCompletionToolParam{{Function: openai.FunctionDefinitionParam{Name: "get_weather", Description: openai.String("the weather in a city"),
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != chat.Usage.PromptTokens {
		t.Fatalf("count_tokens %d, chat's prompt_tokens %d for the conversation as the chat API has it", n.InputTokens, chat.Usage.PromptTokens)
	}

	p := anthropic.BetaMessageNewParams{Model: "tiny", MaxTokens: 8, Messages: msgs, Tools: tools, ContextManagement: cm,
		Thinking: anthropic.BetaThinkingConfigParamUnion{OfAdaptive: &anthropic.BetaThinkingConfigAdaptiveParam{}}}
	m, err := c.Beta.Messages.New(ctx, p, beta)
	if err != nil {
		t.Fatal(err)
	}
	if m.Usage.InputTokens+m.Usage.CacheReadInputTokens != n.InputTokens {
		t.Errorf("usage %+v, count_tokens %d", m.Usage, n.InputTokens)
	}
	st := c.Beta.Messages.NewStreaming(ctx, p, beta)
	var acc anthropic.BetaMessage
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil || acc.StopReason == "" {
		t.Fatalf("streamed: %v, %+v", err, acc)
	}

	for _, tc := range []struct {
		edit anthropic.BetaContextManagementConfigEditUnionParam
		want string
	}{
		{anthropic.BetaContextManagementConfigEditUnionParam{OfClearToolUses20250919: &anthropic.BetaClearToolUses20250919EditParam{}}, "context_management.edits[0].type"},
		{anthropic.BetaContextManagementConfigEditUnionParam{OfCompact20260112: &anthropic.BetaCompact20260112EditParam{}}, "context_management.edits[0].type"},
	} {
		q := p
		q.ContextManagement = anthropic.BetaContextManagementConfigParam{Edits: []anthropic.BetaContextManagementConfigEditUnionParam{tc.edit}}
		_, err := c.Beta.Messages.New(ctx, q, beta)
		ae := anthropicError(t, err, 400, "invalid_request_error")
		if !strings.Contains(ae.Message, tc.want) || !strings.Contains(ae.Message, "not supported") {
			t.Errorf("%q does not name %s as not supported", ae.Message, tc.want)
		}
	}
}

// toBetaCountTools is tools as count_tokens' params have them.
func toBetaCountTools(tools []anthropic.BetaToolUnionParam) []anthropic.BetaMessageCountTokensParamsToolUnion {
	out := make([]anthropic.BetaMessageCountTokensParamsToolUnion, len(tools))
	for i, t := range tools {
		out[i] = anthropic.BetaMessageCountTokensParamsToolUnion{OfTool: t.OfTool}
	}
	return out
}

// TestClaudeCodeRecordedRequestIsServed: the first request Claude Code 2.1.332 sent
// for `claude -p "say hi"` (testdata/clis, trimmed: shorter texts, three of its
// tools, model tiny, max_tokens lowered from 32000 to fit the test model) with its
// headers (anthropic-beta, the ?beta=true query) streams a whole message, from
// message_start to message_stop. (Before: 400 on context_management, a member the
// codec did not know.)
func TestClaudeCodeRecordedRequestIsServed(t *testing.T) {
	es := startEngineServer(t)
	body, err := os.ReadFile(filepath.Join("testdata", "clis", "claude-code-2.1.332-messages.json"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", es.base+"/v1/messages?beta=true", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", es.key)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24")
	req.Header.Set("anthropic-dangerous-direct-browser-access", "true")
	req.Header.Set("x-app", "cli")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	var all strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok && ev != "ping" {
			events = append(events, ev)
		}
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, all.String())
	}
	if len(events) < 4 || events[0] != "message_start" || events[len(events)-1] != "message_stop" {
		t.Fatalf("events %v", events)
	}
}

// TestSDKResponsesClientMetadataIsAccepted: client_metadata, which Codex 0.171.0
// sends on every turn (an object of strings), is accepted through the official
// openai-go client, and a value of another shape is a 400 naming it. (Before: 400
// "unrecognized request argument supplied: client_metadata".)
func TestSDKResponsesClientMetadataIsAccepted(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	p := responses.ResponseNewParams{Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("say hi")}, MaxOutputTokens: openai.Int(4)}
	r, err := es.client.Responses.New(ctx, p, option.WithJSONSet("client_metadata", map[string]string{"session_id": "s1", "turn_id": "t1"}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.Usage.OutputTokens != 4 {
		t.Fatalf("response %+v", r)
	}
	_, err = es.client.Responses.New(ctx, p, option.WithJSONSet("client_metadata", map[string]any{"n": 1}))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.HasPrefix(ae.Param, "client_metadata") {
		t.Fatalf("client_metadata with a number: %v, want 400 naming client_metadata", err)
	}
}

// TestCodexRecordedRequestIsServed: the first request Codex 0.171.0 sent for `codex
// exec "say hi"` with web search, multi-agent and goals off (testdata/clis, trimmed:
// shorter texts, two of its tools, ids zeroed, model tiny, max_output_tokens added
// to bound it) streams a whole response, from response.created to its end.
// (Before: 400 on client_metadata.)
func TestCodexRecordedRequestIsServed(t *testing.T) {
	es := startEngineServer(t)
	body, err := os.ReadFile(filepath.Join("testdata", "clis", "codex-0.171.0-responses.json"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", es.url+"/responses", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+es.key)
	req.Header.Set("originator", "codex_exec")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	var all strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, all.String())
	}
	if len(events) < 4 || events[0] != "response.created" || !strings.Contains("response.completed response.incomplete", events[len(events)-1]) {
		t.Fatalf("events %v", events)
	}
}
