# Renders tool conversations with the chat templates of families/ (written for
# these tests in the formats of Llama 3.1/3.2, Qwen2.5, Mistral and Phi-4-mini)
# through Python's jinja2 as transformers does, for TestFamilyTemplatesGolden. The
# messages are given as the engine receives them (OpenAI's shapes: arguments as
# JSON text) and converted as the engine converts them (renderTools): arguments
# decoded; Mistral's ids made 9 letters and digits; the tools' JSON on the system
# message for a template that reads message['tools']; calls as text in the
# model's syntax for a template that reads no tool_calls.
# Run from this directory: python3 gen_family_golden.py > family-golden.json
import datetime, hashlib, json, re
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError

def raise_exception(m): raise TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def strftime_now(f): return datetime.datetime(2026, 11, 22, 10, 30, 0).strftime(f)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
def mistral_id(i):
    if len(i) == 9 and re.fullmatch(r"[A-Za-z0-9]{9}", i): return i
    return "".join(ALNUM[b % 62] for b in hashlib.sha256(i.encode()).digest()[:9])

def syntax(src):
    if "[TOOL_CALLS]" in src: return "mistral"
    if "<|tool_call|>" in src or "<|tool|>" in src: return "phi4"
    if "<tool_call>" in src: return "hermes"
    if "<|python_tag|>" in src or "ipython" in src: return "llama3"
    return "hermes"

def calls_text(syn, calls):
    key = "parameters" if syn == "llama3" else "arguments"
    objs = ['{"name": %s, "%s": %s}' % (json.dumps(c["name"]), key, c["arguments"]) for c in calls]
    if syn == "llama3": return "; ".join(objs)
    if syn == "mistral": return "[TOOL_CALLS][" + ", ".join(objs) + "]"
    if syn == "phi4": return "<|tool_call|>[" + ", ".join(objs) + "]<|/tool_call|>"
    return "\n".join("<tool_call>\n" + o + "\n</tool_call>" for o in objs)

def render(src, msgs, tools, bos, eos):
    syn = syntax(src)
    out = []
    for m in msgs:
        t = {"role": m["role"], "content": m.get("content", "")}
        calls = m.get("tool_calls")
        if calls and "tool_calls" not in src:
            text = calls_text(syn, calls)
            t["content"] = t["content"] + "\n" + text if t["content"] else text
        elif calls:
            t["tool_calls"] = [{"id": mistral_id(c["id"]) if syn == "mistral" else c["id"], "type": "function",
                                "function": {"name": c["name"], "arguments": json.loads(c["arguments"])}} for c in calls]
        if "tool_call_id" in m:
            t["tool_call_id"] = mistral_id(m["tool_call_id"]) if syn == "mistral" else m["tool_call_id"]
        out.append(t)
    vars = {}
    if tools:
        vars["tools"] = tools
        if re.search(r"""message\s*\[\s*['"]tools['"]\s*\]|message\.tools\b|['"]tools['"]\s+in\s+message\b""", src):
            fns = json.dumps([t["function"] for t in tools], ensure_ascii=False)
            if out and out[0]["role"] == "system": out[0]["tools"] = fns
            else: out.insert(0, {"role": "system", "content": "", "tools": fns})
    return env.from_string(src).render(messages=out, add_generation_prompt=True, bos_token=bos, eos_token=eos, **vars)

tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "Its name"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "now", "description": "The time, \"now\""}}]
ask = [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "Weather in Oslo, and the time?"}]
one = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_8f3a_0_0", "name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"c\"}"}]}
one_result = {"role": "tool", "tool_call_id": "call_8f3a_0_0", "content": "{\"temp\": 3, \"sky\": \"snow\"}"}
two = {"role": "assistant", "content": "Checking.", "tool_calls": [one["tool_calls"][0], {"id": "abcDEF123", "name": "now", "arguments": "{}"}]}
two_results = [one_result, {"role": "tool", "tool_call_id": "abcDEF123", "content": "10:30"}]
answer = {"role": "assistant", "content": "3 degrees and snow; it is 10:30."}
bos_eos = {"llama3": ("<|begin_of_text|>", "<|eot_id|>"), "qwen": ("", "<|im_end|>"), "mistral": ("<s>", "</s>"),
           "phi4": ("", "<|endoftext|>"), "phi4-system-tools": ("", "<|endoftext|>")}
conversations = [("offer", ask), ("one call and its result", ask + [one, one_result])]
cases = []
for family, (bos, eos) in bos_eos.items():
    src = open("families/%s.jinja" % family).read()
    convs = list(conversations)
    if family != "llama3":  # Llama's template takes one call per turn
        convs.append(("two calls, their results, the answer, a new question", ask + [two] + two_results + [answer, {"role": "user", "content": "And tomorrow?"}]))
    for name, msgs in convs:
        cases.append({"template": family, "name": name, "bos": bos, "eos": eos, "messages": msgs, "tools": tools,
                      "syntax": syntax(src), "expected": render(src, msgs, tools, bos, eos)})
print(json.dumps(cases, indent=1, ensure_ascii=False))
