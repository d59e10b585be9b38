# Renders tool conversations with the Qwen3 chat template (../shared) through
# Python's jinja2 as transformers does, for TestRenderChatTools. Run from this
# directory: python3 gen_tools_golden.py > tools-golden.json
import json
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError

def raise_exception(m): raise TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
qwen = json.load(open('../../../shared/testdata/hf-tokenizers/qwen3/tokenizer_config.json'))['chat_template']

tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "now"}}]
# What the engine receives: OpenAI's messages, arguments as JSON text.
msgs = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
]
def template_msgs(ms):
    out = []
    for m in ms:
        t = {"role": m["role"], "content": m["content"]}
        if "tool_calls" in m:
            t["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.loads(c["arguments"])}} for c in m["tool_calls"]]
        if "tool_call_id" in m:
            t["tool_call_id"] = m["tool_call_id"]
        out.append(t)
    return out
cases = []
for name, ms in [("offer", msgs[:2]), ("round trip", msgs)]:
    cases.append({"name": name, "messages": ms, "tools": tools,
                  "expected": env.from_string(qwen).render(messages=template_msgs(ms), tools=tools, add_generation_prompt=True, bos_token="", eos_token="<|im_end|>")})
print(json.dumps(cases, indent=1, ensure_ascii=False))
