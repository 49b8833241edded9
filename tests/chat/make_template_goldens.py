"""Writes data/template_goldens.json: every real chat template of data/templates rendered on a fixed set of
conversations as transformers' apply_chat_template renders them, for real_templates_test.cpp.

With transformers importable, its own tokenizer-free renderer (transformers.utils.chat_template_utils.
render_jinja_template) makes the goldens; without it, this replicates its Jinja environment: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls and the {% generation %} tag, its
tojson (json.dumps with ensure_ascii=False), raise_exception and strftime_now. Either way strftime_now is fixed to
FIXED_DATE (passed as a template variable, which shadows the global) so the goldens do not change with the day, and
the template sees the bos/eos tokens of its model from data/templates/index.json (which also records where each
template comes from; ollama's copies keep no tokens, so theirs are their family's usual ones). The output records
which reference made it. Where the reference raises, the golden is the exception's class name and message.

Run: python3 tests/chat/make_template_goldens.py
"""
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES_DIR = os.path.join(HERE, "data", "templates")
OUTPUT = os.path.join(HERE, "data", "template_goldens.json")
FIXED_DATE = datetime.datetime(2026, 1, 15, 9, 30, 0)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "How many days to forecast"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_flights",
        "description": "Search flights between airports.",
        "parameters": {
            "type": "object",
            "properties": {
                "airports": {"type": "array", "items": {"type": "string"}, "description": "IATA codes, in order"},
                "passengers": {
                    "type": "object",
                    "properties": {"adults": {"type": "integer"}, "children": {"type": "integer"}},
                    "description": "Who travels",
                },
                "direct_only": {"type": "boolean", "description": "Only direct flights"},
            },
            "required": ["airports"],
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]
WEATHER_CALL = {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}
FLIGHT_CALL = {"id": "call_2", "type": "function",
               "function": {"name": "search_flights",
                            "arguments": {"airports": ["CDG", "JFK"], "passengers": {"adults": 2, "children": 0}}}}

