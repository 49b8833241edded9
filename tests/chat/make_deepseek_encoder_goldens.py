"""Writes data/deepseek_encoder_goldens.json for deepseek_encoder_test.cpp: conversations encoded by DeepSeek's own
reference encoders (encoding/encoding_dsv32.py of DeepSeek-V3.2 and encoding/encoding_dsv4.py of DeepSeek-V4, read
from the paths given, never vendored here), and sample completions parsed back by their parsers.

Three kinds of goldens:
- "encode": encode_messages(messages, thinking_mode, drop_thinking, reasoning_effort) as the reference computes it;
  where the reference raises, the golden is the exception's class name.
- "request": an OpenAI chat request rendered the way tern's server renders it (request_to_encoder below: tools and
  response_format attached to the leading system message, inserted when there is none; chat_template_kwargs'
  thinking / enable_thinking, drop_thinking and reasoning_effort), then encoded by the reference.
- "parse": parse_message_from_completion_text(completion, thinking_mode) on well-formed completions.

Given DeepSeek-V4's encoding/tests folder as well, its own test conversations 1-3 (test_input_N.json, checked
against its test_output_N.txt) become "encode" goldens too; its case 4 uses the internal task tokens tern leaves out.

Run: python3 tests/chat/make_deepseek_encoder_goldens.py PATH/encoding_dsv32.py PATH/encoding_dsv4.py [V4_TESTS_DIR]
"""
import copy
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "data", "deepseek_encoder_goldens.json")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "How many days to forecast"},
            },
            "required": ["city"],
        },
    },
}
FLIGHTS_TOOL = {
    "type": "function",
    "function": {
        "name": "search_flights",
        "description": "Search flights between airports.",
        "parameters": {
            "type": "object",
            "properties": {
                "airports": {"type": "array", "items": {"type": "string"}},
                "passengers": {"type": "object", "properties": {"adults": {"type": "integer"}}},
                "direct_only": {"type": "boolean"},
                "max_price": {"type": "number"},
            },
            "required": ["airports"],
        },
    },
}
TOOLS = [WEATHER_TOOL, FLIGHTS_TOOL]
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer"],
}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


WEATHER_CALL = call("call_1", "get_weather", {"city": "Paris", "days": 3})
FLIGHTS_CALL = call(
    "call_2",
    "search_flights",
    {"airports": ["CDG", "NRT"], "passengers": {"adults": 2}, "direct_only": False, "max_price": 1234.5},
)
UNICODE_CALL = call("call_3", "get_weather", {"city": "東京 — Tōkyō", "unit": "celsius"})


def system(content, **extra):
    return {"role": "system", "content": content, **extra}


def user(content):
    return {"role": "user", "content": content}


def assistant(content, reasoning=None, tool_calls=None):
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return message


