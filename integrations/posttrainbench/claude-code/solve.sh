#!/bin/bash
# PostTrainBench submission: Claude Code with posttrain-aci (see ../README.md).
ACI_AGENT=claude-code
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh
aci_setup

unset GEMINI_API_KEY CODEX_API_KEY
export BASH_MAX_TIMEOUT_MS="36000000"
exec claude --print --verbose --model "$AGENT_CONFIG" --output-format stream-json \
    --dangerously-skip-permissions --mcp-config .mcp.json "$ACI_PROMPT"
