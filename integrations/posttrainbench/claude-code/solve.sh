#!/bin/bash
# PostTrainBench submission: Claude Code with posttrain-aci (see ../README.md).
# The harness's agents/claude/solve.sh as it runs today (its settings, the CLI update, the prompt on stdin,
# --thinking-display summarized); get_prompt.py adds the non-interactive note itself, since the folder's
# name contains `claude` (pack.sh checks that). The agent starts even when setup fails; see common.sh.
export ACI_AGENT=claude-code
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh

export BASH_MAX_TIMEOUT_MS="36000000"
export CLAUDE_CODE_EFFORT_LEVEL="high"
aci_update_cli claude
aci_setup "${PROMPT:-}"

aci_run_agent claude --print --verbose --model "$AGENT_CONFIG" --output-format stream-json \
    --thinking-display summarized --dangerously-skip-permissions
