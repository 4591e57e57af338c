"""The texts of a row, as training and the contamination check read them: every text in reading order
(`row_texts`), and the question, answer and passage split apart (`record_texts`)."""

from __future__ import annotations

import json
from typing import Any

from aci.tasks.adapters import ANSWER_KEYS, PASSAGE_KEYS, QUESTION_KEYS, as_text, first_key, row_shape


def _content_text(content: Any) -> str:
    """A turn's text: a string, or the text parts of a multimodal-style list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _turn_texts(turns: Any) -> list[str]:
    out = []
    for m in turns if isinstance(turns, list) else ():
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        out.append(content if type(content) is str else _content_text(content))
        if m.get("tool_calls"):
            out.append(json.dumps(m["tool_calls"], ensure_ascii=False))
    return out


_NOT_PLAIN_CHAT = frozenset({"gold", "meta", "solution"})  # keys beside `messages` that add texts or change the shape


def row_texts(row: dict, loc: str) -> list[str]:
    """Every text of a training row in reading order: turns (system, user, assistant, tool, with tool
    calls as JSON) in order; prompt then completion; passage, question, choices, answer, solution; a task's
    prompt turns then its gold (answer, worked solution, tool calls). What the contamination check scans."""
    turns = row.get("messages")
    if type(turns) is list and _NOT_PLAIN_CHAT.isdisjoint(row):  # the usual chat row: its turns alone
        return list(filter(None, _turn_texts(turns)))
    shape = row_shape(row, loc)
    if shape == "text":
        return [row["text"]]
    if shape in ("messages", "task"):
        out = _turn_texts(row.get("messages"))
    elif shape == "prompt-completion":
        out = []
        for key in ("prompt", "completion"):
            value = row[key]
            out += _turn_texts(value) if isinstance(value, list) else [as_text(value, loc, key)]
    else:
        passage = first_key(row, PASSAGE_KEYS)
        out = [row[passage]] if passage and isinstance(row[passage], str) else []
        q_key, a_key = first_key(row, QUESTION_KEYS), first_key(row, ANSWER_KEYS)
        out.append(as_text(row[q_key], loc, q_key))
        choices = row.get("choices", row.get("options"))
        out += [str(c) for c in choices] if isinstance(choices, list) else []
        out.append(as_text(row[a_key], loc, a_key))
    if shape == "task" and isinstance(row["gold"], dict):
        gold = row["gold"]
        out += [str(gold["answer"])] if gold.get("answer") not in (None, "") else []
        out += [json.dumps(gold["tool_calls"], ensure_ascii=False)] if gold.get("tool_calls") else []
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    solution = row.get("solution", meta.get("solution"))
    if shape != "prompt-completion" and isinstance(solution, str) and solution not in out:
        out.append(solution)
    return [t for t in out if t]


def record_texts(row: dict) -> dict[str, str]:
    """The question, answer and passage texts of a raw row, task record or SFT sample.

    Always returns the three keys (empty string when absent). Question = user turns (system prompts are
    shared boilerplate, not item text); answer = assistant turns, `completion`, `answer`, or the task's
    gold (its full worked solution when the adapter kept one), tool calls as JSON; passage = a `passage`/`context`/`document`
    field or one kept in `meta`.
    """
    question: list[str] = []
    answer: list[str] = []
    passage = ""
    for key in PASSAGE_KEYS:
        if isinstance(row.get(key), str):
            passage = row[key]
            break
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    passage = passage or (meta.get("passage") if isinstance(meta.get("passage"), str) else "")

    def turns(msgs: Any) -> None:
        for m in msgs if isinstance(msgs, list) else []:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                continue
            if m.get("role") == "user":
                question.append(m["content"])
            elif m.get("role") == "assistant":
                answer.append(m["content"])
                if m.get("tool_calls"):
                    answer.append(json.dumps(m["tool_calls"], ensure_ascii=False))

    if "messages" in row:
        turns(row["messages"])
    elif "prompt" in row:
        if isinstance(row["prompt"], str):
            question.append(row["prompt"])
        else:
            turns(row["prompt"])
    else:
        key = first_key(row, QUESTION_KEYS)
        if key and isinstance(row[key], (str, int, float)):
            question.append(str(row[key]))
    if "completion" in row:
        if isinstance(row["completion"], str):
            answer.append(row["completion"])
        else:
            turns(row["completion"])
    key = first_key(row, ANSWER_KEYS)
    if key and "messages" not in row and isinstance(row[key], (str, int, float)):
        answer.append(str(row[key]))
    gold = row.get("gold") if isinstance(row.get("gold"), dict) else None
    if gold is not None:
        solution = meta.get("solution")
        if isinstance(solution, str) and solution:
            answer.append(solution)
        elif isinstance(gold.get("answer"), str):
            answer.append(gold["answer"])
        if gold.get("tool_calls"):
            answer.append(json.dumps(gold["tool_calls"], ensure_ascii=False))
    if passage and question and question[0].startswith(passage):  # the adapter put the passage in the prompt
        question[0] = question[0][len(passage):].lstrip()
    return {"question": "\n".join(question).strip(), "answer": "\n".join(answer).strip(), "passage": passage.strip()}


