#!/bin/bash
# PostTrainBench submission: OpenCode with posttrain-aci (see ../README.md).
ACI_AGENT=opencode
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh

# The harness's provider settings first: `aci install opencode` adds its MCP server and keeps them.
cat > opencode.json << 'JSON'
{
  "$schema": "https://opencode.ai/config.json",
  "permission": "allow",
  "provider": {
    "anthropic": {"options": {"apiKey": "{env:ANTHROPIC_API_KEY}"}},
    "openai": {"options": {"apiKey": "{env:OPENAI_API_KEY}"}},
    "opencode": {"options": {"apiKey": "{env:OPENCODE_API_KEY}"}}
  }
}
JSON
aci_setup

exec opencode run --model "$AGENT_CONFIG" --format json "$ACI_PROMPT"