def tool(call_id, content):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# Conversations for encode_messages; each is encoded in every mode listed in MODES.
CONVERSATIONS = {
    "single_user": [user("Hello!")],
    "system_and_user": [system("You are a helpful assistant."), user("What is 2+2?")],
    "empty_system": [system(""), user("Hi")],
    "multi_turn": [
        system("Be brief."),
        user("Name a color."),
        assistant("Blue.", reasoning="Pick one."),
        user("Another?"),
    ],
    "multi_turn_three": [
        user("a"),
        assistant("b", reasoning="r1"),
        user("c"),
        assistant("d", reasoning="r2"),
        user("e"),
    ],
    "ends_with_assistant": [user("Say hi"), assistant("Hi!", reasoning="Greeting.")],
    "assistant_without_reasoning": [user("Say hi"), assistant("Hi!"), user("Again")],
    "unicode": [
        system("Réponds en français. 🙂"),
        user("¿Qué tal? 你好，世界！ Ωμέγα \u00e9\u0301 \U0001f680"),
        assistant("Très bien — 很好。", reasoning="思考中…"),
        user("Et maintenant ? \"quotes\" and \\backslash\\ and\ttabs\nnewlines"),
    ],
    "special_text_in_content": [user("What does <think> mean? And </think>?")],
    "tools_on_system": [system("You can call tools.", tools=TOOLS), user("Weather in Paris for 3 days?")],
    "tools_system_no_content": [{"role": "system", "tools": [WEATHER_TOOL]}, user("Weather?")],
    "tool_call_and_result": [
        system("Use tools.", tools=TOOLS),
        user("Weather in Paris?"),
        assistant("", reasoning="Need the weather tool.", tool_calls=[WEATHER_CALL]),
        tool("call_1", "Sunny, 24°C"),
    ],
    "tool_call_result_and_answer": [
        system("Use tools.", tools=TOOLS),
        user("Weather in Paris?"),
        assistant(None, reasoning="Need the weather tool.", tool_calls=[WEATHER_CALL]),
        tool("call_1", "Sunny, 24°C"),
        assistant("It is sunny, 24°C.", reasoning="Report it."),
        user("Thanks! And flights CDG to NRT?"),
    ],
    "several_calls_one_turn": [
        system("", tools=TOOLS),
        user("Weather in Paris, and flights CDG-NRT for two adults under 1234.5, not direct."),
        assistant("Let me check both.", reasoning="Two tools at once.", tool_calls=[WEATHER_CALL, FLIGHTS_CALL]),
        tool("call_1", "Sunny"),
        tool("call_2", '[{"flight": "AF276", "price": 1200}]'),
    ],
    "several_calls_answered": [
        system("", tools=TOOLS),
        user("Weather and flights?"),
        assistant("", reasoning="Both.", tool_calls=[WEATHER_CALL, FLIGHTS_CALL]),
        tool("call_1", "Sunny"),
        tool("call_2", "AF276"),
        assistant("Sunny; AF276 is available.", reasoning="Summarize."),
    ],
    "unicode_tool_call": [
        system("Tools.", tools=[WEATHER_TOOL]),
        user("東京の天気は？"),
        assistant("", reasoning="天気ツール。", tool_calls=[UNICODE_CALL]),
        tool("call_3", "晴れ ☀️"),
    ],
    "content_before_call": [
        system("", tools=[WEATHER_TOOL]),
        user("Paris?"),
        assistant("Checking the weather now.", reasoning="Call it.", tool_calls=[WEATHER_CALL]),
        tool("call_1", "Rain"),
        assistant("Rain in Paris.", reasoning="Done."),
        user("ok"),
    ],
    "empty_arguments_call": [
        system("", tools=[{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]),
        user("Time?"),
        assistant("", reasoning="Ask the clock.", tool_calls=[call("c0", "now", {})]),
        tool("c0", "12:00"),
    ],
    "typed_arguments_call": [
        system("", tools=[WEATHER_TOOL]),
        user("x"),
        assistant(
            "",
            reasoning="Typed.",
            tool_calls=[
                call("c1", "get_weather", {"s": "text", "i": 7, "f": 0.5, "b": True, "n": None, "l": [1, "a"], "o": {"k": [True]}})
            ],
        ),
        tool("c1", "ok"),
    ],
    "response_format_on_system": [system("Answer in JSON.", response_format=SCHEMA), user("Capital of France?")],
    "response_format_only": [{"role": "system", "response_format": SCHEMA}, user("Capital of Japan?")],
    "tools_and_response_format": [
        system("Both.", tools=[WEATHER_TOOL], response_format=SCHEMA),
        user("Weather as JSON?"),
    ],
    "two_systems": [system("First."), system("Second."), user("Hi")],
    "long_multi_turn_with_tools": [
        system("Agent.", tools=TOOLS),
        user("Plan a trip."),
        assistant("", reasoning="Weather first.", tool_calls=[WEATHER_CALL]),
        tool("call_1", "Sunny"),
        assistant("", reasoning="Now flights.", tool_calls=[FLIGHTS_CALL]),
        tool("call_2", "AF276"),
        assistant("Sunny; take AF276.", reasoning="Answer."),
        user("Book it."),
    ],
    "multiline_content": [user("line one\nline two\n\n  indented\n"), assistant("x\ny", reasoning="a\nb"), user("z")],
    "empty_user": [user("")],
}

V4_ONLY_CONVERSATIONS = {
    "developer_role": [{"role": "developer", "content": "Search the web.", "tools": [WEATHER_TOOL]}, user("News?")],
    "latest_reminder": [
        system("Sys."),
        user("Hi"),
        {"role": "latest_reminder", "content": "Today is 2026-01-15."},
    ],
    "tool_results_then_user_text": [
        system("", tools=[WEATHER_TOOL]),
        user("Paris?"),
        assistant("", reasoning="Call.", tool_calls=[WEATHER_CALL]),
        tool("call_1", "Sunny"),
        user("And tomorrow?"),
    ],
    "tool_results_out_of_order": [
        system("", tools=TOOLS),
        user("Both?"),
        assistant("", reasoning="Both.", tool_calls=[WEATHER_CALL, FLIGHTS_CALL]),
        tool("call_2", "AF276"),
        tool("call_1", "Sunny"),
    ],
    "tool_result_parts": [
        system("", tools=[WEATHER_TOOL]),
        user("Paris?"),
        assistant("", reasoning="Call.", tool_calls=[WEATHER_CALL]),
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "part 1"}, {"type": "text", "text": "part 2"}]},
    ],
    "non_json_arguments": [
        system("", tools=[WEATHER_TOOL]),
        user("x"),
        assistant("", reasoning="r", tool_calls=[{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}]),
        tool("c", "?"),
    ],
}

