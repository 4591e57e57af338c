"""Step-level marks: the process reading of a trace, where it can be computed.

* `unknown_tool`: the policy called a tool it was not offered.
* `invalid_arguments`: the arguments are not a JSON object or fail the offered tool's JSON schema.
* `error_ignored`: a step failed (tool error, timeout, unknown tool, bad arguments) and the next reply
  went on as if it had not: it neither called that tool again (any tool, after an unknown one) nor said
  anything about a failure. None when there was no next reply.
* `correct_tool` / `correct_arguments` / `correct`: against the task's gold calls when it has them
  (right tool = a gold call's name; right arguments = equal to that gold call's arguments, compared
  as the tool-call grader does; correct = both), otherwise against the offered schemas (right tool = offered; right arguments = schema-valid;
  correct = both and the call ran without error). `basis` says which.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from aci.rollout.trace import Step, TaskTrace

_ACK = re.compile(r"\b(error|errors|fail\w*|unable|cannot|can't|couldn't|could not|sorry|unfortunately|invalid|"
                  r"timed? ?out|not (?:found|available|exist\w*)|problem|issue)\b", re.IGNORECASE)


def schema_errors(schema: dict[str, Any] | None, arguments: dict[str, Any]) -> str | None:
    """The first few ways `arguments` break `schema`, or None when they fit (or there is no schema)."""
    if not schema:
        return None
    import jsonschema

    try:
        errors = sorted(_validator(json.dumps(schema, sort_keys=True)).iter_errors(arguments), key=lambda e: list(e.path))
    except jsonschema.SchemaError as e:
        return f"the tool's own schema is invalid: {e.message}"
    if not errors:
        return None
    parts = [f"{'.'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}" for e in errors[:3]]
    return "; ".join(parts) + (f" (+{len(errors) - 3} more)" if len(errors) > 3 else "")


@lru_cache(maxsize=256)
def _validator(schema_json: str):
    """One validator per distinct schema (building one costs more than validating)."""
    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def check_call(step: Step, offered: dict[str, dict]) -> None:
    """Set `unknown_tool` and `invalid_arguments` (with the reason) on a tool-call step before it runs."""
    step.unknown_tool = step.name not in offered
    if step.unknown_tool:
        return
    if step.arguments is None:
        step.invalid_arguments = True
        step.invalid_reason = step.invalid_reason or "arguments are not a JSON object"
        return
    why = schema_errors(offered[step.name], step.arguments)
    step.invalid_arguments = why is not None
    step.invalid_reason = why


def finish(trace: TaskTrace, gold_calls: list[dict] | None) -> None:
    """After the task: `error_ignored` from the following reply, correctness from gold or schema."""
    from aci.graders.toolcall import same_value

    gold_by_name: dict[str, list[Any]] = {}
    for g in gold_calls or []:
        gold_by_name.setdefault(g["name"], []).append(g.get("arguments") or {})
    for i, turn in enumerate(trace.turns):
        nxt = trace.turns[i + 1].reply if i + 1 < len(trace.turns) else None
        for step in turn.steps:
            if step.kind != "tool_call":
                continue
            if step.error is not None:
                step.error_ignored = None if nxt is None else not _recovered(step, nxt)
            if gold_by_name:
                step.basis = "gold"
                step.correct_tool = step.name in gold_by_name
                step.correct_arguments = (step.arguments is not None and any(
                    same_value(step.arguments, g) for g in gold_by_name[step.name])) if step.correct_tool else None
                step.correct = bool(step.correct_tool and step.correct_arguments)
            else:
                step.basis = "schema"
                step.correct_tool = not step.unknown_tool
                step.correct_arguments = (not step.invalid_arguments) if step.correct_tool else None
                step.correct = bool(step.correct_tool and step.correct_arguments and step.error is None)


def _recovered(step: Step, reply: dict) -> bool:
    names = [((c.get("function") or {}).get("name")) for c in reply.get("tool_calls") or []]
    if step.name in names or (step.unknown_tool and names):
        return True
    return bool(_ACK.search(reply.get("content") or ""))
