"""The rollout loop: tasks x trials through a policy and a tool environment, written as they finish.

Per task: the prompt turns (plus the run's system prompt when the task has none) go to the policy;
each reply's tool calls are checked (unknown tool, arguments vs the schema), executed in a fresh
environment, and their outputs (or `Error: ...`) appended as tool messages for the next turn. The task
ends on a reply without tool calls, or at a limit (turns, tool calls, seconds), or when the policy
fails after its retries. Without a tool environment, calls are recorded and graded but not run, and
the task ends at the first reply (single-turn function calling).

Tools offered: the task's own `tools` when it has them (byte for byte), else the environment's.

Every fault stays inside its task: a 500 storm, a timeout, a malformed call, a raising or hanging tool
are recorded on the turn or step, the task is graded on what it produced, and the run goes on. Each
finished task is one appended line in `trial-<k>.jsonl`; a re-run skips (trial, task) pairs already
there, so a killed run resumes without duplicates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aci.errors import ACIError
from aci.rollout import marks
from aci.rollout.envs import ToolEnv, ToolSource
from aci.rollout.policy import Policy, PolicyError, Reply, Settings
from aci.rollout.trace import Step, TaskTrace, Turn
from aci.state import append_jsonl, iso, read_jsonl


@dataclass
class Limits:
    max_turns: int = 8
    max_tool_calls: int = 16
    time_limit_s: float = 300.0
    tool_timeout_s: float = 60.0


def default_grade(task: dict, response: str, tool_calls: list[dict]):
    from aci.graders import grade

    return grade(task, response, tool_calls)


@dataclass
class Rollout:
    tasks: list[dict]
    policy: Policy
    out: Path
    tools: ToolSource | None = None
    trials: int = 1
    concurrency: int = 8
    limits: Limits = field(default_factory=Limits)
    settings: Settings = field(default_factory=Settings)
    system_prompt: str | None = None
    success_threshold: float = 1.0
    grade: Callable[[dict, str, list[dict]], Any] = default_grade
    default_grader: str | dict | None = None  # for tasks naming none (decides where grading runs)
    progress: Callable[[dict], None] | None = None
    should_stop: Callable[[], bool] | None = None


@dataclass
class RunCounts:
    pending: int = 0
    ran: int = 0
    skipped_done: int = 0
    not_started: int = 0
    successes: int = 0
    wall_s: float = 0.0


def trial_path(out: Path, trial: int) -> Path:
    return out / f"trial-{trial}.jsonl"


def read_traces(out: Path, trials: int | None = None) -> dict[int, list[TaskTrace]]:
    """Every complete task line per trial (a torn last line from a kill is not a record)."""
    found = {}
    for p in sorted(out.glob("trial-*.jsonl")):
        k = int(p.stem.split("-", 1)[1])
        if trials is None or k <= trials:
            found[k] = [TaskTrace.model_validate(r) for r in read_jsonl(p)]
    return found


def first_messages(task: dict, system_prompt: str | None) -> list[dict]:
    msgs = [dict(m) for m in task["messages"]]
    if system_prompt and not (msgs and msgs[0].get("role") == "system"):
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


class _Task:
    """One trajectory: the state of a task while it runs."""

    def __init__(self, r: Rollout, task: dict, trial: int):
        self.r, self.task, self.trial = r, task, trial
        self.settings = r.settings.for_trial(trial)
        self.turns: list[Turn] = []
        self.n_steps = 0
        self.calls_made = 0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    async def run(self) -> TaskTrace:
        started, t0 = iso(), time.monotonic()
        self.deadline = t0 + self.r.limits.time_limit_s
        error = None
        try:
            if self.r.tools is None:
                stop = await self._loop(None)
            else:
                async with self.r.tools.trajectory() as env:
                    stop = await self._loop(env)
        except ACIError as e:  # the environment could not be set up for this task
            stop, error = "policy-error", str(e)
        return await self._grade(started, time.monotonic() - t0, stop, error)

    async def _loop(self, env: ToolEnv | None) -> str:
        r = self.r
        offered = self.task.get("tools") or (env.tools if env else None)
        schemas = {t["function"]["name"]: t["function"].get("parameters") for t in offered or []}
        messages = first_messages(self.task, r.system_prompt)
        for index in range(r.limits.max_turns):
            request = r.policy.request(messages, offered, self.settings)
            turn = Turn(index=index, request=request)
            self.turns.append(turn)
            if self.left() <= 0:
                turn.error = f"time limit of {r.limits.time_limit_s:g} s reached before this turn"
                return "time-limit"
            t0 = time.monotonic()
            try:
                reply = await asyncio.wait_for(r.policy.complete(request), self.left())
            except asyncio.TimeoutError:
                turn.latency_s = round(time.monotonic() - t0, 4)
                turn.error = f"time limit of {r.limits.time_limit_s:g} s reached waiting for the policy"
                return "time-limit"
            except PolicyError as e:
                turn.latency_s = round(time.monotonic() - t0, 4)
                turn.error, turn.attempts, turn.retry_errors = str(e), e.attempts, e.retry_errors
                return "policy-error"
            turn.latency_s = round(time.monotonic() - t0, 4)
            self._record_reply(turn, reply)
            if not reply.calls:
                return "final"
            if env is None:
                for call in reply.calls:
                    marks.check_call(self._call_step(turn, call), schemas)
                return "no-environment"
            messages = [*messages, reply.message]
            stop = None
            for call in reply.calls:
                step = self._call_step(turn, call)
                marks.check_call(step, schemas)
                stop = await self._execute(step, env) or stop
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": step.output if step.error is None else f"Error: {step.error}"})
            if stop:
                return stop
        return "max-turns"

    def _record_reply(self, turn: Turn, reply: Reply) -> None:
        turn.reply = reply.message
        turn.finish_reason = reply.finish_reason
        turn.prompt_tokens, turn.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        turn.attempts, turn.retry_errors = reply.attempts, reply.retry_errors
        if reply.content.strip():
            turn.steps.append(Step(index=self._next(), kind="message", text=reply.content))
        for block in reply.malformed:
            turn.steps.append(Step(index=self._next(), kind="tool_call", error=f"malformed tool call: {block}",
                                   unknown_tool=True))

    def _call_step(self, turn: Turn, call) -> Step:
        step = Step(index=self._next(), kind="tool_call", call_id=call.id, name=call.name,
                    arguments_raw=call.arguments_raw, arguments=call.arguments, invalid_reason=call.parse_error)
        turn.steps.append(step)
        return step

    def _next(self) -> int:
        self.n_steps += 1
        return self.n_steps - 1

    async def _execute(self, step: Step, env: ToolEnv) -> str | None:
        """Run one checked call; returns a stop reason when a limit ends the task."""
        limits = self.r.limits
        self.calls_made += 1
        if self.calls_made > limits.max_tool_calls:
            step.error = f"tool-call limit of {limits.max_tool_calls} per task reached: not executed"
            return "max-tool-calls"
        if step.unknown_tool:
            step.error = f"unknown tool {step.name!r}; offered: {', '.join(sorted(self._offered_names(env)))}"
        elif step.invalid_arguments:
            step.error = f"invalid arguments for {step.name}: {step.invalid_reason}"
        elif not env.has(step.name):
            step.error = f"tool {step.name!r} is offered by the task but the environment does not implement it"
        elif self.left() <= 0:
            step.error = f"time limit of {limits.time_limit_s:g} s reached before this call"
            return "time-limit"
        else:
            t0 = time.monotonic()
            result = await env.call(step.name, step.arguments, min(limits.tool_timeout_s, self.left()))
            step.executed, step.duration_s = True, round(time.monotonic() - t0, 4)
            step.output, step.error = result.output, result.error
            if result.error and self.left() <= 0:
                return "time-limit"
        return None

    def _offered_names(self, env: ToolEnv) -> list[str]:
        return [t["function"]["name"] for t in (self.task.get("tools") or env.tools)]

    def _inline_grader(self) -> bool:
        """Graders that only read the response run on the loop (a thread hop costs more than they do); those
        that run code, commands or an LLM judge run in a worker thread so they never stall other trajectories."""
        from aci.graders import runs_inline

        return runs_inline(self.task.get("grader") or self.r.default_grader)

    async def _grade(self, started: str, duration: float, stop: str, error: str | None) -> TaskTrace:
        last = next((t.reply for t in reversed(self.turns) if t.reply is not None), None)
        final_text = (last or {}).get("content") or ""
        calls = [{"name": s.name, "arguments": s.arguments} for t in self.turns for s in t.steps
                 if s.kind == "tool_call" and s.name and s.arguments is not None]
        try:
            if self._inline_grader():
                score = self.r.grade(self.task, final_text, calls)
            else:
                score = await asyncio.to_thread(self.r.grade, self.task, final_text, calls)
            value, reason = float(score.score), score.reason
        except ACIError as e:  # the task lacks what its grader needs: a data error, recorded on the task
            value, reason, error = 0.0, f"not graded: {e}", error or str(e)
        except Exception as e:  # a broken custom grader must not cost the trajectory
            value, reason = 0.0, f"not graded: the grader raised {type(e).__name__}: {e}"
            error = error or reason
        trace = TaskTrace(
            trial=self.trial, task_id=self.task["id"], task_type=self.task.get("type"),
            subtype=self.task.get("subtype"), started_at=started, duration_s=round(duration, 4), stop_reason=stop,
            error=error or next((t.error for t in self.turns if t.error), None), turns=self.turns,
            final_text=final_text, tool_calls=calls, score=value, reason=reason,
            success=value >= self.r.success_threshold,
        )
        marks.finish(trace, (self.task.get("gold") or {}).get("tool_calls"))
        return trace


class _Writer:
    """Appends finished tasks to their trial file off the event loop, in order, one whole line each.

    Tasks that finish while a batch is being written form the next batch, so a slow disk (an fsync per
    line) neither blocks the loop nor holds a rollout slot. `ran` and progress count written lines only.
    """

    def __init__(self, r: Rollout, counts: RunCounts):
        self.r, self.counts = r, counts
        self.pending: list[tuple[int, dict, bool]] = []
        self.flushing: asyncio.Task | None = None

    def add(self, trace: TaskTrace) -> None:
        self.pending.append((trace.trial, trace.model_dump(mode="json", exclude_none=True), trace.success))
        if self.flushing is None or self.flushing.done():
            self.flushing = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            await asyncio.to_thread(self._append, batch)
            self.counts.ran += len(batch)
            self.counts.successes += sum(ok for _, _, ok in batch)
            if self.r.progress:
                self.r.progress({"done": self.counts.ran, "total": self.counts.pending,
                                 "successes": self.counts.successes})

    def _append(self, batch: list[tuple[int, dict, bool]]) -> None:
        for trial, record, _ in batch:
            append_jsonl(trial_path(self.r.out, trial), record)

    async def close(self) -> None:
        while self.flushing is not None and not self.flushing.done():
            await self.flushing
        if self.flushing is not None:
            self.flushing.result()  # a write error (disk full) surfaces here


async def run(r: Rollout) -> RunCounts:
    """Roll every (trial, task) pair not yet in `r.out`, `r.concurrency` at a time."""
    t_start = time.monotonic()
    r.out.mkdir(parents=True, exist_ok=True)
    ids = [t["id"] for t in r.tasks]
    if len(set(ids)) != len(ids):
        raise ACIError("task ids must be unique within a run (resume is keyed by trial and task id)")
    done = {k: {t.task_id for t in v} for k, v in read_traces(r.out).items()}
    pending = [(k, t) for k in range(1, r.trials + 1) for t in r.tasks if t["id"] not in done.get(k, set())]
    counts = RunCounts(pending=len(pending), skipped_done=r.trials * len(r.tasks) - len(pending))
    writer = _Writer(r, counts)
    sem = asyncio.Semaphore(r.concurrency)

    async def one(trial: int, task: dict) -> None:
        async with sem:
            if r.should_stop and r.should_stop():
                counts.not_started += 1
                return
            try:
                trace = await _Task(r, task, trial).run()
            except Exception as e:  # a bug must not cost the rest of the run; it is recorded on the task
                trace = TaskTrace(trial=trial, task_id=task["id"], task_type=task.get("type"), started_at=iso(),
                                  duration_s=0.0, stop_reason="policy-error", score=0.0,
                                  error=f"internal error: {type(e).__name__}: {e}", reason="not graded",
                                  success=False)
        writer.add(trace)

    if pending:
        async with r.tools.running() if r.tools else nullcontext():
            try:
                await asyncio.gather(*(one(k, t) for k, t in pending))
            finally:
                await writer.close()
    counts.wall_s = round(time.monotonic() - t_start, 3)
    return counts