# Conversations the references refuse.
ERROR_CONVERSATIONS = {
    "developer_without_content": [{"role": "developer", "content": ""}, user("x")],
    "unknown_role": [{"role": "narrator", "content": "x"}, user("y")],
}
V32_ERROR_CONVERSATIONS = {
    "tool_without_call": [user("x"), tool("c", "result")],
    "thinking_answer_without_reasoning": [user("x"), assistant("answer")],
}

MODES = [
    {"thinking_mode": "chat"},
    {"thinking_mode": "thinking"},
    {"thinking_mode": "thinking", "drop_thinking": False},
]
V4_EXTRA_MODES = [
    {"thinking_mode": "thinking", "reasoning_effort": "max"},
    {"thinking_mode": "thinking", "reasoning_effort": "high"},
    {"thinking_mode": "chat", "reasoning_effort": "max"},
]


def request_to_encoder(request):
    """An OpenAI chat request as tern renders it with the built-in encoder (src/chat/deepseek_encoder.cpp)."""
    kwargs = request.get("chat_template_kwargs", {})
    messages = copy.deepcopy(request["messages"])
    tools = request.get("tools")
    response_format = request.get("response_format")
    schema = None
    if response_format and response_format.get("type") == "json_schema":
        schema = response_format["json_schema"].get("schema")
    if tools or schema:
        if not messages or messages[0].get("role") != "system":
            messages.insert(0, {"role": "system"})
        if tools:
            messages[0]["tools"] = tools
        if schema:
            messages[0]["response_format"] = schema
    options = {
        "thinking_mode": "thinking" if kwargs.get("thinking") or kwargs.get("enable_thinking") else "chat",
        "drop_thinking": kwargs.get("drop_thinking", True),
    }
    return messages, options, kwargs.get("reasoning_effort")


REQUESTS = {
    "plain": {"messages": [user("Hello")]},
    "thinking_key": {"messages": [user("Hello")], "chat_template_kwargs": {"thinking": True}},
    "enable_thinking_key": {"messages": [system("S"), user("Hello")], "chat_template_kwargs": {"enable_thinking": True}},
    "thinking_off": {"messages": [user("Hello")], "chat_template_kwargs": {"thinking": False}},
    "tools_no_system": {"messages": [user("Weather in Paris?")], "tools": TOOLS},
    "tools_with_system": {"messages": [system("You are terse."), user("Weather?")], "tools": [WEATHER_TOOL]},
    "tools_thinking_history": {
        "messages": [
            system("Agent."),
            user("Weather in Paris?"),
            assistant(None, reasoning="Call the tool.", tool_calls=[WEATHER_CALL]),
            tool("call_1", "Sunny"),
        ],
        "tools": TOOLS,
        "chat_template_kwargs": {"thinking": True},
    },
    "response_format_schema": {
        "messages": [user("Capital of France?")],
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}},
    },
    "response_format_json_object": {"messages": [user("JSON please")], "response_format": {"type": "json_object"}},
    "drop_thinking_off": {
        "messages": [user("a"), assistant("b", reasoning="r"), user("c")],
        "chat_template_kwargs": {"thinking": True, "drop_thinking": False},
    },
}
V4_REQUESTS = {
    "reasoning_effort_max": {"messages": [user("Prove it.")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "max"}},
    "reasoning_effort_ignored": {"messages": [user("Prove it.")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "low"}},
}

# Completions (as the model writes them, ending in EOS) for the reference parsers.
EOS = "<｜end▁of▁sentence｜>"


def dsml_block(block_name, invokes):
    lines = [f"<｜DSML｜{block_name}>"]
    for name, params in invokes:
        lines.append(f'<｜DSML｜invoke name="{name}">')
        for key, value, is_string in params:
            lines.append(f'<｜DSML｜parameter name="{key}" string="{is_string}">{value}</｜DSML｜parameter>')
        lines.append("</｜DSML｜invoke>")
    lines.append(f"</｜DSML｜{block_name}>")
    return "\n".join(lines)


