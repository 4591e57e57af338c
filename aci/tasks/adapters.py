"""Adapters: the shapes people already have (chat `messages`, `prompt`/`completion`, `question`/`answer`
as in GSM8K or PostTrainBench test files, plain `text`) told apart (`row_shape`) and turned into task
records and SFT samples."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from aci.errors import ACIError
from aci.tasks.schemas import validate

_TASK_SHAPES = ("chat `messages`, `prompt` + `completion`, `question` + `answer` (or `problem` + `answer`), "
                "or a full task record")
_HINT_SHAPES = f"{_TASK_SHAPES}; or `text` (plain text)"


_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.S)
QUESTION_KEYS = ("question", "problem", "Question", "Problem")
ANSWER_KEYS = ("answer", "Answer")
PASSAGE_KEYS = ("passage", "context", "document")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def json_kind(value: Any) -> str:
    """How an error names a JSON value's type: 'an array', 'a string', 'null', ..."""
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def first_key(row: dict, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if k in row), None)


def as_text(value: Any, loc: str, field: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ACIError(f"{loc}: field {field}: expected a string or number, got {json_kind(value)}")
    return str(value)


def _arguments(value: Any, loc: str) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as e:
            raise ACIError(f"{loc}: tool call arguments are not valid JSON: {e.msg}") from None
    if not isinstance(value, dict):
        raise ACIError(f"{loc}: tool call arguments must be a JSON object, got {json_kind(value)}")
    return value


def plain_tool_calls(calls: list[dict] | None, loc: str = "tool_calls") -> list[dict]:
    """OpenAI-style (`{"function": {"name", "arguments": str|dict}}`) or plain calls -> `[{name, arguments}]`."""
    out = []
    for c in calls or []:
        if not isinstance(c, dict):
            raise ACIError(f"{loc}: a tool call must be an object, got {json_kind(c)}")
        fn = c.get("function", c)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ACIError(f"{loc}: a tool call needs a string `name`")
        out.append({"name": fn["name"], "arguments": _arguments(fn.get("arguments", {}), loc)})
    return out


def _messages(value: Any, loc: str, field: str) -> list[dict]:
    """A prompt/completion value: a string becomes one turn, a list is taken as chat turns."""
    if isinstance(value, list):
        return [_normal_message(m) for m in value]
    return [{"role": "user", "content": as_text(value, loc, field)}]


def _normal_message(m: Any) -> Any:
    """OpenAI allows `content: null` beside tool calls; the schema wants a string."""
    if isinstance(m, dict) and m.get("content") is None and "content" in m:
        return {**m, "content": ""}
    return m


def _tools(tools: Any) -> Any:
    """Accept bare `{name, description, parameters}` definitions by wrapping them OpenAI-style."""
    if not isinstance(tools, list):
        return tools
    return [{"type": "function", "function": t} if isinstance(t, dict) and "function" not in t and "name" in t
            else t for t in tools]


def _choices_prompt(question: str, choices: list, loc: str) -> str:
    if len(choices) > len(_LETTERS):
        raise ACIError(f"{loc}: field choices: at most {len(_LETTERS)} choices, got {len(choices)}")
    lines = [question, ""]
    for i, choice in enumerate(choices):
        lines.append(f"{_LETTERS[i]}. {as_text(choice, loc, 'choices')}")
    return "\n".join(lines)


def _choice_answer(answer: Any, n: int, loc: str) -> str:
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < n:
        return _LETTERS[answer]
    if isinstance(answer, str) and answer.strip().upper() in _LETTERS[:n]:
        return answer.strip().upper()
    raise ACIError(f"{loc}: field answer: with {n} choices expected an index 0..{n - 1} or a letter "
                   f"A..{_LETTERS[n - 1]}, got {answer!r}")


# -- row shapes ---------------------------------------------------------------------------------------
ROW_SHAPES = ("task", "messages", "prompt-completion", "question-answer", "text")


def row_shape(row: dict, loc: str) -> str:
    """Which of ROW_SHAPES a raw row has; ACIError at `loc` for none.

    Every reader of training data (contamination, histogram, verify-task, train) classifies rows here,
    so a file one tool accepts, the others read the same way. `text` is TRL's language-modelling row
    (and the field the PostTrainBench judge's contamination tool reads first).
    """
    if "gold" in row:
        return "task"
    if "messages" in row:
        if not isinstance(row["messages"], list):
            raise ACIError(f"{loc}: field messages: expected an array of turns, got {json_kind(row['messages'])}")
        return "messages"
    if "prompt" in row and "completion" in row:
        return "prompt-completion"
    if first_key(row, QUESTION_KEYS) and first_key(row, ANSWER_KEYS):
        return "question-answer"
    if "text" in row:
        if not isinstance(row["text"], str) or not row["text"].strip():
            raise ACIError(f"{loc}: field text: expected non-empty text, got {json_kind(row['text'])}"
                           + (" (blank)" if isinstance(row["text"], str) else ""))
        return "text"
    keys = ", ".join(sorted(row)) or "none"
    raise ACIError(f"{loc}: no known record shape (keys: {keys}); expected {_HINT_SHAPES}")


def to_task(row: dict, loc: str, default_id: str) -> dict:
    """Turn one raw row into a validated task record (see the module docstring for the shapes).

    Rows with a `gold` key are taken as task records as they are (unknown keys are errors); other shapes
    are adapted (keeping their `id`, `type`, `subtype`, `grader`, `tools`, `meta`) and their extra keys
    kept under `meta`.
    """
    if row_shape(row, loc) == "text":
        raise ACIError(f"{loc}: a `text` row is plain text, with no prompt turns or gold answer to grade; "
                       f"this needs task records ({_TASK_SHAPES})")
    if "gold" in row:
        return _given_task(row, loc, default_id)
    if "messages" in row:
        found = _from_messages(row, loc)
    elif "prompt" in row and "completion" in row:
        found = _from_prompt_completion(row, loc)
    else:
        found = _from_question_answer(row, loc)
    meta, grader = _meta(row, loc, found), row.get("grader")
    if not grader and found.grader:  # the shape implies one: lettered choices are graded by `choice`
        grader = found.grader
    task: dict[str, Any] = {
        "id": str(row["id"]) if isinstance(row.get("id"), (str, int)) and row.get("id") != "" else default_id,
        "type": row.get("type"),
        "subtype": row.get("subtype"),
        "messages": found.messages,
        "gold": found.gold,
        "grader": grader,
        "meta": meta,
    }
    if "tools" in row:
        task["tools"] = _tools(row["tools"])
    if task["type"] is None:
        task["type"] = _infer_type(task, gsm8k="solution" in meta and "####" in str(meta.get("solution")))
        if task["grader"] is None and task["type"] == "tool-use":
            task["grader"] = "tool-call"
    return validate(task, "task", loc)


def _given_task(row: dict, loc: str, default_id: str) -> dict:
    """A row that is already a task record: defaults filled in, turns and tools normalised."""
    task = {"id": default_id, "subtype": None, "grader": None, "meta": {}, **row}
    if "type" not in task:
        task["type"] = _infer_type(task)
    if isinstance(task.get("messages"), list):
        task["messages"] = [_normal_message(m) for m in task["messages"]]
    if "tools" in task:
        task["tools"] = _tools(task["tools"])
    return validate(task, "task", loc)


@dataclasses.dataclass
class _Found:
    """What a row shape yields for a task: prompt turns, gold, what it keeps in `meta`, the row keys it
    used (the rest go to `meta`), and the grader the shape implies when the row names none."""

    messages: list
    gold: dict[str, Any]
    used: set[str]
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    grader: str | None = None


def _turn_gold(turn: dict, loc: str, where: str) -> dict[str, Any]:
    """The gold an assistant turn holds: its text as the answer, its tool calls."""
    gold: dict[str, Any] = {}
    if turn.get("content"):
        gold["answer"] = as_text(turn["content"], loc, f"{where}.content")
    if turn.get("tool_calls"):
        gold["tool_calls"] = plain_tool_calls(turn["tool_calls"], f"{loc}: {where}")
    return gold


def _from_messages(row: dict, loc: str) -> _Found:
    """Chat turns: a last assistant turn (after at least one other) is the gold, the turns before the prompt."""
    msgs = row["messages"]
    if not isinstance(msgs, list):
        raise ACIError(f"{loc}: field messages: expected an array of turns, got {json_kind(msgs)}")
    msgs = [_normal_message(m) for m in msgs]
    last, gold = len(msgs) - 1, {}
    if last >= 1 and isinstance(msgs[last], dict) and msgs[last].get("role") == "assistant":
        gold = _turn_gold(msgs[last], loc, f"messages.{last}")
        msgs = msgs[:last]
    return _Found(msgs, gold, {"messages"})


def _from_prompt_completion(row: dict, loc: str) -> _Found:
    """A prompt (text or turns) and its completion (text, or turns whose last is the gold)."""
    msgs, comp = _messages(row["prompt"], loc, "prompt"), row["completion"]
    if isinstance(comp, list):  # conversational completion: the assistant turn(s)
        gold = _turn_gold(comp[-1] if comp and isinstance(comp[-1], dict) else {}, loc, "completion")
    else:
        gold = {"answer": as_text(comp, loc, "completion")}
    return _Found(msgs, gold, {"prompt", "completion"})


def _from_question_answer(row: dict, loc: str) -> _Found:
    """A question (with its passage and lettered choices, if any) and its answer: a choice letter, the
    number after GSM8K's `####` (the reasoning before it kept as the solution), or the answer text."""
    q_key, a_key = first_key(row, QUESTION_KEYS), first_key(row, ANSWER_KEYS)
    question, answer = as_text(row[q_key], loc, q_key), row[a_key]
    choices = row.get("choices", row.get("options"))
    found = _Found([], {}, {q_key, a_key})
    if isinstance(choices, list) and choices:
        question = _choices_prompt(question, choices, loc)
        found.gold["answer"] = _choice_answer(answer, len(choices), loc)
        found.grader = "choice"
        found.used |= {"choices", "options"}
    else:
        answer = as_text(answer, loc, a_key)
        final = _GSM8K_FINAL.search(answer)
        if final:  # GSM8K: reasoning, then `#### 42`; the number is the gold, the rest a solution
            found.gold["answer"] = final.group(1).replace(",", "").strip()
            found.meta["solution"] = answer
        else:
            found.gold["answer"] = answer.strip()
    passage = first_key(row, PASSAGE_KEYS)
    found.messages = [{"role": "user", "content": question}]
    if passage and isinstance(row[passage], str):
        found.messages = [{"role": "user", "content": f"{row[passage]}\n\n{question}"}]
        found.meta["passage"] = row[passage]
        found.used.add(passage)
    return found


def _meta(row: dict, loc: str, found: _Found) -> dict[str, Any]:
    """An adapted row's `meta`: the keys no part of the task used, what the shape kept, the row's own `meta`."""
    meta, used = dict(found.meta), found.used | {"id", "type", "subtype", "tools", "grader", "meta"}
    if "solution" in row and isinstance(row["solution"], str):
        meta.setdefault("solution", row["solution"])
        used.add("solution")
    own = row.get("meta")
    if own is not None and not isinstance(own, dict):
        raise ACIError(f"{loc}: field meta: expected an object, got {json_kind(own)}")
    return {**{k: v for k, v in row.items() if k not in used}, **meta, **(own or {})}


def _infer_type(task: dict, gsm8k: bool = False) -> str:
    gold = task.get("gold") if isinstance(task.get("gold"), dict) else {}
    if gold.get("tool_calls") or task.get("tools"):
        return "tool-use"
    if gold.get("tests"):
        return "code"
    if task.get("grader") == "choice":
        return "mcq"
    answer = gold.get("answer")
    if gsm8k or (isinstance(answer, str) and re.fullmatch(r"-?[\d,]*\.?\d+", answer.strip() or "x")):
        return "math"
    if isinstance(answer, str) and len(answer) > 200:
        return "chat"
    return "qa"


def to_sample(row: dict, loc: str) -> dict:
    """Turn one raw row into a validated SFT sample: chat `messages`, prompt/completion or question/answer;
    a `text` row stays as it is (plain text, every token trained, no chat template: TRL's
    language-modelling rows)."""
    shape = row_shape(row, loc)
    if shape == "task":
        raise ACIError(f"{loc}: this is a task record (it has `gold`), not an SFT sample; "
                       f"render its gold as an assistant turn first")
    if shape == "text":
        return row
    if shape == "messages":
        sample = dict(row)
        if isinstance(sample["messages"], list):
            sample["messages"] = [_normal_message(m) for m in sample["messages"]]
    elif shape == "prompt-completion":
        prompt = _messages(row["prompt"], loc, "prompt")
        comp = row["completion"]
        completion = ([_normal_message(m) for m in comp] if isinstance(comp, list)
                      else [{"role": "assistant", "content": as_text(comp, loc, "completion")}])
        sample = {k: v for k, v in row.items() if k not in ("prompt", "completion")}
        sample["messages"] = prompt + completion
    else:
        q_key, a_key = first_key(row, QUESTION_KEYS), first_key(row, ANSWER_KEYS)
        sample = {k: v for k, v in row.items() if k not in (q_key, a_key)}
        sample["messages"] = [{"role": "user", "content": as_text(row[q_key], loc, q_key)},
                              {"role": "assistant", "content": as_text(row[a_key], loc, a_key)}]
    if "tools" in sample:
        sample["tools"] = _tools(sample["tools"])
    return validate(sample, "sft-sample", loc)
