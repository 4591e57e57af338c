"""The task record and SFT sample schemas, defined once as JSON Schemas, and their fast validation.

`state/schemas/task.schema.json` and `sft-sample.schema.json` are written from `SCHEMAS` by
`python -m aci.records` (the one writer of `state/schemas/`), so other programs can validate files
without Python.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from aci.errors import ACIError

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["system", "user", "assistant", "tool"]},
        "content": {"type": "string"},
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
        "tool_calls": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["function"],
                "properties": {
                    "type": {"const": "function"},
                    "id": {"type": "string"},
                    "function": {
                        "type": "object",
                        "required": ["name", "arguments"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "arguments": {"type": ["object", "string"],
                                          "description": "a JSON object, or the same object encoded as a string"},
                        },
                    },
                },
            },
        },
    },
}

_TOOLS = {
    "type": "array",
    "description": "OpenAI-style function definitions, byte-identical to what the evaluation sends",
    "items": {
        "type": "object",
        "required": ["type", "function"],
        "properties": {
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "description": {"type": "string"},
                    "parameters": {"type": "object"},
                },
            },
        },
    },
}

TASK_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "aci task record",
    "description": "A prompt a grader can score: prompt turns, gold, grader spec.",
    "type": "object",
    "required": ["id", "type", "messages", "gold"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "type": {"type": "string", "minLength": 1, "description": "qa, math, mcq, code, tool-use, chat, ..."},
        "subtype": {"type": ["string", "null"]},
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE,
                     "description": "the prompt turns the model sees (no gold answer)"},
        "tools": _TOOLS,
        "gold": {
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "tool_calls": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "arguments"],
                        "additionalProperties": False,
                        "properties": {"name": {"type": "string", "minLength": 1},
                                       "arguments": {"type": "object"}},
                    },
                },
                "claims": {"type": "array", "items": {"type": "string"}},
                "tests": {"type": "string", "description": "python code that raises (e.g. assert) on a wrong solution"},
            },
        },
        "grader": {
            "description": "a grader name ('final-answer', 'regex', 'unit-tests', ...) or {type: name, ...options}; "
                           "null means the caller's default. A row may not name a grader that runs a program "
                           "(python:, command): those come only from the caller's --grader or the run card",
            "oneOf": [
                {"type": "null"},
                {"type": "string", "minLength": 1},
                {"type": "object", "required": ["type"], "properties": {"type": {"type": "string", "minLength": 1}}},
            ],
        },
        "meta": {"type": "object"},
    },
}

SAMPLE_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA_DIALECT,
    "title": "aci SFT sample",
    "description": "One training conversation; other columns are kept and ignored by training.",
    "type": "object",
    "required": ["messages"],
    "properties": {
        "messages": {"type": "array", "minItems": 2, "items": _MESSAGE,
                     "contains": {"type": "object", "properties": {"role": {"const": "assistant"}}},
                     "description": "system/user/assistant/tool turns with at least one assistant turn"},
        "tools": _TOOLS,
    },
}

SCHEMAS = {"task": TASK_SCHEMA, "sft-sample": SAMPLE_SCHEMA}


# -- validation -------------------------------------------------------------------------------------
# `jsonschema` costs ~0.2 ms a record, 40x the JSON parse. `compile_schema` turns the same schema dicts
# into plain Python for the keywords they use (a test keeps that set closed and checks agreement with
# `jsonschema` on generated records); `jsonschema` runs only to explain a record it refuses.
FAST_KEYWORDS = {"$schema", "title", "description", "type", "required", "properties", "additionalProperties",
                 "items", "minItems", "contains", "minLength", "enum", "const", "oneOf"}
_TYPE_NAMES = {"object": ("dict",), "array": ("list",), "string": ("str",), "null": ("NoneType",),
               "boolean": ("bool",), "number": ("int", "float")}
_SIMPLE = {"type", "minLength", "const", "enum", "description", "title"}


def compile_schema(schema: dict) -> Callable[[Any], bool]:
    """A predicate equal to JSON Schema validation of `schema`, for the keywords in FAST_KEYWORDS."""
    funcs: list[str] = []

    def inline(s: dict, v: str) -> str:
        """An expression that is true when `v` conforms to a schema of only simple keywords."""
        parts = []
        if "type" in s:
            names = s["type"] if isinstance(s["type"], list) else [s["type"]]
            types = ", ".join(t for n in names for t in _TYPE_NAMES[n])
            no_bool = "boolean" not in names and "number" in names
            parts.append(f"isinstance({v}, ({types},))" + (f" and not isinstance({v}, bool)" if no_bool else ""))
        if "const" in s:
            parts.append(f"({v} == {s['const']!r} and type({v}) is {type(s['const']).__name__})")
        if "enum" in s:
            parts.append(f"any({v} == e and type({v}) is type(e) for e in {tuple(s['enum'])!r})")
        if "minLength" in s:
            parts.append(f"(not isinstance({v}, str) or len({v}) >= {s['minLength']})")
        return " and ".join(f"({p})" for p in parts) or "True"

    def check(s: dict, v: str) -> str:
        return inline(s, v) if set(s) <= _SIMPLE else f"{emit(s)}({v})"

    def emit(s: dict) -> str:
        name = f"_f{len(funcs)}"
        funcs.append("")
        body = [f"if not ({inline(s, 'v')}): return False"]
        if {"required", "properties", "additionalProperties"} & set(s):
            body.append("if isinstance(v, dict):")
            for k in s.get("required", ()):
                body.append(f"    if {k!r} not in v: return False")
            if s.get("additionalProperties") is False:
                body.append(f"    if not {frozenset(s.get('properties', {}))!r}.issuperset(v): return False")
            for k, sub in s.get("properties", {}).items():
                body.append(f"    if {k!r} in v and not ({check(sub, f'v[{k!r}]')}): return False")
        if {"items", "minItems", "contains"} & set(s):
            body.append("if isinstance(v, list):")
            if "minItems" in s:
                body.append(f"    if len(v) < {s['minItems']}: return False")
            if "items" in s:
                body += ["    for x in v:", f"        if not ({check(s['items'], 'x')}): return False"]
            if "contains" in s:
                body.append(f"    if not any({check(s['contains'], 'x')} for x in v): return False")
        if "oneOf" in s:
            body.append(f"if ({' + '.join(f'bool({check(x, chr(118))})' for x in s['oneOf'])}) != 1: return False")
        funcs[int(name[2:])] = f"def {name}(v):\n" + "".join(f"    {line}\n" for line in body) + "    return True\n"
        return name

    root = emit(schema)
    namespace: dict[str, Any] = {"NoneType": type(None)}
    exec(compile("\n".join(funcs), f"<schema {schema.get('title', '')}>", "exec"), namespace)
    return namespace[root]


@cache
def _conforms(name: str) -> Callable[[Any], bool]:
    return compile_schema(SCHEMAS[name])


@cache
def _validator(name: str):
    import jsonschema

    return jsonschema.Draft202012Validator(SCHEMAS[name])


def validate(record: dict, name: str, loc: str) -> dict:
    """Check `record` against schema `name` ("task" or "sft-sample"); raise ACIError at `loc` otherwise."""
    if _conforms(name)(record):
        return record
    import jsonschema

    err = jsonschema.exceptions.best_match(_validator(name).iter_errors(record))
    if err is None:
        return record
    field = ".".join(str(p) for p in err.absolute_path) or "(record)"
    what = "task record" if name == "task" else "SFT sample"
    raise ACIError(f"{loc}: invalid {what}: field {field}: {err.message}")
