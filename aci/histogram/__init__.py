"""Structural histograms of task and sample sets, and the comparison that turns gaps into quotas.

Why: synthetic data whose *structure* differs from the benchmark's (writes per task, share of tasks that
return information, answer format, prompt length) lowers the score even when every sample is correct
(see `data-synthesis.md`). So the benchmark's histogram is the alignment target: compute it before
generating, compare the synthetic set with it after, and add what is missing, scarcest bin first.

Records are task records or SFT samples (`aci.tasks`); each feature maps one record to a value:
a bin label (category), an int (numeric: binned, with its mean kept), or a list of labels (a mix,
counted per element, e.g. the tool of every call). `None` means "does not apply" and the record is not
counted for that feature. Everything is computed in one streaming pass with plain dicts.

Feature sets, chosen from the first records' content unless named:
- `chat` (chat/QA tasks): `turns` (user turns), `system_prompt`, `prompt_length`, `answer_length`
  (characters, or tokens of a local tokenizer), `answer_format`
  (tool-call / code-block / answer-line / letter / number / free-text / empty), `subtype`;
- `tool-use`: `tool_calls`, `distinct_tools`, `writes` per task, `multi_write` (>= 2 writes),
  `returns_info` (the task must tell the user something: gold `answer` or `claims`), `tool_mix`,
  `subtype`. Tool calls are the gold calls of a task record, or the assistant's calls in an SFT sample
  (structured `tool_calls` and hermes `<tool_call>` blocks). Read/write comes from a user map, else from
  the verbs in the tool name (`READ_VERBS`, `WRITE_VERBS`); names matching neither count as reads and
  are listed as `unclassified`.

`subtype` is the records' own label (a task's `subtype`, a sample's `meta.subtype`), in both sets,
because a benchmark's sub-type mix is the structure that most often differs from a generator's
default. An SFT sample has no gold or sub-type of its own: `returns_info` reads `meta.gold` or the bool
`meta.returns_info`, and `subtype` reads `meta.subtype`, when present.

What a feature measures can depend on the record: a task's "answer" is its gold answer (what the
grader compares, e.g. `4321`), a sample's is the whole assistant response (`ANSWER: 4321`). Each
histogram keeps what its answer features measured (`measures`).

Comparison (candidate vs target) covers only the features both sides carry and measure the same way;
every other feature is listed under `skipped` with the reason (no value on one side, or gold answers on
one side and responses on the other), and gets neither pass/fail nor quotas: a quota for a feature
measured on one side only would ask for data that breaks the format. Per compared bin, the gap in
percentage points (candidate share - target share); per feature, the total-variation distance (half
the L1 distance of the two distributions, 0..1); a feature FAILS when any bin's |gap| exceeds the
tolerance. Quotas, for a final size N (the smallest reachable by adding samples, over every compared
feature): per bin of a failing feature, `need = max(0, ceil(target_share * N) - count)`, listed
scarcest first (largest need relative to the bin's target count). Quotas are for failing per-record
features only; a mix feature (counted per call) gets gaps but no quotas, a passing one none either
(added samples keep its mix when they look like the rest). Quotas are per feature and one added
sample counts toward a bin of every feature, so fill the scarcest quotas with samples that also serve
the other features' quotas (a task with two writes that returns an amount serves `writes=2`,
`multi_write=yes` and `returns_info=yes` at once).

Modules: `features` (what a record measures), `build` (a file read and counted into a histogram;
saved histograms; what the data manifest keeps), `compare` (gaps, pass/fail, quotas, plots).
"""
