#!/bin/bash
# PostTrainBench submission: OpenCode with posttrain-aci (see ../README.md).
# The harness's agents/opencode/solve.sh as it runs today: its config (permissions; the providers
# anthropic, openai, opencode, zai (GLM through Z.AI's OpenAI-compatible API) and meta), the CLI update,
# the prompt on stdin. The agent starts even when setup fails; see common.sh.
export ACI_AGENT=opencode
# >>> common.sh (pack.sh puts its text here)
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# <<< common.sh

# The harness's settings first: `aci install opencode` adds its MCP server to them and keeps the rest.
cat > opencode.json << 'JSON'
{
  "$schema": "https://opencode.ai/config.json",
  "permission": "allow",
  "provider": {
    "anthropic": {"options": {"apiKey": "{env:ANTHROPIC_API_KEY}"}},
    "openai": {"options": {"apiKey": "{env:OPENAI_API_KEY}"}},
    "opencode": {"options": {"apiKey": "{env:OPENCODE_API_KEY}"}},
    "zai": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Z.AI",
      "options": {"baseURL": "https://api.z.ai/api/paas/v4", "apiKey": "{env:ZAI_API_KEY}"},
      "models": {"glm-5": {"name": "GLM-5"}, "glm-4.7": {"name": "GLM-4.7"}}
    },
    "meta": {"options": {"apiKey": "{env:MODEL_API_KEY}"}}
  }
}
JSON
aci_update_cli opencode
aci_setup "${PROMPT:-}"

aci_run_agent opencode run --model "$AGENT_CONFIG" --format json
