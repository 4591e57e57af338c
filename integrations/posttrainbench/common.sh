# posttrain-aci inside a PostTrainBench task container: the logic every <agent>/solve.sh shares.
#
# A solve.sh sets ACI_AGENT (claude-code, codex or opencode), sources this file, calls `aci_setup`, then
# starts its agent CLI with "$ACI_PROMPT". The harness provides PROMPT and AGENT_CONFIG and starts us in
# the task folder (evaluate.py, templates/, timer.sh). `aci_setup`:
#   1. makes a venv of our own that sees the container's packages (--system-site-packages, plus the
#      harness interpreter's own site-packages when that interpreter is itself a venv);
#   2. installs posttrain-aci into it with --no-deps, then its core requirements under a constraints
#      file of every package the container already has (falling back to pinning only the ML stack), so
#      the container's torch/transformers/trl/... are reused, never upgraded; nothing is installed into
#      the container's own environment, which the final evaluation uses;
#   3. checks that the ML stack's versions are unchanged, in the container and as our venv sees them,
#      and stops loudly otherwise;
#   4. runs `aci install $ACI_AGENT` and `aci plan init --profile posttrainbench` (model and benchmark
#      from the harness prompt, the deadline from timer.sh), and links `aci` into ~/.local/bin;
#   5. sets ACI_PROMPT: the harness prompt plus one line pointing to the entry skill.
#
# Settings (environment): ACI_PACKAGE what to install (a wheel, a source folder or a requirement;
# default: the wheel packed into this script by pack.sh, else the checkout this file belongs to, else
# posttrain-aci from PyPI); ACI_HOME where the venv goes (default ~/.posttrain-aci); ACI_PYTHON the
# container's interpreter (default python on PATH); ACI_BASE_MODEL / ACI_BENCHMARK when the prompt
# does not name them.

set -euo pipefail

ACI_STACK="torch transformers trl peft vllm accelerate datasets tokenizers safetensors flash-attn lm-eval"
ACI_HOME="${ACI_HOME:-$HOME/.posttrain-aci}"
ACI_VENV="$ACI_HOME/venv"
ACI_PYTHON="${ACI_PYTHON:-$(command -v python || command -v python3)}"
ACI_EVAL_COMMAND='python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}'

aci_log() { echo "[posttrain-aci] $*" >&2; }
aci_die() {
    echo "[posttrain-aci] ERROR: $*" >&2
    exit 1
}

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

# Stop loudly when the ML stack seen by interpreter $2 differs from the snapshot in file $1.
aci_check_versions() {
    local now
    now="$(aci_versions "$2")"
    if [ "$now" != "$(cat "$1")" ]; then
        aci_die "the ML stack changed (the final evaluation uses it); expected:
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
    if ! "$ACI_PYTHON" -m venv --system-site-packages "$ACI_VENV" 2> "$ACI_HOME/venv.log"; then
        # Debian-style pythons lack ensurepip: make the venv bare; pip then comes from the container.
        aci_log "python -m venv failed ($(tail -n 1 "$ACI_HOME/venv.log")); making the venv without pip"
        rm -rf "$ACI_VENV"
        "$ACI_PYTHON" -m venv --system-site-packages --without-pip "$ACI_VENV"
    fi
    # A harness interpreter that is itself a venv is not what --system-site-packages exposes: add its
    # site-packages after ours, so our venv sees exactly the packages the container's python sees.
    local site
    site="$("$ACI_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$ACI_PYTHON" -c 'import site, sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
        > "$site/_aci_container.pth"
}

