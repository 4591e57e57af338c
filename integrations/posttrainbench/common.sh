# shellcheck shell=bash
# posttrain-aci inside a PostTrainBench task container: what every <agent>/solve.sh shares.
#
# The harness copies only agents/<name>/solve.sh into the container (as ~/agent_solve.sh) and runs it
# with bash in the task folder, with PROMPT and AGENT_CONFIG set and only the API keys that
# agents/<name>/api_keys.json allows. A solve.sh sets ACI_AGENT (claude-code, codex or opencode), sources
# this file (pack.sh inlines it), calls `aci_update_cli CLI` (the harness's own CLI update, when it placed
# ~/update_agent_cli.sh), `aci_setup PROMPT`, then `aci_run_agent CLI ARGS...`, which gives the CLI the
# prompt on stdin as the harness's own solve.sh files do.
#
# The agent always starts. `aci_setup` never fails: it runs the setup steps in a child shell under a time
# limit (ACI_SETUP_TIMEOUT seconds), logs them to $ACI_HOME/setup.log and to stderr (the harness's
# solve_out.txt), and sets ACI_PROMPT to the prompt it was given, plus one line pointing at the skill,
# the `aci` command and that log only when the bundle works (every step up to `aci install` passed).
# The CLI update runs first, so what it rewrites under ~/.local cannot touch what setup installs.
# The setup steps:
#   1. a venv of our own that sees the container's packages: `python -m venv --without-pip
#      --system-site-packages`, or, where the venv module is missing (Ubuntu's python3.10 without
#      python3-venv), the same layout written by hand (bin/python and pyvenv.cfg); plus the container
#      interpreter's own site-packages when that interpreter is itself a venv. Nothing is installed
#      into the container's environment;
#   2. pip: the pip wheel packed into this script by pack.sh, run as `python pip.whl/pip` (the image
#      has no pip), else the container's pip, else uv;
#   3. posttrain-aci with --no-deps (the wheel packed into this script, else ACI_PACKAGE, else this
#      checkout), then its requirements under constraints of every package the container already
#      has (falling back to pinning only the ML stack), so torch/transformers/trl/... are reused;
#   4. the ML stack's versions, as the container and our venv see them, must be unchanged;
#   5. the MCP server answers (the SDK's client lists its tools); `aci install $ACI_AGENT` (skills, MCP
#      registration, pointer file) and a link in ~/.local/bin;
#      then, not required for the pointer, `aci plan init --profile posttrainbench` with the model and
#      benchmark read from the prompt (escaped or plain backticks) and the deadline from timer.sh.
#
# `aci_run_agent` runs the agent as a child. When it exits, on TERM or INT, or 3 minutes after the
# timer's deadline (ACI_STOP_AFTER_DEADLINE; before the harness kills the container at +5 minutes and
# nothing could clean up), it stops the agent, journals how the run ended (`aci guard end`: the last
# journal entry then states the reason, for the judges), and takes out everything `aci install` wrote
# (pointer, skills, .aci/, registrations): the integrity judges run afterwards in the same folder and
# HOME and would read them as instructions. state/ (the run's history) and the venv stay; so do the
# harness's files in HOME (contamination_check.py, test_data.json, update_agent_cli.sh).
#
# The Harbor integration (integrations/harbor/) runs the same functions through sandbox.sh there.
#
# Settings (environment): ACI_PACKAGE (a wheel, a source folder or a requirement), ACI_HOME (default
# ~/.posttrain-aci), ACI_PYTHON (default python, else python3, on PATH), ACI_BASE_MODEL and
# ACI_BENCHMARK (when the prompt does not name them), ACI_SETUP_TIMEOUT (default 900 s),
# ACI_STOP_AFTER_DEADLINE (default 180 s; 0 never stops the agent), ACI_UPDATE_CLI (the harness's CLI
# update script, default ~/update_agent_cli.sh; run when it exists).

