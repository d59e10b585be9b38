import json, datetime
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError

def raise_exception(m): raise TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def strftime_now(f): return datetime.datetime(2026,11,22,10,30,0).strftime(f)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

qwen = json.load(open('../../../shared/testdata/hf-tokenizers/qwen3/tokenizer_config.json'))['chat_template']
custom = r"""{%- set ns = namespace(count=0, roles=[]) -%}
{{ strftime_now("%Y-%m-%d %A %d %b %Y") }}
{% for m in messages[::-1] if m.role != 'system' %}
{% set ns.count = ns.count + 1 %}
[{{ loop.index }}/{{ loop.length }}{% if loop.first %} first{% endif %}{% if loop.last %} last{% endif %}] {{ m.role | upper }}: {{ m.content | trim | replace("\n", " / ") }}
{% endfor %}
count={{ ns.count }} n={{ messages | length }} last={{ messages[-1].content[:5] }} {{ messages[0].content.split(' ') | tojson }}
{{ {"a": 1, "b": [true, none, 2.5, "x\"y"], "c": {"d": "é<>"}} | tojson }}
{{ "x" is string }} {{ 3 is string }} {{ 'ell' in 'hello' }} {{ 'Hello'.startswith('He') }} {{ '  pad  '.strip() }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'a-b-c'.rsplit('-', 1) | join(',') }}
{{ messages | map(attribute='role') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }}
{% if undefined_var is defined %}bad{% else %}undef ok{% endif %} {{ tools is defined }} {{ bos_token }}{{ eos_token }}
{% for i in range(3) %}{{ i }}{% if not loop.last %},{% endif %}{% endfor %} {{ "%s-%d" | format("a", 3) }} {{ 7 // 2 }} {{ 2 ** 3 }} {{ "ab" * 2 }} {{ [1,2,3][1:] }}
{%- if add_generation_prompt %}

GEN{% endif %}"""
cases = []
def add(name, tpl, msgs, agp, bos="", eos="", vars=None):
    out = env.from_string(qwen if tpl == "qwen" else tpl).render(messages=msgs, add_generation_prompt=agp, bos_token=bos, eos_token=eos, **(vars or {}))
    c = dict(name=name, template=tpl, messages=msgs, agp=agp, bos=bos, eos=eos, expected=out)
    if vars: c["vars"] = vars
    cases.append(c)

add("qwen3 think history", "qwen", [
  {"role":"system","content":"S"},
  {"role":"user","content":"Q1"},
  {"role":"assistant","content":"<think>\nr1\n</think>\n\nA1"},
  {"role":"user","content":"Q2"},
  {"role":"assistant","content":"<think>\nr2 step\n</think>\n\nA2"}], False, eos="<|im_end|>")
add("qwen3 tool turns", "qwen", [
  {"role":"user","content":"weather?"},
  {"role":"assistant","content":"calling"},
  {"role":"tool","content":"{\"t\": 20}"},
  {"role":"tool","content":"{\"t\": 21}"},
  {"role":"user","content":"<tool_response>x</tool_response>"}], True, eos="<|im_end|>")
# Keys in sorted order: Go maps are written sorted, Python dicts in insertion order.
tools = [{"function": {"description": "Get the weather", "name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}, "type": "function"}]
add("qwen3 tools", "qwen", [{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"}], True, eos="<|im_end|>", vars={"tools": tools})
add("qwen3 no thinking", "qwen", [{"role":"user","content":"Hi"}], True, eos="<|im_end|>", vars={"enable_thinking": False})
add("custom features", custom, [
  {"role":"system","content":"sys prompt here"},
  {"role":"user","content":"  hi\nthere "},
  {"role":"assistant","content":"ok"},
  {"role":"user","content":"bye now"}], True, bos="<s>", eos="</s>")
add("custom no gen", custom, [{"role":"user","content":"one two"}], False)
semantics = r"""{{ messages[-1].content }}|{{ messages[-1]['role'] }}|{{ 'abc'[-3] }}{{ 'abc'[-1] }}|{{ '日本語'[1] }}|{{ [5][-1] }}|{{ [5,6][-2] }}
{{ 'a  b c '.split() | tojson }} {{ ' a b c '.rsplit(None, 1) | tojson }} {{ 'a-b-c'.split('-', 1) | tojson }} {{ 'a-b-c'.rsplit('-', 1) | tojson }} {{ ' x  y z'.split(maxsplit=1) | tojson }}
{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ [1, 2] * 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1.5 * 2 }} {{ (-1) ** 3 }}
{{ {"k": [1, {"z": none}]} | tojson(indent=2) }}
{{ "\u00e9\n\t\u0001" | tojson }} {{ messages | tojson }}"""
add("python semantics", semantics, [{"role":"user","content":"only one"}], False)
chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
add("chatml", "", [{"role":"system","content":"S"},{"role":"user","content":"U"}], True)
for c in cases:
    if c['template'] == "qwen": c['template'] = None
    if c['name'] == 'chatml':
        c['expected'] = env.from_string(chatml).render(messages=c['messages'], add_generation_prompt=True, bos_token="", eos_token="")
json.dump(cases, open('jinja2-golden.raw.json','w'), ensure_ascii=False, indent=1)
for c in cases: print(c['name']); print(c['expected']); print('----')