aci_package() {
    if [ -n "${ACI_PACKAGE:-}" ]; then
        echo "$ACI_PACKAGE"
    elif declare -F aci_packed_wheel > /dev/null; then
        mkdir -p "$ACI_HOME/dist"
        aci_packed_wheel "$ACI_HOME/dist"
    elif [ -f "$(dirname "${BASH_SOURCE[0]}")/../../pyproject.toml" ]; then
        (cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    else
        echo posttrain-aci
    fi
}

aci_pip() {
    if "$ACI_VENV/bin/python" -c 'import pip' 2> /dev/null; then
        "$ACI_VENV/bin/python" -m pip --disable-pip-version-check --no-input "$@"
    elif command -v uv > /dev/null; then
        uv pip "$@" --python "$ACI_VENV/bin/python"
    else
        aci_die "no pip for $ACI_VENV: the container's python has neither ensurepip nor pip, and uv is missing"
    fi
}

aci_install_bundle() {
    local package requirements
    package="$(aci_package)"
    aci_log "installing $package into $ACI_VENV (no dependencies)"
    aci_pip install -q --no-deps "$package"
    requirements="$("$ACI_VENV/bin/python" - <<'PY'
import importlib.metadata as m
try:
    from packaging.requirements import Requirement
except ImportError:  # pip always carries it
    from pip._vendor.packaging.requirements import Requirement
for raw in m.requires("posttrain-aci") or []:
    req = Requirement(raw)
    if req.marker is None or req.marker.evaluate({"extra": "data"}):
        print(str(req).split(";")[0].strip())
PY
)"
    aci_constraints "$ACI_VENV/bin/python" all > "$ACI_HOME/constraints.txt"
    # shellcheck disable=SC2086
    if ! aci_pip install -q -c "$ACI_HOME/constraints.txt" $requirements; then
        aci_log "its requirements need versions the container does not have; pinning only the ML stack" \
                "(other packages may be newer, in $ACI_VENV only)"
        aci_constraints "$ACI_VENV/bin/python" stack > "$ACI_HOME/constraints.txt"
        # shellcheck disable=SC2086
        aci_pip install -q -c "$ACI_HOME/constraints.txt" $requirements \
            || aci_die "cannot install posttrain-aci's requirements without changing the ML stack"
    fi
}

# Model and benchmark from the harness prompt ("We want to train the small LLM `M` to excel at B.").
aci_parse_prompt() {
    "$ACI_PYTHON" - "$1" <<'PY'
import re, sys
m = re.search(r"train the small LLM `([^`]+)` to excel at (.+?)\.\s*$", sys.argv[1], re.M)
print(m.group(1) if m else "")
print(m.group(2).strip() if m else "")
PY
}

aci_setup() {
    [ -n "${ACI_AGENT:-}" ] || aci_die "ACI_AGENT is not set (claude-code, codex or opencode)"
    [ -f evaluate.py ] && [ -f timer.sh ] || aci_die "run me in the task folder (no evaluate.py or timer.sh in $PWD)"
    local parsed model benchmark
    parsed="$(aci_parse_prompt "${PROMPT:-}")"
    model="${ACI_BASE_MODEL:-$(echo "$parsed" | sed -n 1p)}"
    benchmark="${ACI_BENCHMARK:-$(echo "$parsed" | sed -n 2p)}"
    [ -n "$model" ] && [ -n "$benchmark" ] || aci_die "no model and benchmark in the prompt; set ACI_BASE_MODEL and ACI_BENCHMARK"

    mkdir -p "$ACI_HOME"
    aci_versions "$ACI_PYTHON" > "$ACI_HOME/stack-before.txt"
    aci_make_venv
    aci_check_versions "$ACI_HOME/stack-before.txt" "$ACI_VENV/bin/python"
    aci_install_bundle
    aci_check_versions "$ACI_HOME/stack-before.txt" "$ACI_PYTHON"
    aci_check_versions "$ACI_HOME/stack-before.txt" "$ACI_VENV/bin/python"
    aci_log "ML stack unchanged: $(tr '\n' ' ' < "$ACI_HOME/stack-before.txt")"

    mkdir -p "$HOME/.local/bin"
    ln -sf "$ACI_VENV/bin/aci" "$HOME/.local/bin/aci"
    local scope=()
    [ "$ACI_AGENT" = codex ] && scope=(--global)  # codex exec reads ~/.codex/config.toml and ~/.agents/skills
    "$ACI_VENV/bin/aci" install "$ACI_AGENT" --workdir "$PWD" "${scope[@]}" >&2
    if [ -f state/run.json ]; then
        aci_log "run card exists already (state/run.json): keeping it"
    else
        "$ACI_VENV/bin/aci" plan init --profile posttrainbench --base-model "$model" --benchmark "$benchmark" \
            --eval-command "$ACI_EVAL_COMMAND" >&2
    fi
    ACI_PROMPT="${PROMPT:-}

Before anything else, read .aci/SKILL.md and follow it: it is the posttrain-aci skill for exactly this task, and its tools are served by the MCP server \`posttrain-aci\` (the same tools as the \`aci\` command)."
    export ACI_PROMPT
}
