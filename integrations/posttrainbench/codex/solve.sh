#!/bin/bash
# PostTrainBench submission: Codex CLI with posttrain-aci (see ../README.md).
ACI_AGENT=codex
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh
aci_setup

unset ANTHROPIC_API_KEY GEMINI_API_KEY
exec codex --search exec --json -c model_reasoning_summary=detailed --skip-git-repo-check --yolo \
    --model "$AGENT_CONFIG" "$ACI_PROMPT"
