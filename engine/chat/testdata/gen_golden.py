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
{{ "\u00e9\n\t\u0001" | tojson }} {{ messages | tojson }}
{% macro last(xs) %}{{ xs[-1] }}{{ 2 ** 2 }}{% endmacro %}{{ last([7]) }}"""
add("python semantics", semantics, [{"role":"user","content":"only one"}], False)
# Patterns of other families' templates (written after Llama 3.2, Mistral and Gemma).
llama32 = r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
mistral = r"""{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""
gemma = r"""{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"""
conv = [{"role":"system","content":"  Sys.  "},{"role":"user","content":"U1"},{"role":"assistant","content":"A1"},{"role":"user","content":"U2"}]
add("llama32 style", llama32, conv, True, bos="<|begin_of_text|>", eos="<|eot_id|>")
add("mistral style", mistral, conv, False, bos="<s>", eos="</s>")
add("gemma style", gemma, conv[1:], True, bos="<bos>", eos="<eos>")
chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
add("chatml", "", [{"role":"system","content":"S"},{"role":"user","content":"U"}], True)
for c in cases:
    if c['template'] == "qwen": c['template'] = None
    if c['name'] == 'chatml':
        c['expected'] = env.from_string(chatml).render(messages=c['messages'], add_generation_prompt=True, bos_token="", eos_token="")
json.dump(cases, open('jinja2-golden.raw.json','w'), ensure_ascii=False, indent=1)
for c in cases: print(c['name']); print(c['expected']); print('----')
