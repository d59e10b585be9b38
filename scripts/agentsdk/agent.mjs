// The agent smoke test's Node side: the OpenAI Agents SDK (@openai/agents, pinned by
// setup.sh) runs one agent turn with a function tool against a running lmlite,
// through /v1/responses.
// usage: node agent.mjs CACHE_DIR BASE_URL API_KEY MODEL
// Each check prints one JSON line {"check", "ok", ...}; the process exits 1 on the
// first failure (the Go test names it).
import path from "node:path";
import { pathToFileURL } from "node:url";

const [cache, base, key, model] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(cache, "node_modules", p)).href);
const { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } = await load("@openai/agents/dist/index.mjs");
const { z } = await load("zod/index.js");
const OpenAI = (await load("openai/index.mjs")).default;

const report = (check, ok, extra = {}) => {
	console.log(JSON.stringify({ check, ok, ...extra }));
	if (!ok) process.exit(1);
};
setDefaultOpenAIClient(new OpenAI({ apiKey: key, baseURL: base + "/v1", timeout: 60_000, maxRetries: 0 }));
setOpenAIAPI("responses");
setTracingDisabled(true);

// The tool is required on the model call (the demo's models follow no
// instructions: the grammar makes the call); the SDK runs it, and the tool's output
// is the turn's final output (stop_on_first_tool: a second model call would be free
// text, which the demo's models do not end, and text.format cannot be combined with
// a required tool).
const calls = [];
const weather = tool({
	name: "get_weather",
	description: "The weather in a city.",
	parameters: z.object({ city: z.enum(["Paris", "Tokyo"]) }),
	execute: async ({ city }) => {
		calls.push(city);
		return `sunny in ${city}`;
	},
});
const agent = new Agent({
	name: "forecaster",
	instructions: "Call get_weather for the city asked about.",
	model,
	tools: [weather],
	modelSettings: { toolChoice: "required", temperature: 0, maxTokens: 128 },
	toolUseBehavior: "stop_on_first_tool",
});
const result = await run(agent, "What is the weather in Paris?", { maxTurns: 2 });
const kinds = result.newItems.map((i) => i.type);
report("agents.tool_call", calls.length === 1 && kinds.includes("tool_call_item") && kinds.includes("tool_call_output_item"),
	{ calls, items: kinds });
report("agents.final_output", result.finalOutput === `sunny in ${calls[0]}`, { final: result.finalOutput });
const last = result.rawResponses.at(-1);
report("agents.usage", last !== undefined && last.usage.inputTokens > 0 && last.usage.outputTokens > 0,
	{ usage: last?.usage });

// The same turn streamed (the SDK reads the Responses event stream).
calls.length = 0;
const streamed = await run(agent, "What is the weather in Tokyo?", { maxTurns: 2, stream: true });
const events = new Set();
for await (const ev of streamed) events.add(ev.type);
await streamed.completed;
report("agents.stream", calls.length === 1 && streamed.finalOutput === `sunny in ${calls[0]}` && events.has("raw_model_stream_event"),
	{ calls, events: [...events], final: streamed.finalOutput });
