"""GPU generation throughput: vLLM against transformers, both through `aci.generation` (the code the dev-set
evaluator and the rollout's local policy run), on a randomly initialised Qwen3-1.7B-shaped model, in one run.

* the model: Qwen3-1.7B's shape with random bf16 weights and the embedded tokenizer (no hub access);
* the work: `--prompts` chat prompts of ~200 tokens rendered with the model's template, `--new-tokens`
  greedy new tokens each, handed to each backend in one call (transformers in batches of `--batch-size`,
  vLLM all at once);
* tokens/s = completion tokens generated / wall seconds of the call (model loading excluded; one warm-up
  call first). Random weights rarely emit an end-of-turn token, so both backends generate about the same.

    .venv/bin/python bench/gpu_generate.py [--prompts 256] [--new-tokens 256] [--batch-size 64]
    .venv/bin/python bench/gpu_generate.py --cpu-smoke   # tiny model, transformers only: checks the script

The last line printed is `speedup=X` (vLLM tokens/s over transformers tokens/s; target >= 10).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_train import QWEN3_1_7B, TINY, build, samples  # noqa: E402


def run(backend: str, model: Path, prompts: list[list[int]], new_tokens: int, batch_size: int) -> tuple[float, int]:
    """(tokens/s, completion tokens) of one timed call after a warm-up call, in this process."""
    import torch

    from aci import generation

    gen = generation.load(model, backend=backend, batch_size=batch_size, max_model_len=4096)
    gen.generate(prompts[:min(len(prompts), batch_size)], generation.Sampling(max_new_tokens=8))  # warm-up
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = gen.generate(prompts, generation.Sampling(max_new_tokens=new_tokens))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    tokens = sum(c.completion_tokens for c in out)
    return tokens / seconds, tokens


def run_apart(backend: str, model: Path, prompts: list[list[int]], new_tokens: int, batch_size: int):
    """`run` in a process of its own, so each backend starts with the whole GPU and leaves nothing behind."""
    work = model.parent / f"{backend}.json"
    work.write_text(json.dumps({"prompts": prompts, "new_tokens": new_tokens, "batch_size": batch_size}))
    r = subprocess.run([sys.executable, __file__, "--one", backend, str(model), str(work)], capture_output=True,
                       text=True)
    if r.returncode:
        raise SystemExit(f"{backend} generation failed:\n{r.stdout[-2000:]}{r.stderr[-4000:]}")
    return tuple(json.loads(r.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64, help="transformers: prompts per generate call")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny model on CPU, transformers only")
    args = ap.parse_args()
    import torch

    from aci import generation, templates

    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        print("no CUDA device: bench/gpu_generate.py measures GPU generation and runs only where CUDA is present")
        return 0
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    n, new, batch = (args.prompts, args.new_tokens, args.batch_size) if cuda else (8, 8, 4)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build(model, QWEN3_1_7B if cuda else TINY, cuda, reachable_vocab=True)
        tok = templates.load_tokenizer(model)
        prompts = [generation.encode(tok, generation.render(tok, s["messages"][:1]))
                   for s in samples(n, 10, seed=1)]
        print(f"{n} prompts, mean {sum(map(len, prompts)) / n:.0f} tokens, {new} new tokens each on "
              f"{torch.cuda.get_device_name(0) if cuda else 'CPU'}", flush=True)
        rates = {}
        for backend in ("transformers", "vllm"):
            if backend == "vllm" and not (cuda and generation.vllm_installed()):
                print("vllm: not measured (needs CUDA and the vllm package)")
                continue
            rate, tokens = run_apart(backend, model, prompts, new, batch)
            rates[backend] = rate
            print(f"{backend}: {rate:,.0f} tokens/s ({tokens} tokens)", flush=True)
    print(" ".join(f"tokens_per_s_{k}={v:.0f}" for k, v in rates.items()))
    speedup = rates["vllm"] / rates["transformers"] if "vllm" in rates else float("nan")
    print(f"speedup={speedup:.2f}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        spec = json.loads(Path(sys.argv[4]).read_text())
        print(json.dumps(run(sys.argv[2], Path(sys.argv[3]), spec["prompts"], spec["new_tokens"], spec["batch_size"])))
    else:
        sys.exit(main())
