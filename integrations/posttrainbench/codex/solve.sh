#!/bin/bash
# PostTrainBench submission: Codex CLI with posttrain-aci (see ../README.md).
# The harness's agents/codex/solve.sh as it runs today (the CLI update, the prompt on stdin). The agent
# starts even when setup fails; see common.sh.
export ACI_AGENT=codex
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh

aci_update_cli codex
aci_setup "${PROMPT:-}"

aci_run_agent codex --search exec --json -c model_reasoning_summary=detailed --skip-git-repo-check --yolo \
    --model "$AGENT_CONFIG"
