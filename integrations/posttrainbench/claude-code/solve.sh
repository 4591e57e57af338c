#!/bin/bash
# PostTrainBench submission: Claude Code with posttrain-aci (see ../README.md).
# The launch line is the harness's agents/claude/solve.sh (new_judge_v2 @d27a95e; main @9082063 lacks
# the effort level). The agent starts even when setup fails; see common.sh.
export ACI_AGENT=claude-code
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh

# The harness adds a non-interactive note to the prompt only for the agent folder named `claude`.
prompt="${PROMPT:-}"
case "$prompt" in
    *non-interactive*) ;;
    *) prompt="$prompt

You are running non-interactively: make sure every process you start has finished before you write your last message." ;;
esac
aci_setup "$prompt"

unset GEMINI_API_KEY CODEX_API_KEY
export BASH_MAX_TIMEOUT_MS="36000000"
export CLAUDE_CODE_EFFORT_LEVEL="high"
aci_run_agent claude --print --verbose --model "$AGENT_CONFIG" --output-format stream-json \
    --dangerously-skip-permissions "$ACI_PROMPT"