ACI_STACK="torch transformers trl peft vllm accelerate datasets tokenizers safetensors flash-attn lm-eval"
ACI_HOME="${ACI_HOME:-$HOME/.posttrain-aci}"
ACI_VENV="$ACI_HOME/venv"
ACI_LOG="$ACI_HOME/setup.log"
ACI_PYTHON="${ACI_PYTHON:-$(command -v python || command -v python3 || echo python)}"
ACI_SETUP_TIMEOUT="${ACI_SETUP_TIMEOUT:-900}"
ACI_STOP_AFTER_DEADLINE="${ACI_STOP_AFTER_DEADLINE:-180}"
ACI_UPDATE_CLI="${ACI_UPDATE_CLI:-$HOME/update_agent_cli.sh}"
ACI_EVAL_COMMAND='python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}'
ACI_WORKDIR="$PWD"
ACI_CHECKOUT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." 2> /dev/null && pwd)"  # unpacked use: install it
export ACI_AGENT ACI_STACK ACI_HOME ACI_VENV ACI_LOG ACI_PYTHON ACI_EVAL_COMMAND ACI_WORKDIR ACI_CHECKOUT

aci_log() { echo "[posttrain-aci] $*" >&2; }
aci_note() { echo "[posttrain-aci] $*" | tee -a "$ACI_LOG" >&2; }  # the parent's messages, also in the log
aci_die() {
    echo "[posttrain-aci] setup failed: $*" >&2
    exit 1
}

# `aci install` scope: Codex reads ~/.codex (config.toml, skills/) wherever it runs; the workspace's
# .codex/ with ACI_CODEX_SCOPE=project (Harbor, whose Codex has a CODEX_HOME of its own).
aci_scope() { [ "$ACI_AGENT" = codex ] && [ "${ACI_CODEX_SCOPE:-global}" = global ] && echo --global; }

# name==version for each ML-stack package the interpreter $1 sees ("absent" when missing).
aci_versions() {
    "$1" - "$ACI_STACK" <<'PY'
import importlib.metadata as m, sys
for name in sys.argv[1].split():
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        print(f"{name}==absent")
PY
}

# Fail when the ML stack seen by interpreter $2 differs from the snapshot in file $1.
aci_check_versions() {
    local now
    now="$(aci_versions "$2")"
    if [ "$now" != "$(cat "$1")" ]; then
        aci_die "the ML stack changed (the final model must run with it); expected:
$(cat "$1")
found with $2:
$now"
    fi
}

# Every distribution the interpreter $1 sees, as constraints (first on sys.path wins, as on import);
# with "stack" only the ML stack's packages.
aci_constraints() {
    "$1" - "$2" "$ACI_STACK" <<'PY'
import importlib.metadata as m, re, sys
only = set(sys.argv[2].split()) if sys.argv[1] == "stack" else None
seen = set()
for d in m.distributions():
    name = d.metadata["Name"]
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen or key == "posttrain-aci" or (only is not None and key not in only):
        continue
    seen.add(key)
    print(f"{key}=={d.version}")
PY
}

