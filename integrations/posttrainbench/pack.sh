#!/bin/bash
# Write one self-contained solve.sh for the PostTrainBench harness, which copies only
# agents/<name>/solve.sh into the container: the agent's solve.sh with common.sh inlined and the
# posttrain-aci wheel embedded (so the container installs exactly this version, without PyPI).
#
#   bash integrations/posttrainbench/pack.sh claude-code|codex|opencode [--wheel FILE] > solve.sh
#
# Without --wheel the wheel is built from this checkout (`pip wheel`; needs the hatchling backend).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
agent="${1:-}"
[ -f "$here/$agent/solve.sh" ] || { echo "usage: pack.sh claude-code|codex|opencode [--wheel FILE]" >&2; exit 2; }
wheel=""
if [ "${2:-}" = "--wheel" ]; then
    wheel="${3:?--wheel needs a file}"
else
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
    python -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$here/../.." >&2
    wheel="$(ls "$out"/*.whl)"
fi
name="$(basename "$wheel")"

awk -v common="$here/common.sh" -v wheel="$wheel" -v name="$name" '
    /^# >>> common.sh/ {
        print "# posttrain-aci: common.sh inlined and " name " embedded by integrations/posttrainbench/pack.sh"
        print "aci_packed_wheel() {  # writes the embedded wheel into folder $1 and prints its path"
        print "    base64 -d > \"$1/" name "\" <<'\''WHEEL'\''"
        cmd = "base64 -w 76 \"" wheel "\""
        while ((cmd | getline line) > 0) print line
        close(cmd)
        print "WHEEL"
        print "    echo \"$1/" name "\""
        print "}"
        while ((getline line < common) > 0) print line
        skip = 1; next
    }
    /^# <<< common.sh/ { skip = 0; next }
    !skip { print }
' "$here/$agent/solve.sh"
