#!/bin/bash
# Write a PostTrainBench agent folder: solve.sh (the agent's solve.sh with common.sh inlined, the
# posttrain-aci wheel and pip's own wheel embedded: the harness copies only this file into a container
# that has no pip), api_keys.json (the API keys the harness may pass to this agent; run_task.sh stops
# without it) and human_readable_trace.py (the harness's main branch formats the agent's trace with
# agents/<name>/human_readable_trace.py when it exists). Or, with `harbor`, a folder for Harbor's
# `--agent posttrain_aci_harbor:<Class>`: the module and, beside it, posttrain_aci_bundle/ (common.sh,
# sandbox.sh and the same two wheels) that it installs into the sandbox.
#
#   bash integrations/posttrainbench/pack.sh claude-code|codex|opencode|harbor OUT_DIR [--wheel FILE] [--pip-wheel FILE]
#
# The harness picks the trace parser by the substring claude, codex, cursor, gemini or opencode in the
# agent folder's name and refuses a name with two; get_prompt.py adds its non-interactive note when the
# name contains `claude`. So OUT_DIR's name must contain the agent's own (claude for claude-code) and
# none of the others.
# Without --wheel the wheel is built from this checkout (`pip wheel`; needs the hatchling backend);
# without --pip-wheel pip's newest wheel is downloaded from PyPI. PYTHON picks the interpreter (python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage="usage: pack.sh claude-code|codex|opencode|harbor OUT_DIR [--wheel FILE] [--pip-wheel FILE]"
agent="${1:-}"
out="${2:-}"
{ [ -f "$here/$agent/solve.sh" ] || [ "$agent" = harbor ]; } && [ -n "$out" ] || { echo "$usage" >&2; exit 2; }
shift 2
if [ "$agent" != harbor ]; then
    own="${agent%-code}"
    name="$(basename "$out")"
    others=""
    for key in claude codex cursor gemini opencode; do
        [ "$key" != "$own" ] && [[ "$name" == *"$key"* ]] && others="$others $key"
    done
    if [[ "$name" != *"$own"* ]] || [ -n "$others" ]; then
        echo "pack.sh: the folder name '$name' must contain '$own' and none of claude, codex, cursor, gemini," \
             "opencode besides (found:${others:- no $own}): the harness picks the trace parser, and adds its" \
             "non-interactive note for claude, by these substrings" >&2
        exit 2
    fi
fi
wheel="" pip_wheel=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheel) wheel="${2:?--wheel needs a file}"; shift 2 ;;
        --pip-wheel) pip_wheel="${2:?--pip-wheel needs a file}"; shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
python="${PYTHON:-python3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -z "$wheel" ]; then
    "$python" -m pip wheel -q --no-deps --no-build-isolation -w "$tmp" "$here/../.." >&2
    wheel="$(ls "$tmp"/posttrain_aci-*.whl)"
fi
if [ -z "$pip_wheel" ]; then
    "$python" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" pip >&2
    pip_wheel="$(ls "$tmp"/pip-*.whl)"
fi
for f in "$wheel" "$pip_wheel"; do
    [ -f "$f" ] || { echo "pack.sh: no such file: $f" >&2; exit 2; }
done

mkdir -p "$out"
if [ "$agent" = harbor ]; then
    bundle="$out/posttrain_aci_bundle"
    rm -rf "$bundle" && mkdir -p "$bundle"
    cp "$here/common.sh" "$here/../harbor/sandbox.sh" "$wheel" "$pip_wheel" "$bundle/"
    cp "$here/../harbor/posttrain_aci_harbor.py" "$out/posttrain_aci_harbor.py"
    echo "wrote $out/posttrain_aci_harbor.py and $bundle ($(du -sk "$bundle" | cut -f1) KB)" >&2
    exit 0
fi
{
    awk -v common="$here/common.sh" '
        /^# >>> common.sh/ { while ((getline line < common) > 0) print line; skip = 1; next }
        /^# <<< common.sh/ { skip = 0; next }
        !skip { print }
    ' "$here/$agent/solve.sh" | sed '/^aci_update_cli /,$d'
    echo "# Packed by integrations/posttrainbench/pack.sh: $(basename "$wheel") and $(basename "$pip_wheel")."
    echo "aci_packed_files() {  # writes the packed wheels into folder \$1"
    for f in "$wheel" "$pip_wheel"; do
        echo "    base64 -d > \"\$1/$(basename "$f")\" << 'WHEEL'"
        base64 -w 76 "$f"
        echo "WHEEL"
    done
    echo "}"
    sed -n '/^aci_update_cli /,$p' "$here/$agent/solve.sh"
} > "$out/solve.sh.tmp"
mv "$out/solve.sh.tmp" "$out/solve.sh"
cp "$here/$agent/api_keys.json" "$out/api_keys.json"
cp "$here/human_readable_trace.py" "$out/human_readable_trace.py"
echo "wrote $out/solve.sh ($(du -k "$out/solve.sh" | cut -f1) KB), $out/api_keys.json and $out/human_readable_trace.py" >&2
