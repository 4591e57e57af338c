"""GRPO reward functions built from the project's graders: the same grader that scores evaluation and
`verify-task` scores each completion, so the policy is optimised for exactly what is measured.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from aci import graders, rules


def grader_reward(default: str | dict | None, *, workdir: Path, profile: str,
                  unsafe_grader: bool = False) -> Callable[..., list[float]]:
    """A TRL reward function: `(prompts, completions, task, **columns) -> scores in [0, 1]`.

    `task` is the dataset column holding each row's task record as JSON (see `data.grpo_prompts`); the
    task's own `grader` is used, else `default`. A judge grader may only reach hosts the profile allows;
    `unit-tests` runs completions in its sandbox, as root only with `unsafe_grader` (`train --unsafe-grader`).
    """
    policy = rules.load(profile)

    def check_host(host: str) -> None:
        policy.check_host(host, judge=True)

    def grader(prompts, completions, task, **_columns) -> list[float]:
        out = []
        for completion, raw in zip(completions, task, strict=True):
            text = completion if isinstance(completion, str) else completion[-1]["content"]
            score = graders.grade(json.loads(raw), text, default=default, workdir=workdir, check_host=check_host,
                                  unsafe_grader=unsafe_grader)
            out.append(float(score.score))
        return out

    return grader