aci_make_venv() {
    rm -rf "$ACI_VENV"
    if ! "$ACI_PYTHON" -m venv --without-pip --system-site-packages "$ACI_VENV" 2> "$ACI_HOME/venv.err"; then
        aci_log "python -m venv failed ($(tail -n 1 "$ACI_HOME/venv.err")); writing the venv by hand"
        rm -rf "$ACI_VENV"
        "$ACI_PYTHON" - "$ACI_VENV" <<'PY'
import os, sys
venv, base = sys.argv[1], getattr(sys, "_base_executable", sys.executable)
os.makedirs(os.path.join(venv, "bin"))
os.symlink(base, os.path.join(venv, "bin", "python"))
with open(os.path.join(venv, "pyvenv.cfg"), "w") as f:
    f.write(f"home = {os.path.dirname(base)}\ninclude-system-site-packages = true\n"
            f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
PY
    fi
    local site
    site="$("$ACI_VENV/bin/python" -c 'import site, sys
assert sys.prefix != sys.base_prefix, "not a venv"
print([p for p in site.getsitepackages() if p.startswith(sys.prefix)][0])')" || aci_die "$ACI_VENV is not a working venv"
    mkdir -p "$site"
    # A container interpreter that is itself a venv is not what --system-site-packages exposes: add its
    # site-packages after ours, so our venv sees exactly the packages the container's python sees.
    "$ACI_PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
        > "$site/_aci_container.pth"
}

aci_pip() {
    local wheel
    wheel="$(ls "$ACI_HOME"/dist/pip-*.whl 2> /dev/null | head -n 1)"
    if [ -n "$wheel" ]; then
        "$ACI_VENV/bin/python" "$wheel/pip" --disable-pip-version-check --no-input --retries 1 --timeout 30 "$@"
    elif "$ACI_VENV/bin/python" -c 'import pip' 2> /dev/null; then
        "$ACI_VENV/bin/python" -m pip --disable-pip-version-check --no-input --retries 1 --timeout 30 "$@"
    elif command -v uv > /dev/null; then
        uv pip "$@" --python "$ACI_VENV/bin/python"
    else
        aci_die "no pip: none packed into this script (see pack.sh), none in the container, and no uv"
    fi
}

aci_package() {
    local packed
    packed="$(ls "$ACI_HOME"/dist/posttrain_aci-*.whl 2> /dev/null | head -n 1)"
    if [ -n "${ACI_PACKAGE:-}" ]; then
        echo "$ACI_PACKAGE"
    elif [ -n "$packed" ]; then
        echo "$packed"
    elif [ -f "$ACI_CHECKOUT/pyproject.toml" ]; then
        echo "$ACI_CHECKOUT"
    else
        echo posttrain-aci
    fi
}

aci_install_bundle() {
    local package requirements
    package="$(aci_package)"
    aci_log "installing $package into $ACI_VENV (no dependencies)"
    aci_pip install -q --no-deps "$package" || aci_die "cannot install $package"
    requirements="$("$ACI_VENV/bin/python" - "$(ls "$ACI_HOME"/dist/pip-*.whl 2> /dev/null | head -n 1)" <<'PY'
import importlib.metadata as m, sys
sys.path.append(sys.argv[1])  # the packed pip wheel vendors packaging
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
for raw in m.requires("posttrain-aci") or []:  # the core ones and the data extra, when not already met
    req = Requirement(raw)
    if req.marker is not None and not req.marker.evaluate({"extra": "data"}):
        continue
    try:
        if req.specifier.contains(m.version(req.name), prereleases=True):
            continue
    except m.PackageNotFoundError:
        pass
    print(str(req).split(";")[0].strip())
PY
)" || aci_die "cannot read posttrain-aci's requirements"
    [ -n "$requirements" ] || return 0
    aci_log "installing its missing requirements: ${requirements//$'\n'/ }"
    aci_constraints "$ACI_VENV/bin/python" all > "$ACI_HOME/constraints.txt"
    # shellcheck disable=SC2086
    if ! aci_pip install -q -c "$ACI_HOME/constraints.txt" $requirements; then
        aci_log "they need versions the container does not have; pinning only the ML stack" \
                "(other packages may be newer, in $ACI_VENV only)"
        aci_constraints "$ACI_VENV/bin/python" stack > "$ACI_HOME/constraints.txt"
        # shellcheck disable=SC2086
        aci_pip install -q -c "$ACI_HOME/constraints.txt" $requirements \
            || aci_die "cannot install posttrain-aci's requirements (${requirements//$'\n'/ }) without changing the ML stack"
    fi
}

