#!/bin/bash
# posttrain-aci in a Harbor sandbox: what posttrain_aci_harbor.py runs there, with the functions the
# PostTrainBench solve.sh files use (common.sh, beside this script with the two wheels pack.sh put here).
#
#   bash sandbox.sh setup AGENT       in the task's workspace: install the bundle for AGENT (claude-code,
#                                     codex or opencode); prints the prompt's pointer line once it works
#   bash sandbox.sh plan AGENT        the run card (aci plan init), model and benchmark read from $PROMPT,
#                                     the deadline from the task's timer.sh
#   bash sandbox.sh end AGENT HOW     journal how the run ended (HOW), take out what setup installed
#
# Codex's skills go into the workspace here (Harbor points CODEX_HOME elsewhere and writes its own
# config.toml there, into which the module merges our MCP server): ACI_CODEX_SCOPE=project.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
action="${1:-}"
export ACI_AGENT="${2:-}" ACI_CODEX_SCOPE=project
# shellcheck source=../posttrainbench/common.sh
. "$here/common.sh"
case "$action" in
    setup)
        mkdir -p "$ACI_HOME" && rm -rf "$ACI_HOME/dist" && mkdir -p "$ACI_HOME/dist" \
            && cp "$here"/*.whl "$ACI_HOME/dist/" || aci_note "cannot copy the wheels into $ACI_HOME/dist"
        aci_prepare && aci_pointer ;;
    plan)
        aci_plan_init || aci_log "no run card yet: the agent starts it with aci plan init" ;;
    end)
        aci_cleanup "${3:-the agent exited}" ;;
    *)
        echo "usage: sandbox.sh setup|plan|end AGENT [HOW]" >&2
        exit 2 ;;
esac
