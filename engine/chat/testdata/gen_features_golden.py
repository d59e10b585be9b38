# Renders the Jinja features the model families' chat templates with tools use
# (Llama 3.1/3.2, Qwen2.5/3, Mistral v0.3/Nemo/Small, Phi-4-mini: namespace, tojson
# with indent, raise_exception, selectattr, dict order through items(), slices,
# tests, loop controls, ...) through Python's jinja2 as transformers does, for
# TestJinjaFeaturesGolden. The messages are given as the engine gives them to the
# template: tool calls with their arguments decoded.
# Run from this directory: python3 gen_features_golden.py > features-golden.json
import json, datetime
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.ext import Extension
from jinja2 import nodes
from jinja2.exceptions import TemplateError
class AssistantTracker(Extension):
    # transformers' {% generation %} block (it also records the spans; rendering is the body's)
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)
    def _render(self, caller): return caller()
def raise_exception(m): raise TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def strftime_now(f): return datetime.datetime(2026,11,22,10,30,0).strftime(f)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, AssistantTracker])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
msgs = [{"role":"system","content":"S"},{"role":"user","content":"U1"},
 {"role":"assistant","content":"","tool_calls":[{"id":"call_abc123456","name":"get_weather","arguments":"{\"city\": \"Oslo\", \"n\": 2}"}]},
 {"role":"tool","tool_call_id":"call_abc123456","content":"{\"t\": 3}"},{"role":"user","content":"U2"}]
def tmsgs(ms):
    out=[]
    for m in ms:
        t={"role":m["role"],"content":m["content"]}
        if "tool_calls" in m:
            t["tool_calls"]=[{"id":c["id"],"type":"function","function":{"name":c["name"],"arguments":json.loads(c["arguments"])}} for c in m["tool_calls"]]
        if "tool_call_id" in m: t["tool_call_id"]=m["tool_call_id"]
        out.append(t)
    return out
