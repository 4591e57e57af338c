"""How the profile's final evaluation will score `final_model/`: how many seeds, and why.

The final evaluation runs the benchmark once per seed and takes the mean (`Profile.final_eval`). Whether a
model counts as greedy is decided the way vLLM decides it: by the temperature it reads from
`generation_config.json` (`aci.sampling.vllm_reads`), greedy below the sampling epsilon, and the
profile's `default_temperature` (vLLM's 1.0) when the file sets none. vLLM does not read `do_sample`, so
`do_sample: false` with no temperature still samples, although transformers' own `generate()` would
decode greedily: `finalize` warns about that file, since a model tuned and measured greedy would then be
scored sampled. For a benchmark the profile does not list, whose eval script decodes with code of its
own (the script never names vLLM), the profile's vLLM facts do not hold: the statement says the script's
own decoding scores the model and warns of nothing. The statement is separate from finalize's checklist:
it passes or fails nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from aci import sampling
from aci.errors import ACIError
from aci.rules import FinalEval


class FinalScoring(BaseModel):
    """How the final evaluation scores final_model under the run's profile."""

    seeds: int | None = Field(description="runs the final evaluation averages; none when the eval script decides")
    greedy: bool | None = Field(description="vLLM decodes final_model greedily; none when its "
                                            "generation_config.json does not load")
    temperature: float | None = Field(None, description="the temperature vLLM reads for final_model")
    reason: str = Field(description="why that many seeds, in words")
    warnings: list[str] = Field(default_factory=list)


def _do_sample_false(folder: Path) -> bool:
    try:
        gen = json.loads((folder / "generation_config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(gen, dict) and gen.get("do_sample") is False


def statement(final_eval: FinalEval, benchmark: str, folder: Path, script: Path | None = None) -> FinalScoring:
    """The seeds `final_eval` gives `folder` for `benchmark`, from the temperature vLLM will read there;
    `script` is the eval command's Python script, when it has one."""
    sampled_seeds, greedy_seeds, why, listed = final_eval.for_benchmark(benchmark)
    if not listed and script is not None and "vllm" not in script.read_text(errors="replace").lower():
        return FinalScoring(seeds=None, greedy=None, reason=(
            f"the profile lists no entry for {benchmark!r} and {script.name} does not use vLLM: the model is "
            f"scored as {script.name} decodes it, with the settings it passes (read it for seeds and sampling)"))
    where = "" if listed else f" (the profile's default: it lists no entry for {benchmark!r})"
    try:
        reads = sampling.vllm_reads(folder)
    except ACIError as e:
        same = sampled_seeds == greedy_seeds
        return FinalScoring(seeds=sampled_seeds, greedy=None, reason=(
            f"{sampled_seeds} seed(s) whatever the decoding{where}" if same else
            f"{greedy_seeds} seed(s) if greedy, {sampled_seeds} if sampled{where}; the decoding is unknown: {e}"))
    temperature = float(reads.get("temperature", final_eval.default_temperature))
    greedy = temperature < final_eval.greedy_below
    seeds = greedy_seeds if greedy else sampled_seeds
    set_by = ("no temperature in generation_config.json, so vLLM's default" if "temperature" not in reads
              else "generation_config.json")
    decoding = (f"greedy: temperature {temperature:g} from generation_config.json is below vLLM's sampling "
                f"epsilon {final_eval.greedy_below:g}" if greedy else f"sampled at temperature {temperature:g} "
                f"({set_by})")
    mean = "one run" if seeds == 1 else f"the mean over {seeds} seeds"
    reason = f"{mean}: {decoding}" + (f"; {why}" if why else "") + where
    warnings = []
    if not greedy and _do_sample_false(folder):
        warnings.append(f"generation_config.json says do_sample: false, which vLLM does not read: it samples "
                        f"at temperature {temperature:g}. For greedy decoding promote `<checkpoint>@greedy` "
                        f"(it writes temperature 0); else compare the sampled setting by its mean over trials")
    return FinalScoring(seeds=seeds, greedy=greedy, temperature=temperature, reason=reason, warnings=warnings)


def trials_warning(final_eval: FinalEval | None, benchmark: str, settings: dict | None,
                   seeds: list[int]) -> str | None:
    """For a `<checkpoint>@<settings>` evaluation: too few trials to estimate the mean the final evaluation
    takes of a sampled model (none when the profile sets no final evaluation)."""
    if final_eval is None or settings is None or len(seeds) >= 3:
        return None
    temperature = settings.get("temperature", final_eval.default_temperature)
    sampled_seeds, _, _, _ = final_eval.for_benchmark(benchmark)
    if temperature < final_eval.greedy_below or sampled_seeds < 2:
        return None
    return (f"the final evaluation scores a sampled model by the mean over {sampled_seeds} seeds: evaluate "
            f"sampled settings with --trials 3 or more, then compare the means")