CONVERSATIONS = {
    "user_only": {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": False},
    "user_generation_prompt": {"messages": [{"role": "user", "content": "What is 2 + 2?"}],
                               "add_generation_prompt": True},
    "system_user": {"messages": [{"role": "system", "content": "You are a terse assistant."},
                                 {"role": "user", "content": "Name a prime number."}],
                    "add_generation_prompt": True},
    "multi_turn": {"messages": [{"role": "system", "content": "Answer in one line."},
                                {"role": "user", "content": "Hi, who are you?"},
                                {"role": "assistant", "content": "A helpful assistant."},
                                {"role": "user", "content": "What can you do?"}],
                   "add_generation_prompt": True},
    "ends_with_assistant": {"messages": [{"role": "user", "content": "Say yes."},
                                         {"role": "assistant", "content": "Yes."}],
                            "add_generation_prompt": False},
    "unicode": {"messages": [{"role": "user", "content": "Grüße aus Köln 🎉 — 你好，世界! \"quoted\" & <tags> ß"},
                             {"role": "assistant", "content": "Ça va? 日本語も OK 👍"},
                             {"role": "user", "content": "Ελληνικά\ttab\nnewline"}],
                "add_generation_prompt": True},
    "whitespace_content": {"messages": [{"role": "user", "content": "  padded question  \n\n"},
                                        {"role": "assistant", "content": "\n  padded answer \n"},
                                        {"role": "user", "content": "next"}],
                           "add_generation_prompt": True},
    "tools_user": {"messages": [{"role": "user", "content": "What's the weather in Paris?"}],
                   "tools": TOOLS, "add_generation_prompt": True},
    "tools_system_user": {"messages": [{"role": "system", "content": "You can call tools."},
                                       {"role": "user", "content": "Find flights from CDG to JFK for two adults."}],
                          "tools": TOOLS, "add_generation_prompt": True},
    "tool_call_content_null": {"messages": [{"role": "user", "content": "Weather in Paris for two days?"},
                                            {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
                                            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                                             "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}],
                               "tools": TOOLS, "add_generation_prompt": True},
    "parallel_tool_calls": {"messages": [{"role": "system", "content": "Use tools when useful."},
                                         {"role": "user", "content": "Weather in Paris, and flights CDG to JFK?"},
                                         {"role": "assistant", "content": "", "tool_calls": [WEATHER_CALL, FLIGHT_CALL]},
                                         {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                                          "content": "sunny"},
                                         {"role": "tool", "tool_call_id": "call_2", "name": "search_flights",
                                          "content": "[{\"flight\": \"AF006\"}]"},
                                         {"role": "assistant", "content": "Sunny, and AF006 flies direct."},
                                         {"role": "user", "content": "Thanks!"}],
                            "tools": TOOLS, "add_generation_prompt": True},
    "reasoning_content": {"messages": [{"role": "user", "content": "Is 91 prime?"},
                                       {"role": "assistant", "reasoning_content": "91 = 7 * 13.",
                                        "content": "No: 91 = 7 × 13."},
                                       {"role": "user", "content": "And 97?"}],
                          "add_generation_prompt": True},
    "thinking_disabled": {"messages": [{"role": "user", "content": "Quick: capital of Italy?"}],
                          "add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
    "consecutive_users": {"messages": [{"role": "user", "content": "First."},
                                       {"role": "user", "content": "Second."}],
                          "add_generation_prompt": True},
}


def strftime_now(format):
    return FIXED_DATE.strftime(format)


def load_templates():
    with open(os.path.join(TEMPLATES_DIR, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    for name in sorted(index):
        with open(os.path.join(TEMPLATES_DIR, name + ".jinja"), encoding="utf-8", newline="") as f:
            yield name, f.read(), index[name]


def special_tokens(entry):
    return {key: entry[key] for key in ("bos_token", "eos_token") if entry.get(key) is not None}


def transformers_renderer():
    import transformers
    from transformers.utils.chat_template_utils import render_jinja_template

    def render(template, conversation, tokens):
        rendered, _ = render_jinja_template(
            conversations=[conversation["messages"]], tools=conversation.get("tools"), chat_template=template,
            add_generation_prompt=conversation["add_generation_prompt"], strftime_now=strftime_now,
            **tokens, **conversation.get("kwargs", {}))
        return rendered[0]

    # An API change must fail here, not turn every golden into a recorded exception.
    if render("{{ bos_token }}{{ messages[0].content }}", {"messages": [{"role": "user", "content": "x"}],
                                                           "add_generation_prompt": False}, {"bos_token": "<s>"}) != "<s>x":
        raise RuntimeError("transformers' render_jinja_template did not render a trivial template")
    return f"transformers {transformers.__version__} render_jinja_template", render


def jinja2_renderer():
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        # transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body in place.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

        def _render_body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, conversation, tokens):
        compiled = env.from_string(template)
        return compiled.render(messages=conversation["messages"], tools=conversation.get("tools"), documents=None,
                               add_generation_prompt=conversation["add_generation_prompt"],
                               strftime_now=strftime_now, **tokens, **conversation.get("kwargs", {}))

    return f"jinja2 {jinja2.__version__} in transformers' chat template environment (replicated)", render


def main():
    try:
        reference, render = transformers_renderer()
    except ImportError:
        reference, render = jinja2_renderer()
    goldens = {}
    num_rendered = 0
    for name, template, entry in load_templates():
        tokens = special_tokens(entry)
        results = {}
        for conversation_name, conversation in CONVERSATIONS.items():
            try:
                results[conversation_name] = {"rendered": render(template, conversation, tokens)}
                num_rendered += 1
            except Exception as e:  # the golden records that the reference raised, and what
                results[conversation_name] = {"error": type(e).__name__, "message": str(e)}
        goldens[name] = results
    out = {"reference": reference, "strftime_now": FIXED_DATE.isoformat(), "conversations": CONVERSATIONS,
           "templates": goldens}
    with open(OUTPUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    total = len(goldens) * len(CONVERSATIONS)
    print(f"{reference}: {len(goldens)} templates x {len(CONVERSATIONS)} conversations, {num_rendered} rendered, "
          f"{total - num_rendered} raised", file=sys.stderr)


if __name__ == "__main__":
    main()