tools=[{"type":"function","function":{"name":"get_weather","description":"Get \"it\"","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]
probes = {
 "set none": "{% if not tools is defined %}{% set tools = none %}{% endif %}{{ tools is none }}|{{ not tools is none }}|{{ tools is not none }}",
 "tojson indent": "{% for t in tools %}{{ t | tojson(indent=4) }}{% endfor %}",
 "items method": "{% for t in tools %}{% for k, v in t.function.items() if k != 'parameters' %}{{k}}={{v}};{% if not loop.last %},{% endif %}{% endfor %}{% endfor %}",
 "items filter": "{% for k, v in messages[2].tool_calls[0].function.arguments | items %}{{k}}={{v}}{% if not loop.last %}, {% endif %}{% endfor %}",
 "selectattr eq": "{% set um = messages | selectattr('role', 'equalto', 'user') | list %}{% for m in messages %}{{ m == um[-1] }}{% endfor %}|{{ um | length }}",
 "slices": "{{ 'abcdef'[:-1] }}|{{ 'call_abc123456'[-9:] }}|{{ messages[1:] | length }}|{{ messages[::-1][0].content }}|{{ (tools[0].function | tojson)[:-1] }}",
 "tests": "{{ 'abc' is iterable }}{{ tools[0] is mapping }}{{ 'x' is string }}{{ 3 is number }}{{ messages[2].tool_calls is defined }}{{ messages[1].tool_calls is defined }}{{ messages[1].content.content is defined }}{{ none is none }}{{ tools is sequence }}{{ false is false }}",
 "get and in": "{{ messages[2].get('tool_calls') is not none }}|{{ messages[1].get('tool_calls') is none }}|{{ messages[1].get('x', 'd') }}|{{ 'tool_calls' in messages[2] }}{{ 'tool_calls' in messages[1] }}|{{ messages[3].role not in ['tool', 'tool_results'] }}",
 "list concat": "{% set f = [] %}{% for m in messages %}{% if m.role not in ['tool'] and not m.get('tool_calls') %}{% set f = f + [m] %}{% endif %}{% endfor %}{{ f | length }}",
 "string filter": "{% for m in messages %}{{ m.content|string }};{% endfor %}{{ messages[3].content|tojson }}",
 "defined global": "{{ strftime_now is defined }}{{ raise_exception is defined }}{{ nothing is defined }}",
 "reassign messages": "{% set messages = messages[1:] %}{{ messages | length }}{{ messages[0].content }}",
 "reject join": "{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', ') }}",
 "trim": "{{ '  x  ' | trim }}|{{ messages[0]['content'] | trim }}",
 "loops": "{% for m in messages %}{% if loop.index0 == 3 %}{% break %}{% endif %}{% if loop.first %}{% continue %}{% endif %}{{ loop.index }}{{ m.role[0] }}{% endfor %}",
 "ns": "{% set ns = namespace(index=0, found=false) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.index = ns.index + 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.index }}{{ ns.found }}",
 "undefined iter": "{% for c in messages[1].tool_calls %}x{% endfor %}ok{% for c in messages[2].tool_calls %}{{ c.function.name }}{{ c.id|length }}{{ c.type }}{% endfor %}",
 "args tojson": "{{ messages[2].tool_calls[0].function.arguments | tojson }}|{{ messages[2].tool_calls[0].function | tojson }}|{{ messages[2].tool_calls[0] | tojson }}",
 "map attr": "{{ tools | map(attribute='function') | map(attribute='name') | join(',') }}|{{ messages | map(attribute='role') | list | tojson }}",
 "truthy": "{% if tools %}T{% endif %}{% if messages[2].tool_calls %}C{% endif %}{% if messages[1].tool_calls %}X{% endif %}{% if messages[2].content %}Y{% endif %}",
 "str methods": "{{ ' a\\n'.strip('\\n') }}|{{ 'x</think>y'.split('</think>')[-1].lstrip('\\n') }}|{{ 'abc'.upper() }}{{ 'Abc'.lower() }}|{{ 'abc'.startswith('a') }}{{ 'abc'.endswith('c') }}|{{ 'a b'.replace(' ', '_') }}",
 "precedence": "{{ messages | length - 1 }}|{{ not messages[1].role == 'user' }}|{{ 'a' + 'b' | upper }}",
 "inline if": "{{ 'a' if tools else 'b' }}{{ 'c' if nothing else 'd' }}",
 "macro": "{% macro render(t, indent='') %}{{ indent }}{{ t.function.name }}({% for k in t.function.parameters.properties %}{{ k }}{% endfor %}){% endmacro %}{{ render(tools[0], '> ') }}",
 "block set": "{% set x %}A{{ 1 + 1 }}B{% endset %}{{ x }}|{{ x | length }}",
 "keys values": "{{ tools[0].function.keys() | list | join(',') }}|{{ tools[0].function.parameters.required | first }}|{{ tools[0].function.parameters.required | last }}",
 "dict literal tojson": "{{ {'name': tools[0].function.name, 'arguments': messages[2].tool_calls[0].function.arguments} | tojson }}",
 "default": "{{ nothing | default('dflt') }}|{{ messages[0].content | default('x') }}|{{ tools[0].function.description | default('') }}",
 "format": "{{ '%s=%d' | format('a', 3) }}|{{ '{} {}'.format('a', 'b') }}",
 "is true": "{% set enable = false %}{{ enable is false }}{{ enable is true }}{{ nothing is false }}",
 "backslash newline": "{{ 'a\\\nb' }}",
 "raise": "{% if messages | length > 2 %}{{ raise_exception('too many: ' ~ messages | length) }}{% endif %}",
 "int filter": "{{ '3' | int + 1 }}|{{ 3.7 | int }}|{{ 7 // 2 }}|{{ 7 % 3 }}|{{ 10 / 4 }}",
 "dict access": "{{ tools[0]['function']['name'] }}{{ tools[0].function['parameters'].type }}",
 "count filter": "{{ messages | selectattr('role', 'eq', 'user') | list | count }}{{ messages | rejectattr('role', 'equalto', 'user') | list | length }}",
 "capitalize title": "{{ 'hello world' | capitalize }}|{{ 'hello world' | title }}",
 "equality dict": "{{ messages[1] == messages[1] }}{{ messages[1] == messages[4] }}{{ messages[1] != messages[4] }}",
 "in list of dicts": "{{ messages[1] in messages }}",
 "tojson list": "{{ tools | tojson }}",
 "tojson sep": "{{ tools[0].function.parameters | tojson(separators=(',', ':')) }}",
 "join attr": "{{ messages | join(',', attribute='role') }}",
 "unique sort": "{{ ['b','a','b'] | unique | list | sort | join }}",
 "batch length": "{{ messages|selectattr('tool_calls', 'defined')|list|length }}",
 "string methods misc": "{{ 'a,b'.split(',') | length }}{{ 'abc'.find('c') }}{{ '  '.isspace() }}",
 "loop length revindex": "{% for m in messages %}{{ loop.length }}{{ loop.revindex0 }}{% if loop.previtem is defined %}{{ loop.previtem.role[0] }}{% endif %}{% endfor %}",
 "is in test": "{{ 'tool' is in ['tool', 'x'] }}",
 "cond in brackets": "{{ ('a' if messages | length > 3 else 'b') ~ '|' ~ [1, (2 if false else 3), 4] | join(',') }}|{{ {'k': (1 if true else 2), 'j': 'p' if false else 'q'}.j }}|{{ 'abc' | replace('b', 'X' if true else 'Y') }}",
 "cond lazy": "{{ (raise_exception('taken') if false else 'ok') }}|{{ [messages[1].content if messages[1] is defined else raise_exception('no')] | first }}",
 "cond chained": "{{ ['x' if 1 > 2 else 'y' if 2 > 3 else 'z', ('u' if true else 'v') ~ 'w'] | join(',') }}",
 "cond no else": "{{ [('a' if false), 'b'] | length }}",
 "cond nested groups": "{% set r = ('model' if messages[2]['role'] == 'assistant' else messages[2]['role']) %}{{ r }}|{{ (messages | map(attribute='role') | list)[(1 if true else 0)] }}|{{ [(('d' if nothing is defined else 'e') if true else 'f')] | first }}|{{ messages[-1 if true else 0].content }}",
 "strip methods": "{{ '  a b \\n'.rstrip() }}|{{ '\\t a '.lstrip() }}|{{ ' a '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'xxa'.lstrip('x') }}|{{ 'abc'.rstrip(none) }}|",
 "escaped backslash": r"""{{ 'a\\' }}|{{ "\\" ~ 'x' }}|{{ '"\\b"' }}|{{ ['\\u00', '0a'] | join }}|{% if '"\\n"' in ['"\\b"', '"\\n"'] %}in{% endif %}""",
 "dictsort": "{% for k, v in {'b': 1, 'A': 3, 'c': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}|{% for k, v in {'b': 1, 'A': 3, 'c': 2} | dictsort(true) %}{{ k }}{% endfor %}|{% for k, v in {'b': 1, 'A': 3, 'c': 2} | dictsort(by='value', reverse=true) %}{{ k }}{% endfor %}|{% for k, v in tools[0].function | dictsort %}{{ k }},{% endfor %}|{% for k, v in tools[0].function.parameters.properties | dictsort %}{{ k }}={{ v.type }}{% endfor %}",
 "generation block": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}<{{ m.role }}>{% endgeneration %}{% else %}{{ m.role[0] }}{% endif %}{% endfor %}",
 "ne combos": "{% if not (messages[3].role == 'tool' or messages[3].role == 'tool_results' or (messages[3].tool_calls is defined and messages[3].tool_calls is not none)) %}A{% else %}B{% endif %}",
}
cases=[]
for n,t in probes.items():
    c={"name":n,"template":t}
    try:
        c["expected"]=env.from_string(t).render(messages=tmsgs(msgs), add_generation_prompt=True, bos_token="<s>", eos_token="</s>", tools=tools)
    except Exception as e:
        c["error"]=str(e)
    cases.append(c)
print(json.dumps({"messages": msgs, "tools": tools, "cases": cases}, indent=1, ensure_ascii=False))
