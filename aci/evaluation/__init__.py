"""Evaluating checkpoints, deciding between them, and keeping `final_model/` always valid.

* `folder`: what a servable model folder is, and `build()` which turns any checkpoint (full or LoRA)
  into one: merged weights as safetensors, the checkpoint's own tokenizer and chat template (the
  evaluation's where it has none), processor files, `generation_config.json` ending turns at the
  end-of-turn token.
* `command`, `lmeval`, `devset`: the three evaluators (the user's eval command, an lm-eval task, a
  held-out dev set graded by `aci.graders`). Each runs one trial for one seed.
* `options`, `translation`: which option of the user's eval command takes the model path, the limit,
  the output and the seed (read from its `--help` at plan init), and the command as typed turned into
  the template the tools run.
* `stats`: trials to a mean and a range, and the comparison of two evaluations (non-overlapping ranges,
  a paired bootstrap over per-sample scores, or a two-proportion z-test).
* `checkpoints`: checkpoint ids, their ancestry back to the base model, their evaluations.
* `runner`: one evaluation of one checkpoint (k trials), recorded in `checkpoints.jsonl`.
* `swap`, `promotion`: the atomic replacement of `final_model/`, and the keep-best decision before it.
* `checks`, `probe`: what `finalize` verifies about `final_model/`, and the test-like item and answer
  format its generation check uses.

Nothing here imports torch, transformers or lm-eval at module level; the functions that need them do.
"""
