"""Renders conversations with gpt-oss's chat template (chat_template.jinja) through Python's jinja2, set up as
transformers' apply_chat_template sets it up, into template_goldens.json for tests/chat/gpt_oss_template_test.cpp.
The template writes today's date; it is replaced by DATE here and in the test.

Run: python3 make_template_goldens.py   (needs jinja2; writes next to itself)
"""
import datetime
import json
import pathlib
import re

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).parent

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "default": 3},
        "tags": {"type": "array", "items": {"type": "string"}},
        "opts": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
        "either": {"oneOf": [{"type": "string"}, {"type": "number"}]}}}}}
NOW_TOOL = {"type": "function", "function": {"name": "now", "description": "Time",
                                             "parameters": {"type": "object", "properties": {}}}}

CASES = [
    {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                                    "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "content": "{\"temp\": 20}"}],
     "tools": [WEATHER_TOOL, NOW_TOOL], "add_generation_prompt": True},
    {"messages": [{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4", "thinking": "easy"}],
     "add_generation_prompt": False, "reasoning_effort": "high", "model_identity": "You are Tern."},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "thinking": "greet", "content": "Hello!"},
                  {"role": "user", "content": "Search"}],
     "builtin_tools": ["browser", "python"], "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "thinking": "need tool", "tool_calls": [
                      {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
                  {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."},
                  {"role": "user", "content": "thanks"}],
     "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    # The template refuses harmony markers in content, and (as in Python) a null content of a tool-call message.
    {"messages": [{"role": "user", "content": "x"},
                  {"role": "assistant", "content": "<|channel|>final<|message|>bad"}], "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "now", "arguments": {}}}]}], "add_generation_prompt": True},
]


def render(template, case):
    kwargs = {k: v for k, v in case.items() if k not in ("messages", "tools", "add_generation_prompt")}
    return template.render(messages=case["messages"], tools=case.get("tools"),
                           add_generation_prompt=case.get("add_generation_prompt", False),
                           bos_token="<|startoftext|>", eos_token="<|return|>", pad_token="<|endoftext|>", **kwargs)


def main():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    template = env.from_string((HERE / "chat_template.jinja").read_text())
    goldens = []
    for case in CASES:
        try:
            rendered = re.sub(r"Current date: \d{4}-\d{2}-\d{2}", "Current date: DATE", render(template, case))
            goldens.append({"request": case, "rendered": rendered})
        except Exception as error:  # the template raised, or failed as Python fails
            goldens.append({"request": case, "error": type(error).__name__})
    (HERE / "template_goldens.json").write_text(json.dumps(goldens, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
