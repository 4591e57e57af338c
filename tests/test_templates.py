"""Assistant-only loss masks for any chat template.

The oracle is transformers' own `{% generation %}` mask: for the embedded ChatML template (which has the
markers) and for copies of the Qwen3-like and Gemma-like test templates with hand-placed markers. Our mask,
computed from the *unmarked* template, must cover exactly the same tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aci import templates
from aci.embedded import CHATML_TEMPLATE
from aci.errors import ACIError

DATA = Path(__file__).parent / "data"
EXTRA_SPECIALS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<start_of_turn>", "<end_of_turn>", "<bos>"]


@pytest.fixture(scope="module")
def tok(tiny_model):
    """The embedded tokenizer plus the special tokens of the Qwen3 and Gemma templates."""
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tiny_model)
    t.add_special_tokens({"additional_special_tokens": EXTRA_SPECIALS})
    t.bos_token = "<bos>"
    return t


def template(name: str) -> templates.Template:
    return templates.load(DATA / f"{name}.jinja")


def oracle(tok, marked: templates.Template, messages: list[dict], tools=None) -> tuple[list[int], list[int]]:
    out = tok.apply_chat_template(messages, tools=tools, chat_template=marked.text, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


def learned(tok, enc: templates.Encoded) -> str:
    return tok.decode([i for i, m in zip(enc.input_ids, enc.assistant_masks, strict=True) if m])


SINGLE = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "2 + 2 = 4.\nANSWER: 4"}]
MULTI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
         {"role": "assistant", "content": "Hello! "}, {"role": "user", "content": "And 3 + 3?"},
         {"role": "assistant", "content": "6"}]
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]
CALL = [{"role": "user", "content": "Add 2 and 3"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "add", "arguments": {"a": 2, "b": 3}}}]}]


@pytest.mark.parametrize("messages,tools", [(SINGLE, None), (MULTI, None), (CALL, TOOLS)])
def test_chatml_mask_equals_generation_markers(tok, messages, tools):
    chatml = templates.Template(CHATML_TEMPLATE, "embedded")
    [enc] = templates.encode(tok, chatml, {"messages": messages, "tools": tools})
    ids, mask = oracle(tok, chatml, messages, tools)
    assert enc.input_ids == ids
    assert enc.assistant_masks == mask and sum(mask) > 0


@pytest.mark.parametrize("name,messages,tools", [
    ("qwen3_like", SINGLE, None),  # the newest turn gets the empty thinking block, inside the span
    ("qwen3_like", [{"role": "system", "content": "Use tools."}, *CALL], TOOLS),
    ("gemma_like", SINGLE, None),
    ("gemma_like", MULTI, None),  # system folded into the first user turn; "Hello! " trimmed by the template
])
def test_unmarked_template_mask_equals_hand_marked_oracle(tok, name, messages, tools):
    plain, marked = template(name), template(f"{name}_marked")
    assert templates.render(tok, plain, messages, tools=tools) == templates.render(tok, marked, messages, tools=tools)
    assert "{% generation %}" not in plain.text and "{% generation %}" in marked.text
    [enc] = templates.encode(tok, plain, {"messages": messages, "tools": tools})
    ids, mask = oracle(tok, marked, messages, tools)
    assert enc.input_ids == ids
    assert enc.assistant_masks == mask and sum(mask) > 0


def test_gemma_spans_are_the_model_turns_and_end_of_turn(tok):
    [enc] = templates.encode(tok, template("gemma_like"), {"messages": MULTI})
    assert learned(tok, enc) == "Hello!<end_of_turn>6<end_of_turn>"
    assert enc.text.startswith("<bos><start_of_turn>user\nBe brief.\n\nHi there")
    assert templates.end_of_turn(tok, template("gemma_like")) == "<end_of_turn>"


def test_history_rendered_differently_becomes_its_own_sequence(tok):
    """Qwen3 drops thinking blocks from history: each turn is trained exactly as it is generated."""
    qwen = template("qwen3_like")
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\ngreet\n</think>\n\nHello"},
            {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye"}]
    full, first = templates.encode(tok, qwen, {"messages": msgs})
    assert full.text == templates.render(tok, qwen, msgs)
    assert learned(tok, full) == "<think>\n\n</think>\n\nGoodbye<|im_end|>"
    # the first turn as the model produced it: after the generation prompt, with its thinking
    prompt = templates.render(tok, qwen, msgs[:1], add_generation_prompt=True)
    assert first.text == prompt + "<think>\ngreet\n</think>\n\nHello<|im_end|>\n"
    assert learned(tok, first) == "<think>\ngreet\n</think>\n\nHello<|im_end|>"
    assert templates.end_of_turn(tok, qwen) == "<|im_end|>"


def test_template_without_end_of_turn_token(tok, tmp_path):
    """A plain template (PostTrainBench's qwen_base style): the content is learned, no end token exists."""
    p = tmp_path / "plain.jinja"
    p.write_text("{%- for m in messages %}{{ m.content }}\n\n{%- endfor %}")
    plain = templates.load(p)
    [enc] = templates.encode(tok, plain, {"messages": SINGLE})
    assert learned(tok, enc) == "2 + 2 = 4.\nANSWER: 4"
    assert templates.end_of_turn(tok, plain) is None


def test_truncation_and_load_errors(tok, tmp_path):
    [enc] = templates.encode(tok, template("gemma_like"), {"messages": MULTI}, max_length=12)
    assert enc.truncated and len(enc.input_ids) == 12 and enc.length > 12 and not any(enc.assistant_masks)
    with pytest.raises(ACIError, match="does not exist"):
        templates.load(tmp_path / "missing.jinja")
    (tmp_path / "empty.jinja").write_text("  \n")
    with pytest.raises(ACIError, match="is empty"):
        templates.load(tmp_path / "empty.jinja")
    with pytest.raises(templates.RenderError, match="roles must alternate"):
        templates.encode(tok, template("gemma_like"), {"messages": [SINGLE[1], SINGLE[0]]})
    assert templates.load(None, tok).source == "tokenizer"


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(_text, _text), min_size=1, max_size=3), system=st.none() | _text)
def test_any_conversation_masks_exactly_the_marked_tokens(tok, turns, system):
    """Property: for arbitrary text, the prefix-rendering mask equals the generation-marker mask."""
    msgs = [{"role": "system", "content": system}] if system else []
    for user, assistant in turns:
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    for name in ("gemma_like", "chatml"):
        plain = templates.Template(CHATML_TEMPLATE, "embedded") if name == "chatml" else template(name)
        marked = plain if name == "chatml" else template(f"{name}_marked")
        encoded = templates.encode(tok, plain, {"messages": msgs})
        if not encoded:  # every assistant turn rendered empty (gemma trims whitespace-only content)
            assert sum(oracle(tok, marked, msgs)[1]) == 0
            continue
        [enc] = encoded
        assert (enc.input_ids, enc.assistant_masks) == oracle(tok, marked, msgs)


def test_template_that_rewrites_history_is_refused(tok, tmp_path):
    """A template whose rendering of earlier turns depends on later ones leaves no well-defined span."""
    p = tmp_path / "counting.jinja"
    p.write_text("{{ messages | length }} messages\n{%- for m in messages %}\n{{ m.role }}: {{ m.content }}{%- endfor %}")
    with pytest.raises(templates.RenderError, match="differently once that turn is added"):
        templates.encode(tok, templates.load(p), {"messages": SINGLE})
