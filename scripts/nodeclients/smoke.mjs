// The client smoke test's Node side: the official `openai` and `@anthropic-ai/sdk`
// packages (pinned by setup.sh) against a running lmlite.
// usage: node smoke.mjs CACHE_DIR BASE_URL API_KEY MODEL
// Each check prints one JSON line {"check", "ok", ...}; the process exits 1 on the
// first failure (the Go test names it). Every call is bounded by the SDKs' timeout.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [cache, base, key, model] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(cache, "node_modules", p)).href);
const OpenAI = (await load("openai/index.mjs")).default;
const Anthropic = (await load("@anthropic-ai/sdk/index.mjs")).default;

const report = (check, ok, extra = {}) => {
	console.log(JSON.stringify({ check, ok, ...extra }));
	if (!ok) process.exit(1);
};
const opts = { apiKey: key, timeout: 60_000, maxRetries: 0 };
const openai = new OpenAI({ ...opts, baseURL: base + "/v1" });
const anthropic = new Anthropic({ ...opts, baseURL: base });

// OpenAI Responses, not streamed: a stored response with text output and usage.
const r = await openai.responses.create({ model, input: "Once upon a time", max_output_tokens: 8, temperature: 0 });
report("responses.create", r.object === "response" && r.id.startsWith("resp_") && typeof r.output_text === "string" &&
	r.output_text.length > 0 && r.usage.output_tokens > 0, { id: r.id, status: r.status, text: r.output_text });

// Streamed: the event sequence ends in response.completed (or .incomplete) whose
// output text is the deltas' concatenation.
const stream = await openai.responses.create({ model, input: "Once upon a time", max_output_tokens: 8, temperature: 0, stream: true });
const types = [];
let deltas = "";
let final = null;
for await (const ev of stream) {
	types.push(ev.type);
	if (ev.type === "response.output_text.delta") deltas += ev.delta;
	if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
}
report("responses.stream", types[0] === "response.created" && final !== null && final.output_text === deltas &&
	deltas === r.output_text, { types: [...new Set(types)], text: deltas });

// Continued by previous_response_id, then read back and deleted.
const r2 = await openai.responses.create({ model, previous_response_id: r.id, input: "And then", max_output_tokens: 4, temperature: 0 });
const got = await openai.responses.retrieve(r2.id);
report("responses.previous_response_id", got.id === r2.id && got.previous_response_id === r.id);
await openai.responses.delete(r2.id);
let gone = false;
try { await openai.responses.retrieve(r2.id); } catch (e) { gone = e.status === 404; }
report("responses.delete", gone);

// Anthropic Messages, not streamed and streamed: the same greedy text.
const m = await anthropic.messages.create({ model, max_tokens: 8, temperature: 0, messages: [{ role: "user", content: "Once upon a time" }] });
const mtext = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
report("messages.create", m.type === "message" && m.role === "assistant" && mtext.length > 0 && m.usage.output_tokens > 0,
	{ id: m.id, stop_reason: m.stop_reason, text: mtext });
const ms = anthropic.messages.stream({ model, max_tokens: 8, temperature: 0, messages: [{ role: "user", content: "Once upon a time" }] });
let streamed = "";
ms.on("text", (t) => { streamed += t; });
const fm = await ms.finalMessage();
const ftext = fm.content.filter((b) => b.type === "text").map((b) => b.text).join("");
report("messages.stream", streamed === ftext && ftext === mtext && fm.stop_reason === m.stop_reason, { text: streamed });
const ct = await anthropic.messages.countTokens({ model, messages: [{ role: "user", content: "Once upon a time" }] });
// Anthropic's usage counts the prompt's tokens read from the cache apart: the
// Responses calls above may have cached this prompt's prefix.
const prompt = m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0);
report("messages.count_tokens", ct.input_tokens === prompt, { count: ct.input_tokens, usage: m.usage });

// Errors in each API's shape through each SDK's error type.
let aerr = null;
try { await new Anthropic({ ...opts, apiKey: "lml_wrong", baseURL: base }).messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: "x" }] }); } catch (e) { aerr = e; }
report("messages.auth_error", aerr !== null && aerr.status === 401 && aerr.error?.error?.type === "authentication_error");
