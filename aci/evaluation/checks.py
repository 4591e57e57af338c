"""What `finalize` verifies about `final_model/`, each check with a pass/fail, a detail and a fix.

The checks follow how the benchmark uses the folder: vLLM reads `config.json`, safetensors weights, the
tokenizer, the chat template (the evaluation's own for most families; the tokenizer's for Qwen), and
`generation_config.json` for its stop tokens and sampling settings. Each check runs even when an
earlier one failed, unless it needs what failed (then it fails as "not checked"), so one run lists
every defect.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from aci.evaluation import folder, swap
from aci.evaluation.probe import FALLBACK, Probe

GENERATE_TIMEOUT_S = 900.0
PROMOTE_FIX = "promote a checkpoint again (aci eval-checkpoint promote --checkpoint <id>): promotion writes a complete folder"


class CheckItem(BaseModel):
    name: str
    passed: bool
    detail: str
    fix: str | None = Field(None, description="what to do when it failed")


class Checklist:
    def __init__(self):
        self.items: list[CheckItem] = []

    def add(self, name: str, passed: bool, detail: str, fix: str | None = None) -> bool:
        self.items.append(CheckItem(name=name, passed=passed, detail=detail, fix=None if passed else fix))
        return passed

    def skip(self, name: str, needs: str) -> bool:
        return self.add(name, False, f"not checked: {needs} failed", f"fix {needs} first")


def _err(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def check(final: Path, *, template: str | None, base_dir: Path | None, best: dict | None,
          changed_eval_files: list[str], max_file_bytes: int, generate: bool = True, probe: Probe | None = None,
          evaluate: Callable[[Path], str] | None = None) -> list[CheckItem]:
    """Run every check on `final` (see the module docstring); `max_file_bytes` is the largest file the
    harness can copy out (the profile's `transfer`); `probe` is what the generation check asks and the
    answer format it expects (`aci.evaluation.probe`); `evaluate(final)` returns a detail or raises."""
    probe = probe or Probe(FALLBACK, "a fixed arithmetic question", None)
    c = Checklist()
    if not final.is_dir():
        c.add("present", False, f"{final} does not exist", "promote a checkpoint: aci eval-checkpoint promote --checkpoint <id> "
              "(or promote base as a floor)")
        return c.items
    c.add("present", True, str(final))
    with contextlib.redirect_stdout(sys.stderr):
        config_ok = _config(c, final)
        weights_ok = _weights(c, final)
        adapter = [n for n in folder.ADAPTER_FILES if (final / n).exists()]
        c.add("merged", not adapter, "no adapter files" if not adapter else f"unmerged LoRA files: {', '.join(adapter)}",
              "promote the checkpoint through aci eval-checkpoint promote, which merges the LoRA (peft merge_and_unload)")
        _file_size(c, final, max_file_bytes)
        tok = _tokenizer(c, final)
        prompt = _template(c, tok, template, probe.messages)
        _end_of_turn(c, final, tok, template)
        _sampling(c, final)
        _processor(c, final, base_dir)
        _promotion_record(c, final, best)
        c.add("eval-files", not changed_eval_files,
              "evaluation files unchanged since plan init" if not changed_eval_files
              else f"changed since plan init: {', '.join(changed_eval_files[:5])}",
              "restore the original evaluate.py / evaluation_code / templates (rule no-eval-edits)")
        if generate:
            if config_ok and weights_ok and tok is not None and prompt is not None:
                _generate(c, final, prompt, probe)
            else:
                c.skip("generates", "config, weights, tokenizer or template")
    if evaluate is not None:
        try:
            c.add("eval", True, evaluate(final))
        except Exception as e:
            c.add("eval", False, _err(e), "run the eval command on final_model by hand and read its log")
    return c.items


def _config(c: Checklist, final: Path) -> bool:
    if not (final / folder.CONFIG).is_file():
        return c.add("config", False, "config.json missing", PROMOTE_FIX)
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(final)
    except Exception as e:
        return c.add("config", False, f"config.json does not load: {_err(e)}", PROMOTE_FIX)
    return c.add("config", True, f"{cfg.model_type} ({', '.join(getattr(cfg, 'architectures', None) or [])})")


def _weights(c: Checklist, final: Path) -> bool:
    files = folder.safetensors_files(final)
    if not files:
        bins = folder.bin_files(final)
        return c.add("weights", False, "only pytorch .bin weights" if bins else "no safetensors weights",
                     PROMOTE_FIX + " (it saves safetensors)")
    gone = folder.missing_shards(final)
    if gone:
        return c.add("weights", False, f"shards missing: {', '.join(gone[:3])}", PROMOTE_FIX)
    from safetensors import safe_open

    tensors = 0
    for p in files:
        try:
            with safe_open(str(p), framework="pt") as f:
                tensors += len(list(f.keys()))
        except Exception as e:
            return c.add("weights", False, f"{p.name} cannot be read: {_err(e)}", PROMOTE_FIX)
    size = sum(p.stat().st_size for p in files)
    return c.add("weights", True, f"{len(files)} safetensors file(s), {tensors} tensors, {size / 1e6:.1f} MB")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB ({n} bytes)"


def _file_size(c: Checklist, final: Path, max_bytes: int) -> None:
    """No file of `final` over `max_bytes`: the harness copies final_model out file by file and the copy
    of a larger file fails, after the run, when nothing can be done about it. Sizes only (a sparse or
    huge file is never read)."""
    sizes = {p: p.stat().st_size for p in (Path(d, n) for d, _, names in os.walk(final) for n in names)
             if p.is_file()}
    over = sorted((p for p, n in sizes.items() if n > max_bytes), key=lambda p: -sizes[p])
    if over:
        more = f" (and {len(over) - 1} more: {', '.join(str(p.relative_to(final)) for p in over[1:4])})" \
            if len(over) > 1 else ""
        c.add("file-size", False, f"{over[0].relative_to(final)} is {_gib(sizes[over[0]])}, over the "
              f"{_gib(max_bytes)} a file may have: the transfer of final_model fails on a larger file{more}",
              PROMOTE_FIX + " (it writes the weights in shards within the limit); a file that is not part of "
                            "the model does not belong in final_model")
        return
    top = max(sizes, key=lambda p: sizes[p], default=None)
    c.add("file-size", True, f"every file within {_gib(max_bytes)}" +
          (f"; the largest is {top.relative_to(final)}, {_gib(sizes[top])}" if top else ""))


def _tokenizer(c: Checklist, final: Path):
    if not folder.has_tokenizer(final):
        c.add("tokenizer", False, "no tokenizer files (tokenizer.json / tokenizer.model)", PROMOTE_FIX)
        return None
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(final)
    except Exception as e:
        c.add("tokenizer", False, f"tokenizer does not load: {_err(e)}", PROMOTE_FIX)
        return None
    c.add("tokenizer", True, f"{type(tok).__name__}, {len(tok)} tokens")
    return tok


def _template(c: Checklist, tok, template: str | None, messages: list[dict]) -> str | None:
    if tok is None:
        c.skip("template", "tokenizer")
        return None
    source = "run card template" if template else "tokenizer's chat template"
    if not template and not getattr(tok, "chat_template", None):
        c.add("template", False, "the tokenizer has no chat template and the run card names none",
              "set the evaluation's template: aci plan update --template templates/<model>.jinja, then promote again")
        return None
    try:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, chat_template=template)
    except Exception as e:
        c.add("template", False, f"the {source} fails to render: {_err(e)}", "fix or replace the chat template")
        return None
    if not isinstance(text, str) or not text.strip():
        c.add("template", False, f"the {source} renders an empty prompt", "fix or replace the chat template")
        return None
    c.add("template", True, f"the {source} renders {len(text)} characters")
    return text


def _end_of_turn(c: Checklist, final: Path, tok, template: str | None) -> None:
    fix = "promote again (promotion writes it), or add the end-of-turn id to eos_token_id in generation_config.json"
    try:
        gen = folder.read_json(final / folder.GENERATION_CONFIG)
    except Exception as e:
        c.add("end-of-turn", False, f"generation_config.json is broken: {_err(e)}", fix)
        return
    if gen is None:
        c.add("end-of-turn", False, "generation_config.json missing: vLLM would stop only at the base eos token "
              "(rule end-of-turn)", fix)
        return
    if tok is None:
        c.skip("end-of-turn", "tokenizer")
        return
    try:
        eot, eot_id = folder.end_of_turn(final, template)
    except Exception as e:
        c.add("end-of-turn", False, _err(e), "set the run card's template so the end-of-turn token can be found")
        return
    tok_id = tok.convert_tokens_to_ids(eot)
    eos = folder.eos_ids(gen.get("eos_token_id"))
    if tok_id != eot_id:
        c.add("end-of-turn", False, f"the tokenizer maps {eot} to {tok_id}, tokenizer.json to {eot_id}", fix)
    elif eot_id not in eos:
        c.add("end-of-turn", False, f"eos_token_id {eos} does not include {eot} (id {eot_id}): generations would run "
              f"to the token limit (rule end-of-turn)", fix)
    else:
        c.add("end-of-turn", True, f"{eot} (id {eot_id}) is in eos_token_id {eos}")


def _sampling(c: Checklist, final: Path) -> None:
    """How vLLM will decode: the generation config read as vLLM reads it, against the settings chosen."""
    from aci import sampling
    from aci.errors import ACIError

    try:
        reads = sampling.vllm_reads(final)
    except ACIError as e:
        c.add("sampling", False, str(e), PROMOTE_FIX)
        return
    held = (swap.marker(final) or {}).get("checkpoint") or ""
    chosen = sampling.split(held)[1]
    if chosen is None:
        c.add("sampling", True, f"vLLM decodes with {sampling.describe(reads)}; no settings chosen (skills/evaluate: "
              f"choose them on the dev set with eval-checkpoint evaluate --checkpoint <best>@greedy)")
        return
    ok = reads == sampling.expected_reads(chosen)
    c.add("sampling", ok, f"vLLM decodes with {sampling.describe(reads)}" +
          ("" if ok else f", not the chosen {sampling.name(chosen)}"), PROMOTE_FIX)


def _processor(c: Checklist, final: Path, base_dir: Path | None) -> None:
    need = [n for n in folder.PROCESSOR_FILES if base_dir is not None and (base_dir / n).is_file()]
    if not need:
        c.add("processor", True, "the base model has no processor files" if base_dir else
              "base model folder not found locally: nothing to compare")
        return
    gone = [n for n in need if not (final / n).is_file()]
    c.add("processor", not gone, f"missing {', '.join(gone)} (the base model has them)" if gone else
          f"present: {', '.join(need)}", f"copy {', '.join(gone)} from {base_dir}, or promote again")


def _promotion_record(c: Checklist, final: Path, best: dict | None) -> None:
    m = swap.marker(final)
    if m is None:
        c.add("promotion", False, f"final_model has no {swap.MARKER}: it was not made by a promotion, so nothing "
              "shows it beats the base model", "promote through aci eval-checkpoint promote")
        return
    if not best or best.get("promotion_id") != m.get("promotion_id"):
        c.add("promotion", False, f"final_model holds {m.get('checkpoint')} but best.json names "
              f"{(best or {}).get('checkpoint')}", "run aci eval-checkpoint promote again (it repairs best.json)")
        return
    bad = swap.verify(final)
    c.add("promotion", not bad, f"{m['checkpoint']}, unchanged since promotion" if not bad else
          f"{m['checkpoint']}, edited since promotion: {', '.join(bad[:4])}",
          "promote again so the folder is exactly what was evaluated")


def _generate(c: Checklist, final: Path, prompt: str, probe: Probe) -> None:
    """Load the model and answer the probe's item, in a child process that exits (`aci.evaluation.isolated`):
    the MCP server that runs `finalize` must not keep the model, or its GPU memory, afterwards. The reply
    must hold the answer format the benchmark card or grader names: a reply the grader cannot read an
    answer from scores 0 on every item, however well the model loads."""
    from aci.errors import ACIError
    from aci.evaluation import isolated

    try:
        out = isolated.run(generate_here, timeout_s=GENERATE_TIMEOUT_S, folder=str(final), prompt=prompt,
                           max_new_tokens=probe.max_new_tokens)
    except ACIError as e:
        c.add("generates", False, f"the model does not load or generate with transformers: {e}", PROMOTE_FIX)
        return
    said = f"{out['tokens']} tokens for {probe.item}: {out['reply'][:120]!r}"
    fmt = probe.format
    if fmt is None:
        c.add("generates", True, f"{said}; answer format not checked: neither the benchmark card's answer_format "
              f"nor a grader names one")
    elif fmt.found(out["reply"]):
        c.add("generates", True, f"{said}; holds {fmt.what}, as {fmt.source} asks")
    else:
        c.add("generates", False, f"{said}; no {fmt.what}, which {fmt.source} asks for: the grader would read no "
              f"answer", "train on replies in that format, rendered with the evaluation's template, and check "
              "the prompt the evaluation sends (benchmark card `prompt`); then promote again")


def generate_here(folder: str, prompt: str, max_new_tokens: int = 16) -> dict:
    """A short greedy reply to `prompt` from the model in `folder` (run in a child by `_generate`)."""
    from aci.errors import ACIError

    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gpu = torch.cuda.is_available()
        tok = AutoTokenizer.from_pretrained(folder)
        lm = AutoModelForCausalLM.from_pretrained(folder, dtype="auto" if gpu else torch.float32)
        lm = lm.to("cuda" if gpu else "cpu").eval()
        enc = tok(prompt, return_tensors="pt", add_special_tokens=False).to(lm.device)
        with torch.no_grad():
            out = lm.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                              pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    except Exception as e:
        raise ACIError(_err(e)) from None
    new = out[0, enc["input_ids"].shape[1]:]
    return {"tokens": int(new.shape[0]), "reply": tok.decode(new, skip_special_tokens=True)}
