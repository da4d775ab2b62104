#!/usr/bin/env python3
"""Writes tests/data/chat_template_golden.json: the renderings of the reference chat templates by
jinja2 as Hugging Face's apply_chat_template sets it up (trim_blocks, lstrip_blocks, tojson as
json.dumps(ensure_ascii=False), raise_exception; the mutable sandbox, as
llama.cpp allows list.append, which Kimi K2 uses for tool calls), for the conversations below. The C++ renderer
(core/text/jinja.h) must give the same bytes; tests/test_chat_template.cpp checks it.

usage: scripts/chat_template_golden.py ../shared/reference/templates > tests/data/chat_template_golden.json
"""
import json, sys, pathlib
from jinja2.sandbox import SandboxedEnvironment
from jinja2.exceptions import TemplateError

CHATML = ("{%- for message in messages -%}"
          "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
          "{%- endfor -%}"
          "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
MIXTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
           "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
           "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CASES = [
    {"name": "one user turn", "messages": [{"role": "user", "content": "Hi"}]},
    {"name": "system and user", "messages": [{"role": "system", "content": "You are terse."},
                                              {"role": "user", "content": "Hi"}]},
    {"name": "multi turn", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                         {"role": "user", "content": "What is 2+2?"}]},
    {"name": "no generation prompt", "add_generation_prompt": False,
     "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
    {"name": "thinking off", "extra": {"enable_thinking": False}, "messages": [{"role": "user", "content": "Hi"}]},
    {"name": "reasoning in history", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nThe user greets.\n</think>\n\nHello!"},
        {"role": "user", "content": "Bye"}]},
    {"name": "tools and a tool call", "extra": {"tools": TOOLS}, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "content": "18 C, sunny", "name": "get_weather"},
        {"role": "user", "content": "Thanks, and unicode: \u00e9\u4e2d"}]},
    # What sluice serve passes on for an OpenAI client's round trip: two parallel calls (content
    # null becomes ""), then each reply as role "tool" naming its call by tool_call_id.
    {"name": "tool replies by tool_call_id", "extra": {"tools": TOOLS}, "messages": [
        {"role": "user", "content": "Weather in Paris and Lyon?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "18 C, sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "15 C, rain"}]},
]
BOS_EOS = {"Kimi-K2-Instruct": ("[BOS]", "[EOS]"), "deepseek-ai-DeepSeek-V3.1": ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
           "Qwen-Qwen3-0.6B": ("", "<|im_end|>"), "Kimi-K3": ("[BOS]", "[EOS]"), "chatml": ("", ""), "mixtral": ("<s>", "</s>")}

def raise_exception(msg):
    raise TemplateError(msg)

def main():
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    sources = {"chatml": CHATML, "mixtral": MIXTRAL}
    for p in sorted(pathlib.Path(sys.argv[1]).glob("*.jinja")):
        sources[p.stem] = p.read_text()
    out = []
    for tname, src in sources.items():
        t = env.from_string(src)
        bos, eos = BOS_EOS.get(tname, ("", ""))
        for case in CASES:
            ctx = {"messages": case["messages"], "add_generation_prompt": case.get("add_generation_prompt", True),
                   "bos_token": bos, "eos_token": eos}
            ctx.update(case.get("extra", {}))
            try:
                text, error = t.render(**ctx), None
            except Exception as e:  # the template refuses this conversation
                text, error = None, str(e)
            out.append({"template": tname, "case": case["name"], "bos_token": bos, "eos_token": eos,
                        "add_generation_prompt": ctx["add_generation_prompt"], "messages": case["messages"],
                        "extra": case.get("extra", {}), "text": text, "error": error})
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    print()

main()
