"""Rollouts: roll a policy over tasks with tools, record every step, grade, measure, export.

Rejection sampling (keep only reward-1 trajectories of the base model or its own checkpoints) is how
tool-use and agentic data gets made; this package is the machinery behind the `run-trajectory` tool.

* `trace`: the recorded hierarchy Trial > Task > Turn > Step (pydantic models, one JSONL line per task).
* `policies`: what answers a chat request: an OpenAI-compatible endpoint (vLLM, llama.cpp, ...) or a
  local Hugging Face model (hermes `<tool_call>` parsing of its text).
* `envs`: where tool calls go: a Python module (schemas from type hints and docstrings, or explicit)
  or an MCP server started by command (stdio).
* `loop`: the multi-turn loop with limits, bounded concurrency, k trials, incremental writes, resume.
* `metrics`: step marks and the six metrics, each naming its level.
* `export`: successful trajectories as SFT samples, failed ones kept apart.
* `integrity`: the posttrainbench rules for endpoints (loopback) and policies (base model lineage).
* `serve`: start `vllm serve` as a job on loopback and stop it afterwards.

Nothing heavy is imported at module level: transformers and torch load only for the local HF policy.
"""