# Model and benchmark from the harness prompt ("We want to train the small LLM `M` to excel at B.");
# the template escapes its backticks, and only some launch paths evaluate the escapes away.
aci_parse_prompt() {
    "$ACI_PYTHON" - "$1" <<'PY'
import re, sys
m = re.search(r"train the small LLM \\?`([^`\\]+)\\?` to excel at (.+?)\.[ \t]*$", sys.argv[1], re.M)
print(m.group(1) if m else "")
print(m.group(2).strip() if m else "")
PY
}

aci_plan_init() {
    local parsed model benchmark
    parsed="$(aci_parse_prompt "${PROMPT:-}")" || return 1
    model="${ACI_BASE_MODEL:-$(echo "$parsed" | sed -n 1p)}"
    benchmark="${ACI_BENCHMARK:-$(echo "$parsed" | sed -n 2p)}"
    if [ -f state/run.json ]; then
        aci_log "run card exists already (state/run.json): keeping it"
    elif [ -z "$model" ] || [ -z "$benchmark" ]; then
        aci_log "no model and benchmark in the prompt (set ACI_BASE_MODEL and ACI_BENCHMARK): the agent starts the run card"
        return 1
    else
        "$ACI_VENV/bin/aci" plan init --profile posttrainbench --base-model "$model" --benchmark "$benchmark" \
            --eval-command "$ACI_EVAL_COMMAND" >&2
    fi
}

# The MCP server starts in this folder and lists its tools, through the MCP SDK's own client (Codex
# refuses to start when a server it must wait for fails, so the bundle only counts as working with this).
aci_check_server() {
    timeout 120 "$ACI_VENV/bin/python" - "$PWD" <<'PY'
import sys

import anyio
from mcp import Client, StdioServerParameters


async def main() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "aci.cli", "--workdir", sys.argv[1], "serve"])
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
    assert tools, "the server lists no tools"
    print(f"the MCP server answers with {len(tools)} tools", file=sys.stderr)


anyio.run(main)
PY
}

# The setup proper, in a child shell; writes $ACI_HOME/ready (the aci command) once the bundle works.
aci_setup_steps() {
    set -euo pipefail
    [ -f evaluate.py ] && [ -f timer.sh ] || aci_die "not a task folder (no evaluate.py or timer.sh in $PWD)"
    command -v "$ACI_PYTHON" > /dev/null || aci_die "no python ($ACI_PYTHON)"
    aci_versions "$ACI_PYTHON" > "$ACI_HOME/stack-before.txt"
    aci_make_venv
    aci_check_versions "$ACI_HOME/stack-before.txt" "$ACI_VENV/bin/python"
    aci_install_bundle
    aci_check_versions "$ACI_HOME/stack-before.txt" "$ACI_PYTHON"
    aci_check_versions "$ACI_HOME/stack-before.txt" "$ACI_VENV/bin/python"
    aci_log "ML stack unchanged: $(tr '\n' ' ' < "$ACI_HOME/stack-before.txt")"
    # shellcheck disable=SC2046
    aci_check_server || aci_die "the MCP server does not start"
    "$ACI_VENV/bin/aci" install "$ACI_AGENT" --workdir "$PWD" $(aci_scope) > /dev/null || aci_die "aci install failed"
    mkdir -p "$HOME/.local/bin"
    ln -sf "$ACI_VENV/bin/aci" "$HOME/.local/bin/aci"
    echo "$ACI_VENV/bin/aci" > "$ACI_HOME/ready"
    aci_plan_init || aci_log "no run card yet: the agent starts it with aci plan init"
}

# Everything the child shell needs, passed as functions (the packed wheels stay in the parent).
ACI_FUNCTIONS="aci_log aci_die aci_scope aci_versions aci_check_versions aci_constraints aci_make_venv aci_pip
aci_package aci_install_bundle aci_parse_prompt aci_plan_init aci_check_server aci_setup_steps"