def completions(block_name):
    weather = ("get_weather", [("city", "Paris", "true"), ("days", "3", "false")])
    flights = (
        "search_flights",
        [
            ("airports", '["CDG", "NRT"]', "false"),
            ("passengers", '{"adults": 2}', "false"),
            ("direct_only", "false", "false"),
            ("max_price", "1234.5", "false"),
        ],
    )
    multiline = ("get_weather", [("city", "New\nYork <b>\"quoted\"</b>", "true")])
    unicode_call = ("get_weather", [("city", "東京", "true"), ("unit", "celsius", "true")])
    number_as_string = ("get_weather", [("city", "42", "true"), ("days", "null", "false")])
    return [
        ("thinking", "Simple arithmetic.</think>2 + 2 = 4." + EOS),
        ("thinking", "Line one.\nLine two.</think>\n\nAnswer with leading newlines." + EOS),
        ("thinking", "思考。</think>答案：4 🙂" + EOS),
        ("thinking", "Need weather.</think>\n\n" + dsml_block(block_name, [weather]) + EOS),
        ("thinking", "Both.</think>Checking both.\n\n" + dsml_block(block_name, [weather, flights]) + EOS),
        ("thinking", "</think>" + "\n\n" + dsml_block(block_name, [multiline]) + EOS),
        ("chat", "Hello there." + EOS),
        ("chat", "Plain answer\nwith lines." + EOS),
        ("chat", "\n\n" + dsml_block(block_name, [unicode_call]) + EOS),
        ("chat", "Sure.\n\n" + dsml_block(block_name, [number_as_string, weather]) + EOS),
        ("chat", "\n\n" + dsml_block(block_name, [("now", [])]) + EOS),
    ]


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def encode_golden(module, messages, options):
    try:
        return {"prompt": module.encode_messages(copy.deepcopy(messages), **options)}
    except Exception as e:  # the reference refuses the conversation: record how
        return {"error": type(e).__name__}


def v4_release_tests(module, tests_dir):
    """DeepSeek-V4's own test conversations, all encoded in thinking mode as its test_encoding_dsv4.py does."""
    goldens = []
    for number in (1, 2, 3):
        with open(os.path.join(tests_dir, f"test_input_{number}.json"), encoding="utf-8") as f:
            data = json.load(f)
        messages = data["messages"] if isinstance(data, dict) else data
        if isinstance(data, dict) and "tools" in data:
            messages[0]["tools"] = data["tools"]
        with open(os.path.join(tests_dir, f"test_output_{number}.txt"), encoding="utf-8") as f:
            expected = f.read()
        options = {"thinking_mode": "thinking"}
        golden = {"version": "v4", "name": f"release_test_{number}", "messages": messages, "options": options}
        golden.update(encode_golden(module, messages, options))
        assert golden.get("prompt") == expected, f"the reference does not reproduce its own test_output_{number}.txt"
        goldens.append(golden)
    return goldens


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: make_deepseek_encoder_goldens.py PATH/encoding_dsv32.py PATH/encoding_dsv4.py [V4_TESTS_DIR]")
    encoders = {"v32": load_module("encoding_dsv32", sys.argv[1]), "v4": load_module("encoding_dsv4", sys.argv[2])}
    goldens = {"encode": [], "request": [], "parse": []}
    for version, module in encoders.items():
        conversations = dict(CONVERSATIONS)
        conversations.update(ERROR_CONVERSATIONS)
        conversations.update(V32_ERROR_CONVERSATIONS if version == "v32" else V4_ONLY_CONVERSATIONS)
        modes = MODES + (V4_EXTRA_MODES if version == "v4" else [])
        for name, messages in conversations.items():
            for options in modes:
                golden = {"version": version, "name": name, "messages": messages, "options": options}
                golden.update(encode_golden(module, messages, options))
                goldens["encode"].append(golden)
        requests = dict(REQUESTS)
        if version == "v4":
            requests.update(V4_REQUESTS)
        for name, request in requests.items():
            messages, options, reasoning_effort = request_to_encoder(request)
            if version == "v4":
                options["reasoning_effort"] = reasoning_effort if reasoning_effort in ("max", "high") else None
            golden = {"version": version, "name": name, "request": request}
            golden.update(encode_golden(module, messages, options))
            goldens["request"].append(golden)
        block_name = "function_calls" if version == "v32" else "tool_calls"
        for thinking_mode, text in completions(block_name):
            parsed = module.parse_message_from_completion_text(text, thinking_mode)
            goldens["parse"].append({"version": version, "thinking_mode": thinking_mode, "text": text, "message": parsed})
    if len(sys.argv) == 4:
        goldens["encode"] += v4_release_tests(encoders["v4"], sys.argv[3])
    with open(OUTPUT, "w", encoding="utf-8") as out:
        json.dump(goldens, out, ensure_ascii=False, indent=1)
        out.write("\n")
    counts = {kind: len(items) for kind, items in goldens.items()}
    errors = sum("error" in g for g in goldens["encode"] + goldens["request"])
    print(f"wrote {OUTPUT}: {counts}, {errors} refused by the reference")


if __name__ == "__main__":
    main()
