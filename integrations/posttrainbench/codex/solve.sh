#!/bin/bash
# PostTrainBench submission: Codex CLI with posttrain-aci (see ../README.md).
# The launch line is the harness's agents/codex/solve.sh (main @9082063, new_judge_v2 @d27a95e), which
# also prints the API keys: not done here. The agent starts even when setup fails; see common.sh.
export ACI_AGENT=codex
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh
aci_setup "${PROMPT:-}"

unset ANTHROPIC_API_KEY GEMINI_API_KEY
aci_run_agent codex --search exec --json -c model_reasoning_summary=detailed --skip-git-repo-check --yolo \
    --model "$AGENT_CONFIG" "$ACI_PROMPT"