# The harness's own CLI update (it npm-installs the newest CLI $1 into ~/.local, first on PATH), when
# the harness placed it; best effort, as the harness's own solve.sh files run it.
aci_update_cli() {
    [ -f "$ACI_UPDATE_CLI" ] || return 0
    aci_log "updating $1 with the harness's $ACI_UPDATE_CLI"
    bash "$ACI_UPDATE_CLI" "$1" >&2 < /dev/null || aci_log "$ACI_UPDATE_CLI $1 failed: starting the $1 found on PATH"
    hash -r
}

# The line added to the prompt once the bundle works.
aci_pointer() {
    echo "Before anything else, read .aci/SKILL.md and follow it: it is the posttrain-aci skill for this task. Its tools are served by the MCP server \`posttrain-aci\` and by the command $(cat "$ACI_HOME/ready") (call it by this full path); setup notes are in $ACI_LOG."
}

# Unpack the packed wheels and run the setup steps under the time limit; succeeds when the bundle works.
aci_prepare() {
    [ -n "${ACI_AGENT:-}" ] || { aci_log "ACI_AGENT is not set: starting the agent without posttrain-aci"; return 1; }
    mkdir -p "$ACI_HOME" || { aci_log "cannot create $ACI_HOME: starting the agent without posttrain-aci"; return 1; }
    rm -f "$ACI_HOME/ready"
    if declare -F aci_packed_files > /dev/null; then
        rm -rf "$ACI_HOME/dist" && mkdir -p "$ACI_HOME/dist" && aci_packed_files "$ACI_HOME/dist" \
            || aci_note "cannot unpack the packed wheels into $ACI_HOME/dist"
    fi
    local limit=() status
    command -v timeout > /dev/null && limit=(timeout -k 10 "$ACI_SETUP_TIMEOUT")
    # shellcheck disable=SC2086,SC2163
    export -f $ACI_FUNCTIONS
    "${limit[@]}" bash -c aci_setup_steps 2>&1 < /dev/null | tee -a "$ACI_LOG" >&2
    status="${PIPESTATUS[0]}"
    # shellcheck disable=SC2086,SC2163
    export -nf $ACI_FUNCTIONS
    if [ -s "$ACI_HOME/ready" ]; then
        aci_note "ready: the agent starts with a line pointing to the skill"
        return 0
    fi
    [ "$status" = 124 ] && aci_note "setup stopped after ${ACI_SETUP_TIMEOUT}s"
    aci_note "starting the agent without posttrain-aci (setup log: $ACI_LOG)"
    return 1
}

aci_setup() {
    ACI_PROMPT="${1-${PROMPT:-}}"
    export ACI_PROMPT
    trap 'aci_cleanup "solve.sh exited"' EXIT
    if aci_prepare; then
        ACI_PROMPT="$ACI_PROMPT

$(aci_pointer)"
    fi
}

# Seconds until the timer's deadline plus ACI_STOP_AFTER_DEADLINE; empty when unknown or disabled.
aci_seconds_to_stop() {
    local hours created
    hours="$(sed -n 's/^NUM_HOURS=\([0-9][0-9]*\)$/\1/p' timer.sh 2> /dev/null)"
    created="$(sed -n 's/^CREATION_DATE=\([0-9][0-9]*\)$/\1/p' timer.sh 2> /dev/null)"
    [ -n "$hours" ] && [ -n "$created" ] && [ "$ACI_STOP_AFTER_DEADLINE" != 0 ] || return 0
    local left=$((created + hours * 3600 + ACI_STOP_AFTER_DEADLINE - $(date +%s)))
    echo $((left > 0 ? left : 0))
}

aci_stop_agent() {
    [ -n "${ACI_AGENT_PID:-}" ] || return 0
    kill -TERM "$ACI_AGENT_PID" 2> /dev/null || return 0
    for _ in $(seq 1 20); do
        kill -0 "$ACI_AGENT_PID" 2> /dev/null || return 0
        sleep 1
    done
    kill -KILL "$ACI_AGENT_PID" 2> /dev/null || true
}

