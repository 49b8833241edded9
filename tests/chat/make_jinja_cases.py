"""Writes jinja_cases.json: templates with the output Python's Jinja2 gives them, as the reference that
template_test.cpp checks tern's interpreter against.

The environment is the one transformers renders chat templates in (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loop controls, and its own tojson). Run: python3 make_jinja_cases.py
"""
import json
import os

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson

CONTEXT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "  Hi there  "},
        {"role": "assistant", "content": "<think>\nplan\n</think>\n\nHello!", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather: \"now\" é",
                                                "parameters": {"type": "object", "required": ["city"]}}}],
    "nums": [3, 1, 2],
    "words": ["b", "A", "a", "c"],
    "d": {"z": 1, "a": 2},
    "flag": True,
    "nothing": None,
    "pi": 3.14159,
    "text": "hello wide world",
}

CASES = [
    # statements
    ("if_elif_else", "{% if nums|length > 5 %}big{% elif nums|length > 2 %}mid{% else %}small{% endif %}"),
    ("for_loop_vars", "{% for n in nums %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                      "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
    ("for_prev_next", "{% for n in nums %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}"),
    ("for_cycle", "{% for n in nums %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("for_else", "{% for n in [] %}x{% else %}empty{% endfor %}"),
    ("for_items_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}"),
    ("for_inline_if", "{% for n in nums if n > 1 %}{{ n }}/{{ loop.index }}/{{ loop.length }} {% endfor %}"),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}"),
    ("for_string", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}"),
    ("for_break_continue", "{% for n in range(10) %}{% if n == 2 %}{% continue %}{% endif %}"
                           "{% if n == 5 %}{% break %}{% endif %}{{ n }}{% endfor %}"),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}"
                     "{{ loop.index }}|{% endfor %}"),
    ("set_scoping", "{% set x = 1 %}{% for n in nums %}{% set x = n %}{{ x }}{% endfor %}|{{ x }}"),
    ("set_tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}"),
    ("namespace", "{% set ns = namespace(count=0, found=false) %}{% for n in nums %}{% set ns.count = ns.count + n %}"
                  "{% if n == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}"),
    ("block_set", "{% set body %}  Hello {{ 'x' }}  {% endset %}[{{ body }}]"),
    ("block_set_filter", "{% set body | upper | trim %}  hey  {% endset %}[{{ body }}]"),
    ("macro_defaults", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}"
                       "{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }} {{ greet('Cy', 'Yo') }}"),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs|length }}{{ kwargs.k }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}"
                        "{% endmacro %}{{ fact(5) }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call wrap('b') %}bold {{ text }}{% endcall %}"),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}"
                        "{% call(x) each(nums) %}<{{ x }}>{% endcall %}"),
    ("filter_block", "{% filter upper %}abc {{ text }}{% endfilter %}"),
    ("with_block", "{% with a = 5, b = 'z' %}{{ a }}{{ b }}{% endwith %}{{ a is defined }}"),
    ("raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}"),
    ("comment", "a{# a comment #}b"),
    # whitespace control
    ("ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter"),
    ("ws_lstrip_blocks", "start\n    {% if true %}\n    indented\n    {% endif %}\nend"),
    ("ws_minus", "a   {{- 'b' -}}   c\n  {%- if true -%}  d  {%- endif -%}  \n e"),
    ("ws_plus", "start\n    {%+ if true %}x{% endif +%}\nend"),
    ("ws_comment_lstrip", "x\n   {# c #}\ny"),
    ("ws_variable_not_lstripped", "line\n    {{ 'v' }}\n"),
    ("ws_trailing_newline_dropped", "text\n"),
    ("ws_inline_block_keeps_text", "a {% if true %}b{% endif %} c"),
    ("ws_crlf", "x\r\n{% if true %}\r\ny\r\n{% endif %}\r\nz"),
    # expressions
    ("arithmetic", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"
                   " {{ 4 / 2 }} {{ 1.5 + 1 }} {{ 10 - 2.5 }} {{ 0.1 + 0.2 }}"),
    ("float_repr", "{{ 1.0 }} {{ 1e20 }} {{ 1e-5 }} {{ 123456789.125 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ -0.5 }}"),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ 'ab' * 3 }}"),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ [1, 2] == [1, 2] }}"
                    " {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
    ("in_not_in", "{{ 'b' in 'abc' }} {{ 2 in nums }} {{ 'z' in d }} {{ 'q' not in d }} {{ 5 not in nums }}"),
    ("logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not flag }} {{ none or 0 or 'z' }} {{ 0 and 1 }}"),
    ("ternary", "{{ 'yes' if flag else 'no' }} {{ 'a' if nothing }}|{{ 'n' if nothing else 'y' if flag else 'z' }}"),
    ("literals", "{{ [1, 'two', 3.0, none, true, false] }} {{ {'k': 'v', 'n': [1]} }} {{ (1, 2) | list }}"
                 " {{ True }} {{ None }}"),
    ("string_escapes", "{{ 'tab\\there' }}|{{ \"quote\\\"s\" }}|{{ 'new\\nline' }}|{{ 'uni\\u00e9' }}|{{ 'back\\\\' }}"),
    ("attr_and_item", "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }} {{ d.z }}"
                      " {{ messages[9] is defined }} {{ d.missing is defined }} {{ messages.0.role }}"),
    ("slicing", "{{ nums[::-1] }} {{ nums[1:] }} {{ nums[:1] }} {{ text[6:10] }} {{ text[::-2] }} {{ nums[-2:] }}"
                " {{ 'héllo'[1:3] }}"),
    ("string_methods", "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|"
                       "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|"
                       "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}|"
                       "{{ 'MiXed'.upper() }}{{ 'MiXed'.lower() }}|{{ 'aXbX'.replace('X', '-') }}|"
                       "{{ \"it's a test\".title() }}|{{ 'abcabc'.find('c') }}{{ 'abc'.find('z') }}|"
                       "{{ 'hello'.capitalize() }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\\nb\\n'.splitlines() }}|"
                       "{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'aaa'.count('a') }}"),
    ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('z') }} {{ d.get('q') }}"
                     " {{ d.get('q', 'dflt') }} {{ d.items()|list }}"),
    ("content_split_think", "{% set c = messages[2].content %}{{ c.split('</think>')[-1].lstrip('\\n') }}|"
                            "{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}"),
    ("unary", "{{ -nums[0] }} {{ -(1 + 2) }} {{ +3 }} {{ -3|abs }}"),
    # filters
    ("filter_trim_length", "[{{ messages[1].content|trim }}] {{ messages|length }} {{ text|count }} {{ 'héllo'|length }}"),
    ("filter_tojson", "{{ tools|tojson }}"),
    ("filter_tojson_indent", "{{ tools[0]|tojson(indent=2) }}"),
    ("filter_tojson_values", "{{ [1.5, 2.0, none, true, 'a\\u0001\\t\"', {}, []]|tojson }} {{ d|tojson(sort_keys=true) }}"),
    ("filter_tojson_separators", "{{ d|tojson(separators=(',', ':')) }}"),
    ("filter_items", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}"),
    ("filter_selectattr", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}"
                          " {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}"
                          " {{ messages|selectattr('tool_calls', 'defined')|list|length }}"
                          " {{ messages|selectattr('tool_calls')|map(attribute='role')|first }}"),
    ("filter_select", "{{ nums|select('odd')|list }} {{ nums|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }}"),
    ("filter_map", "{{ words|map('upper')|join('') }} {{ messages|map(attribute='tool_calls', default='-')|list|length }}"
                   " {{ messages|map(attribute='role')|list }}"),
    ("filter_join", "{{ nums|join }} {{ nums|join(', ') }} {{ messages|join('/', attribute='role') }}"),
    ("filter_default", "{{ missing|default('dflt') }} {{ missing|d('d2') }} {{ ''|default('e', true) }}"
                       " {{ nothing|default('n') }} {{ 0|default('zero', boolean=true) }}"),
    ("filter_first_last", "{{ nums|first }} {{ nums|last }} {{ 'abc'|first }} {{ 'abc'|last }}"),
    ("filter_list_string", "{{ 'abc'|list }} {{ d|list }} {{ 42|string ~ '!' }} {{ nums|string }}"),
    ("filter_numbers", "{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3|float }}"
                       " {{ '2.5'|float }} {{ 3.9|int }} {{ -4|abs }} {{ -2.5|abs }}"),
    ("filter_round", "{{ 2.5|round }} {{ 3.5|round }} {{ pi|round(2) }} {{ 7|round }} {{ 2.675|round(2) }}"
                     " {{ pi|round(1, 'floor') }} {{ pi|round(1, 'ceil') }}"),
    ("filter_case", "{{ text|upper }} {{ 'ABC'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ \"it's a-b (c)\"|title }}"),
    ("filter_replace", "{{ text|replace('o', '0') }} {{ text|replace('o', '0', 1) }}"),
    ("filter_escape_safe", "{{ '<a href=\"x\">&\\'</a>'|escape }} {{ '<b>'|e }} {{ '<i>'|safe }}"),
    ("filter_unique", "{{ words|unique|list }} {{ [1, 2, 1, 3]|unique|list }} {{ words|unique(case_sensitive=true)|list }}"),
    ("filter_reverse", "{{ nums|reverse|list }} {{ 'abc'|reverse }}"),
    ("filter_sort", "{{ nums|sort }} {{ words|sort }} {{ words|sort(reverse=true) }} {{ words|sort(case_sensitive=true) }}"
                    " {{ messages|sort(attribute='role')|map(attribute='role')|list }}"),
    ("filter_wordcount", "{{ text|wordcount }} {{ ''|wordcount }}"),
    ("filter_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}"),
    ("filter_dictsort_sum_minmax", "{{ d|dictsort }} {{ nums|sum }} {{ nums|min }} {{ nums|max }} {{ words|min }}"),
    ("filter_format", "{{ '%s has %d' % ('x', 3) }} {{ '%s!'|format('hi') }}"),
    # tests
    ("tests_types", "{{ missing is defined }}{{ missing is undefined }}{{ nothing is none }}{{ text is string }}"
                    "{{ 1 is number }}{{ 1.5 is number }}{{ 1 is integer }}{{ 1.5 is integer }}{{ 1.5 is float }}"
                    "{{ d is mapping }}{{ nums is mapping }}{{ nums is iterable }}{{ text is sequence }}"
                    "{{ flag is boolean }}{{ flag is true }}{{ flag is false }}{{ 1 is boolean }}"),
    ("tests_values", "{{ 2 is equalto 2 }}{{ 2 is eq 3 }}{{ 2 is ne 3 }}{{ 2 is in nums }}{{ 3 is odd }}{{ 3 is even }}"
                     "{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ nothing is not none }}{{ 'ab' is lower }}"
                     "{{ 3 is gt 2 }}{{ 3 is lt 2 }}"),
    # globals and context
    ("range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}"),
    ("dict_global", "{{ dict(a=1, b='x') }}"),
    ("undefined_prints_empty", "[{{ missing }}][{{ d.missing }}][{{ nothing }}]"),
    ("none_attribute_is_undefined", "[{{ nothing.foo }}] {{ nothing.foo is defined }}"),
    ("tool_loop", "{% for tool in tools %}{{ tool.function.name }}: {{ tool.function.parameters.required|tojson }}"
                  "{% endfor %}"),
    # dict literals with non-string keys, undefined subscripts, unpacked arguments, filters on none
    ("dict_non_string_keys", "{% set d2 = {0: 'zero', 16384: 'big', true: 'yes', none: 'nil', 'k': 1} %}{{ d2 }}"
                             " {{ d2[0] }}{{ d2[1] }}{{ d2[none] }}{{ d2[16384] }} {{ d2|tojson }}"
                             " {{ 0 in d2 }}{{ 2 in d2 }} {{ d2.get(0) }} {{ {1: 'a', 1.0: 'b'} }} {{ {1.5: 2}|tojson }}"),
    ("dict_int_keys_sorted", "{% for k, v in {4096: 512, 0: 0, 512: 128}|dictsort %}{{ k }}:{{ v }},{% endfor %}"),
    ("undefined_subscript_key", "[{{ d[missing] }}][{{ d[d.nope] }}][{{ d[missing] is defined }}]"
                                "[{{ nums[missing] is defined }}][{{ d[[1]] is defined }}]"),
    ("unpacked_arguments", "{% macro m(a, b, c=3) %}{{ a }}{{ b }}{{ c }}{{ kwargs }}{% endmacro %}"
                           "{{ m(*[1, 2]) }} {{ m(1, *[2]) }} {{ m(**{'a': 1, 'b': 2}) }} {{ m(1, c=9, *[2]) }}"
                           " {{ m(*(1, 2), **{'c': 4, 'x': 5}) }} {{ dict(**d) }} {{ '{}-{}'.format(*nums) }}"),
    ("filters_on_none", "{{ nothing|select|list }}{{ nothing|reject('none')|list }}{{ nothing|selectattr('a')|list }}"
                        "{{ nothing|rejectattr('a')|list }}{{ nothing|map(attribute='a')|list }}{{ ''|map('upper')|list }}"),
    # string methods
    ("str_format", "{{ '{} and {}'.format('a', 1) }}|{{ '{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|"
                   "{{ '{:>6}|{:<6}|{:^7}|{:*^7}'.format('r', 'l', 'c', 'f') }}|{{ '{:.2f} {:+d} {:,} {:_} {:08.3f}'.format(pi, 5, 1234567, 1000000, -pi) }}|"
                   "{{ '{:x} {:#X} {:o} {:#b} {:e} {:.3g} {:%}'.format(255, 255, 8, 5, 12345.678, 0.0001234, 0.25) }}|"
                   "{{ '{0[role]} {0.role} {1[0]}'.format(messages[0], nums) }}|{{ '{!r} {!s}'.format('q', 'q') }}|"
                   "{{ '{{}} {:{w}}|'.format('v', w=4) }}{{ '{:.3}'.format('abcdef') }}|{{ '{}'.format(none) }}|{{ '{:5}'.format(true) }}|"
                   "{{ '{}'.format(1.0) }} {{ '{:.3}'.format(1.0) }} {{ '{:g}'.format(1e20) }} {{ '{:d}'.format(true) }}"),
    ("str_padding", "[{{ 'ab'.ljust(5) }}][{{ 'ab'.rjust(5, '*') }}][{{ 'ab'.center(7, '-') }}][{{ 'abc'.center(6) }}]"
                    "[{{ '42'.zfill(5) }}][{{ '-42'.zfill(6) }}][{{ 'héllo'.center(9, '·') }}][{{ 'long'.ljust(2) }}]"),
    ("str_partition", "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }}"
                      " {{ 'abc'.rpartition('x') }}"),
    ("str_case", "{{ 'Straße ǅ ﬁ'.casefold() }} {{ 'Hello wORLD ß'.swapcase() }} {{ 'ß'|upper }} {{ 'ß'.upper() }}"
                 " {{ 'ﬁx'|upper }} {{ 'İ'.lower()|length }} {{ 'ß'.title() }} {{ 'ß'.capitalize() }} {{ 'ßa b'|title }}"),
    ("percent_format", "{{ '%(a)s-%(b)05.1f' % {'a': 'x', 'b': 2.25} }} {{ '%5s|%-5s|%05d|%+d|%x|%#o|%e|%g|%c|%r|%%' % ('a', 'b', 42, 7, 255, 8, 1234.5, 0.00001, 65, 'q') }}"
                       " {{ '%s' % [1, 2] }} {{ '%s' % {'k': 1} }} {{ '%.3s|%.2d|%i' % ('abcdef', 5, 3.9) }} {{ '%(k)s'|format(k='kw') }}"),
    ("dict_views", "{{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.keys()|list }} {{ d.items()|length }}"
                   " {{ 'z' in d.keys() }} {{ d.keys()|first }}"),
    # filters
    ("filter_batch_slice", "{{ range(7)|batch(3)|list }} {{ range(7)|batch(3, 'x')|list }} {{ range(7)|slice(3)|list }}"
                           " {{ range(7)|slice(3, 0)|list }} {{ []|batch(2)|list }}"),
    ("filter_groupby", "{% for g in messages|groupby('role') %}{{ g.grouper }}:{{ g.list|length }};{% endfor %}"
                       "{% for role, items in messages|groupby('role') %}{{ role }}={{ items|map(attribute='content')|first|truncate(9, true) }};{% endfor %}"
                       "{{ [{'k': 'A'}, {'k': 'a'}, {'k': 'b'}]|groupby('k')|map(attribute='grouper')|list }}"
                       "{{ [{'k': 'A'}, {'k': 'a'}]|groupby('k', case_sensitive=true)|list }}"
                       "{{ [{'x': 1}, {'k': 2}]|groupby('k', default=0)|map(attribute='grouper')|list }}"),
    ("filter_truncate", "[{{ text|truncate(9) }}][{{ text|truncate(9, true) }}][{{ text|truncate(11, end='…') }}]"
                        "[{{ text|truncate(12, leeway=0) }}][{{ 'short'|truncate(3, leeway=2) }}][{{ text|truncate }}]"),
    ("filter_wordwrap", "{{ 'The quick brown fox jumps over the lazy dog, a well-known pangram used everywhere.'|wordwrap(20) }}|"
                        "{{ 'abcdefghijklmnopqrstuvwxyz'|wordwrap(10) }}|{{ 'abcdefghijklmnopqrstuvwxyz xy'|wordwrap(10, false) }}|"
                        "{{ 'a b\n\nc  d   e'|wordwrap(3, wrapstring='/') }}|{{ 'self-contained well-known'|wordwrap(8) }}|"
                        "{{ 'self-contained well-known'|wordwrap(8, break_on_hyphens=false) }}|{{ '  lead and trail  '|wordwrap(5) }}"),
    ("filter_striptags", "{{ '<p>Hello <b>World</b> &amp; <!-- gone <b> --> friends&#33; &lt;3 &#x263A; &raquo;</p>\n\t x'|striptags }}"),
    ("filter_urlencode", "{{ 'a b/c?d=é&'|urlencode }} {{ {'q': 'a b', 'n': 1, 'x/y': '&'}|urlencode }} {{ [('k', 'v w'), ('z', 2)]|urlencode }}"
                         " {{ 42|urlencode }}"),
    ("filter_pprint", "{{ d|pprint }}|{{ {'b': [1, 2], 'a': 'x'}|pprint }}|{{ messages|pprint }}|{{ tools|pprint }}|"
                      "{{ (1,)|pprint }}|{{ ('word ' * 30)|pprint }}|{{ {'k': 'word ' * 30}|pprint }}"),
    ("filter_center_format", "[{{ 'x'|center(6) }}][{{ 'ab'|center(5) }}][{{ '%s=%d'|format('n', 3) }}]"),
    # loops
    ("loop_changed", "{% for m in messages %}{% if loop.changed(m.role) %}[{{ m.role }}]{% endif %}{% endfor %}"
                     "{% for n in [1, 1, 2, 2, 1] %}{{ loop.changed(n) }},{% endfor %}"
                     "{% for n in [1, 1, 2] %}{{ loop.changed(n, loop.index) }},{% endfor %}"),
    ("loop_recursive", "{% for node in [{'n': 'a', 'c': [{'n': 'b', 'c': [{'n': 'c', 'c': []}]}, {'n': 'd', 'c': []}]}] recursive %}"
                       "<{{ node.n }}@{{ loop.depth }}/{{ loop.depth0 }}:{{ loop.index }}{{ loop(node.c) }}>{% else %}.{% endfor %}"
                       "|{% for x in [[1, [2, 3]], 4] recursive %}{% if x is iterable %}({{ loop(x) }}){% else %}{{ x }}{% endif %}{% endfor %}"),
    ("big_integers", "{{ 9223372036854775807 + 1 }} {{ 2 ** 64 }} {{ -(2 ** 63) - 1 }} {{ 2 ** 100 // 3 }} {{ 2 ** 100 % 7 }}"
                     " {{ -(10 ** 20) // 7 }} {{ -(10 ** 20) % 7 }} {{ 123456789012345678901234567890 * 98765432109876543210 }}"
                     " {{ 2 ** 64 > 2 ** 63 }} {{ 2 ** 64 == 18446744073709551616 }} {{ [2 ** 70]|tojson }} {{ (2 ** 64) / 2 }}"
                     " {{ '%d|{:,}'|format(2 ** 65) }}{{ '{:,}'.format(2 ** 65) }} {{ '99999999999999999999'|int + 1 }}"
                     " {{ 2 ** 65 is even }} {{ {2 ** 64: 'k'}[2 ** 64] }} {{ (2 ** 64)|abs }} {{ -(2 ** 64)|abs }}"
                     " {{ '%d' % 1e30 }} {{ 1e30|int }} {{ '1e30'|int }} {{ -(2 ** 63) // -1 }} {{ (2 ** 64) | string | length }}"),
    ("unicode_name_escapes", "{{ '\\N{BULLET} \\N{GREEK SMALL LETTER ALPHA}\\N{greek small letter beta} \\N{EM DASH}' }}"),
    ("multiline_template", "{%- for message in messages %}\n    {%- if message.role == 'user' %}\n"
                           "        {{- '<u>' + message.content|trim + '</u>\\n' }}\n    {%- elif message.role == 'assistant' %}\n"
                           "        {{- '<a>' + message.content + '</a>\\n' }}\n    {%- endif %}\n{%- endfor %}\n"),
]

cases = []
for name, source in CASES:
    try:
        rendered = env.from_string(source).render(**CONTEXT)
    except Exception as e:
        raise SystemExit(f"case {name}: {type(e).__name__}: {e}")
    cases.append({"name": name, "template": source, "expected": rendered})

out = {"context": CONTEXT, "cases": cases}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jinja_cases.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"wrote {len(cases)} cases to {path}")
