"""The workflows as MCP prompts, each with named arguments for what the user tells the agent.

A client that lists prompts shows `workflow-posttrain` with `eval_command`, `base_model` and
`benchmark`; the rendered prompt states the values given, turns them into the first commands where the
workflow has literal ones, and then carries the workflow's text unchanged (the same file agents read).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from aci import bundle
from aci.graders import SPEC_HELP


@dataclass(frozen=True)
class Argument:
    name: str
    description: str


# The inputs each workflow starts from; every one is optional (the workflow says how to find it).
ARGUMENTS: dict[str, tuple[Argument, ...]] = {
    "posttrain": (
        Argument("eval_command", "the eval command exactly as the user gave it, e.g. "
                                 "python evaluate.py --model-path final_model --limit -1"),
        Argument("base_model", "the base model to post-train: hub id or local folder"),
        Argument("benchmark", "the benchmark it is scored on, e.g. gsm8k"),
    ),
    "recover": (),
    "self-improvement": (
        Argument("tasks", "JSONL of training problems (task records) to sample answers for"),
        Argument("checkpoint", "the model to sample from (default: the current best)"),
        Argument("grader", f"grader for problems that name none: {SPEC_HELP}"),
    ),
    "tool-use-synthesis": (
        Argument("benchmark", "the tool-use benchmark the data must match, e.g. bfcl"),
    ),
}


def arguments(workflow: str) -> tuple[Argument, ...]:
    return ARGUMENTS.get(workflow, ())


def render(workflow: str, given: dict[str, str]) -> str:
    """The prompt text for `workflow` with the arguments in `given` (unknown names are an error)."""
    known = {a.name for a in arguments(workflow)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"workflow-{workflow} has no argument {', '.join(unknown)}; its arguments: "
                         f"{', '.join(sorted(known)) or 'none'}")
    values = {k: v.strip() for k, v in given.items() if v and v.strip()}
    head = [f"Follow the {workflow} workflow below."]
    if values:
        head += ["", "Given:"] + [f"- {k}: {v}" for k, v in values.items()]
    if workflow == "posttrain" and values:
        def arg(key: str) -> str:
            return shlex.quote(values[key]) if key in values else f"<{key.replace('_', '-')}>"

        init = f"aci plan init --base-model {arg('base_model')} --benchmark {arg('benchmark')}"
        if "eval_command" in values:
            init += f" --eval-command {arg('eval_command')}"
        head += ["", "Start with (the eval command goes in as typed; plan init says what it changed):",
                 "```bash", "aci status", init, "```"]
    text = bundle.path("workflows", f"{workflow}.md").read_text(encoding="utf-8")
    return "\n".join(head) + "\n\n" + text


def workflow_prompts() -> list:
    """One MCP prompt per workflow file, named `workflow-<name>`, with its named arguments."""
    from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument

    out = []
    for name in bundle.workflow_names():
        doc = bundle.description(bundle.path("workflows", f"{name}.md").read_text(encoding="utf-8"))

        out.append(Prompt(name=f"workflow-{name}", title=doc, description=f"Follow the {name} workflow: {doc}",
                          arguments=[PromptArgument(name=a.name, description=a.description, required=False)
                                     for a in arguments(name)], fn=_renderer(name)))
    return out


def _renderer(workflow: str):
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    def fn(**given: str) -> str:
        try:
            return render(workflow, given)
        except ValueError as e:  # the client sees this message, not a generic rendering error
            raise MCPError(INVALID_PARAMS, str(e)) from None

    return fn
