"""Task records and SFT samples: one schema each, streaming loaders, and adapters for common shapes.

A *task* is something a grader can score (prompt turns + gold + grader spec); an *SFT sample* is a
conversation to train on. Both are defined once here as JSON Schemas (`TASK_SCHEMA`, `SAMPLE_SCHEMA`),
written to `state/schemas/` by `python -m aci.records` so other programs can validate files without Python.

Loaders stream JSONL (or read a JSON array) and every error names `file:line`, because a 50,000-line
file with one bad row is only fixable if the message says where. People already have data in a handful
of shapes (chat `messages`, `prompt`/`completion`, `question`/`answer` as in GSM8K or PostTrainBench
test files); the adapters turn those into records instead of asking for a conversion script.

Modules: `schemas` (the two schemas and their validation), `rows` (reading files; the loaders),
`adapters` (row shapes into records), `texts` (a row's texts, as the contamination check reads them).
The names below are the package's interface.
"""

from __future__ import annotations

from aci.tasks.adapters import ROW_SHAPES, plain_tool_calls, row_shape, to_sample, to_task
from aci.tasks.rows import iter_tasks, load_samples, load_tasks, read_rows
from aci.tasks.schemas import FAST_KEYWORDS, SAMPLE_SCHEMA, SCHEMAS, TASK_SCHEMA, compile_schema, validate
from aci.tasks.texts import record_texts, row_texts

__all__ = ["FAST_KEYWORDS", "ROW_SHAPES", "SAMPLE_SCHEMA", "SCHEMAS", "TASK_SCHEMA", "compile_schema", "iter_tasks",
           "load_samples", "load_tasks", "plain_tool_calls", "read_rows", "record_texts", "row_shape", "row_texts",
           "to_sample", "to_task", "validate"]
