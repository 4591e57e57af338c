"""Hermes-style tool calls in generated text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

This is the format Qwen, Hermes and most open chat templates teach (and what `aci.embedded`'s ChatML
template renders), so a local model's text is turned into the same calls an endpoint would return.
A block that cannot be read (broken JSON, no name, cut off before `</tool_call>`) is reported as
malformed rather than dropped silently, so the trace shows it.
"""

from __future__ import annotations

from aci import hermes
from aci.rollout.policy import Call, parse_arguments


def parse(text: str, id_prefix: str = "call") -> tuple[str, list[Call], list[str]]:
    """(text outside the readable blocks, calls, malformed blocks with the reason).

    Malformed blocks stay in the text: the history keeps what the model wrote, and the next turn shows
    it its own broken call.
    """
    calls: list[Call] = []
    malformed: list[str] = []
    kept: list[str] = []
    last = 0
    for b in hermes.blocks(text):
        if b.error:
            e = b.error
            why = "not closed by </tool_call>" if not b.closed else f"not valid JSON ({e.msg} at char {e.pos})"
            malformed.append(f"<tool_call> block {why}: {b.body[:200]}")
            continue
        obj = b.value
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            malformed.append(f"<tool_call> block without a string name: {b.body[:200]}")
            continue
        raw, args, why = parse_arguments(obj.get("arguments", {}))
        calls.append(Call(id=f"{id_prefix}_{len(calls)}", name=obj["name"], arguments_raw=raw, arguments=args,
                          parse_error=why))
        kept.append(text[last:b.start])
        last = b.end
    kept.append(text[last:])
    return "".join(kept).strip(), calls, malformed