# Journal how the run ended ($1), then take out what `aci install` wrote (idempotent). The shell fallback
# covers a venv the agent broke.
aci_cleanup() {
    [ -z "${ACI_CLEANED:-}" ] || return 0
    ACI_CLEANED=1
    [ -n "${ACI_WATCHDOG_PID:-}" ] && kill "$ACI_WATCHDOG_PID" 2> /dev/null
    aci_stop_agent
    aci_note "the run ended: $1"
    [ -d "$ACI_WORKDIR/.aci" ] || [ -e "$ACI_HOME/ready" ] || return 0
    (cd "$ACI_WORKDIR" && "$ACI_VENV/bin/python" -m aci.cli guard end --how "$1") >> "$ACI_LOG" 2>&1 \
        || aci_note "could not journal how the run ended ($1)"
    # shellcheck disable=SC2046
    if ! (cd "$ACI_WORKDIR" && "$ACI_VENV/bin/python" -m aci.cli install "$ACI_AGENT" --workdir . $(aci_scope) --remove) \
        >> "$ACI_LOG" 2>&1; then
        aci_note "aci install --remove failed; removing the bundle's instruction files by hand"
        local names dir name
        names="posttrain $(ls "$ACI_WORKDIR/.aci/skills" 2> /dev/null)"
        for dir in "$ACI_WORKDIR/.claude/skills" "$ACI_WORKDIR/.codex/skills" "$ACI_WORKDIR/.opencode/skills" \
                   "$HOME/.codex/skills"; do
            for name in $names; do rm -rf "${dir:?}/$name"; done
        done
        rm -rf "$ACI_WORKDIR/.aci"
        for name in CLAUDE.md AGENTS.md; do
            [ -f "$ACI_WORKDIR/$name" ] && sed -i '/<!-- posttrain-aci:begin -->/,/<!-- posttrain-aci:end -->/d' "$ACI_WORKDIR/$name"
        done
    fi
    [ "$(readlink "$HOME/.local/bin/aci" 2> /dev/null)" = "$ACI_VENV/bin/aci" ] && rm -f "$HOME/.local/bin/aci"
    rm -f "$ACI_HOME/ready"
    aci_note "took the bundle's instructions out of $ACI_WORKDIR and HOME (kept: state/ and $ACI_VENV)"
}

# Run the agent CLI ("$@") as a child with the prompt ($ACI_PROMPT) on its stdin; exit with its status
# after cleanup.
aci_run_agent() {
    trap 'aci_cleanup "the harness sent TERM to solve.sh"; exit 143' TERM
    trap 'aci_cleanup "solve.sh was interrupted (INT)"; exit 130' INT
    rm -f "$ACI_HOME/stopped"
    "$@" < <(printf '%s' "$ACI_PROMPT") &
    ACI_AGENT_PID=$!
    local stop
    stop="$(aci_seconds_to_stop)"
    if [ -n "$stop" ]; then
        (
            trap 'kill "$nap" 2> /dev/null; exit 0' TERM
            sleep "$stop" &
            nap=$!
            wait "$nap" && aci_note "the timer's deadline passed ${ACI_STOP_AFTER_DEADLINE}s ago: stopping the agent" \
                && touch "$ACI_HOME/stopped" && kill -TERM "$ACI_AGENT_PID" 2> /dev/null
        ) &
        ACI_WATCHDOG_PID=$!
    fi
    local status=0 how
    wait "$ACI_AGENT_PID" || status=$?
    ACI_AGENT_PID=""
    how="the agent exited with status $status"
    [ -e "$ACI_HOME/stopped" ] && how="solve.sh stopped the agent ${ACI_STOP_AFTER_DEADLINE}s after the timer's deadline"
    aci_cleanup "$how"
    exit "$status"
}
