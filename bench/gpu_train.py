"""GPU training throughput: tokens/s and model FLOPs utilisation (MFU) of SFT through `aci train`, against
TRL's defaults, on a randomly initialised Qwen3-1.7B-shaped model (bf16, 4k context), in one run.

Runs only where CUDA is present (elsewhere it says so and exits 0); a few minutes on one H100:

* the model: Qwen3-1.7B's shape (28 layers, hidden 2048, MLP 6144, 16 query / 8 KV heads of 128, vocabulary
  151,936, tied embeddings) with random weights, and the embedded tokenizer (no hub access needed);
* the data: ~1,600 chat samples of ~800 tokens (text from the shipped corpus), max length 4,096;
* `aci train dry-run --measure-steps 3` (finds the micro-batch that fits and measures), then
  `aci train start` with the tool's defaults (packing with per-sample attention, bf16, the fastest
  attention kernel and Liger when installed, the measured micro-batch and gradient checkpointing only if
  memory needs it) vs `SFTTrainer` with TRL's defaults (its batch size, padding, gradient checkpointing),
  the same data and max length;
* tokens/s is the steady rate between the trainer's logs after the first third of the steps (start-up,
  warm-up and the final save excluded); MFU = tokens/s x FLOPs per token / peak bf16 FLOP/s of the GPU,
  with FLOPs per token = 6 x (matmul parameters, lm_head included) + 12 x layers x heads x head_dim x T
  (PaLM's formula; T = the mean document length, since packed documents do not attend to each other).

    .venv/bin/python bench/gpu_train.py [--steps 30] [--peak-tflops 989]
    .venv/bin/python bench/gpu_train.py --cpu-smoke   # the same code path with a tiny model on CPU

The last line printed is `mfu=X` for `aci train`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN3_1_7B = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=1024)
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.4, "H200": 989.4, "GH200": 989.4, "B200": 2250.0, "A100": 312.0,
               "L40S": 362.0, "A10G": 125.0}


def build(out: Path, shape: dict, cuda: bool, reachable_vocab: bool = False) -> None:
    """Tokenizer from the embedded builder, model of the given shape with random bf16 weights.

    `reachable_vocab`: zero the embeddings past the tokenizer's vocabulary, so greedy decoding never picks
    an id the tokenizer cannot decode (the shape, and so the FLOPs, stay Qwen3's)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    from aci.embedded import EOT, build_tokenizer

    tok = build_tokenizer(out, 600)
    eot, pad = tok.convert_tokens_to_ids(EOT), tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(**shape, tie_word_embeddings=True, max_position_embeddings=40960, rope_theta=1e6,
                         eos_token_id=eot, pad_token_id=pad, bos_token_id=None)
    with torch.device("cuda" if cuda else "cpu"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16 if cuda else torch.float32)
    if reachable_vocab:
        with torch.no_grad():
            model.get_input_embeddings().weight[len(tok):] = 0
    model.generation_config = GenerationConfig(eos_token_id=[eot], pad_token_id=pad)
    model.save_pretrained(out, safe_serialization=True)


def samples(n: int, chars: int, seed: int = 0) -> list[dict]:
    text = (ROOT / "aci" / "assets" / "corpus.txt").read_text()
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        a = rnd.randrange(0, len(text) - chars)
        q = rnd.randrange(0, len(text) - 200)
        out.append({"messages": [{"role": "user", "content": f"Task {i}: continue this text. {text[q:q + 200]}"},
                                 {"role": "assistant", "content": text[a:a + chars]}]})
    return out


def flops_per_token(shape: dict, doc_len: float) -> float:
    d, layers, h, kv, hd = (shape[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                "num_key_value_heads", "head_dim"))
    matmul = layers * (2 * d * h * hd + 2 * d * kv * hd + 3 * d * shape["intermediate_size"]) + d * shape["vocab_size"]
    return 6 * matmul + 12 * layers * h * hd * doc_len


def steady_rate(points: list[tuple[float, float]], least: int = 3) -> float:
    """Tokens/s between the log points after the first third (start-up and warm-up excluded), from at
    least `least` points (the CPU smoke run takes 2: its steps can be quicker than the poll below)."""
    points = sorted(set(points))
    if len(points) < least:
        raise SystemExit(f"too few progress points to measure a steady rate: {points}")
    a, b = points[len(points) // 3], points[-1]
    return (b[1] - a[1]) / (b[0] - a[0])


def plain(model: str, data: str, out: str, settings: str) -> None:
    """The baseline: SFTTrainer with TRL's defaults on the same data and max length (and the step count)."""
    from datasets import load_dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    s = json.loads(settings)
    points = Path(out) / "points.jsonl"

    class Points(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "num_tokens" in logs:
                with open(points, "a") as f:
                    f.write(json.dumps([time.monotonic() - self.t0, logs["num_tokens"]]) + "\n")

    args = SFTConfig(output_dir=out, use_cpu=not s["cuda"], max_length=s["max_length"], max_steps=s["steps"],
                     logging_steps=s["logging_steps"], save_strategy="no", report_to="none", disable_tqdm=True,
                     **({} if s["cuda"] else {"per_device_train_batch_size": 2, "bf16": False}))
    ds = load_dataset("json", data_files=data, split="train")
    SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=AutoTokenizer.from_pretrained(model),
               callbacks=[Points()]).train()


def run_plain(work: Path, s: dict) -> list[tuple[float, float]]:
    out = work / "plain"
    out.mkdir()
    r = subprocess.run([sys.executable, __file__, "--plain", str(work / "model"), str(work / "data.jsonl"), str(out),
                        json.dumps(s)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"plain TRL run failed:\n{r.stderr[-3000:]}")
    return [tuple(json.loads(line)) for line in (out / "points.jsonl").read_text().splitlines()]


def run_aci(work: Path, s: dict) -> tuple[list[tuple[float, float]], dict]:
    from aci import jobfiles

    aci = [sys.executable, "-m", "aci.cli"]
    subprocess.run([*aci, "plan", "init", "--base-model", str(work / "model"), "--benchmark", "gpu-bench",
                    "--profile", "default"], cwd=work, check=True, capture_output=True)
    args = [f"--max-length={s['max_length']}", f"--max-steps={s['steps']}", "--save-steps=100000",
            f"--logging-steps={s['logging_steps']}", *s["aci_args"]]
    dry = subprocess.run([*aci, "--json", "train", "dry-run", "--data", "data.jsonl", *args, "--measure-steps=3"],
                         cwd=work, capture_output=True, text=True)
    if dry.returncode:
        raise SystemExit(f"aci train dry-run failed:\n{dry.stdout[-2000:]}{dry.stderr[-3000:]}")
    cfg = json.loads(dry.stdout)["config"]
    print(f"aci: dry-run chose micro-batch {cfg['batch_size']} x {cfg['grad_accum']}, gradient checkpointing "
          f"{cfg['gradient_checkpointing']}", flush=True)
    out = subprocess.run([*aci, "--json", "train", "start", "--data", "data.jsonl", *args], cwd=work,
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"aci train start failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
    start = json.loads(out.stdout)
    folder = work / "state" / "jobs" / start["job"]["id"]
    points = []
    while not (folder / jobfiles.EXIT).exists():
        p = json.loads((folder / jobfiles.PROGRESS).read_text()) if (folder / jobfiles.PROGRESS).exists() else {}
        if p.get("tokens") and p.get("phase") == "training":
            points.append((p["elapsed_s"], p["tokens"]))
        time.sleep(0.05)
    ex = json.loads((folder / jobfiles.EXIT).read_text())
    if ex["status"] != "succeeded":
        raise SystemExit(f"aci job failed: {ex['reason']}\n{(folder / jobfiles.LOG).read_text()[-3000:]}")
    p = json.loads((folder / jobfiles.PROGRESS).read_text())
    print(f"aci: speed {p.get('speed')}", flush=True)
    return points, start["checks"]


def peak(args, cuda: bool) -> tuple[float, str]:
    if args.peak_tflops:
        return args.peak_tflops * 1e12, "given"
    if not cuda:
        return 1e12, "nominal 1 TFLOP/s (CPU smoke run: the MFU figure means nothing)"
    import torch

    name = torch.cuda.get_device_name(0)
    for key, tflops in PEAK_TFLOPS.items():  # longest names first where they overlap ("H100 PCIe")
        if key in name:
            return tflops * 1e12, name
    print(f"unknown GPU {name!r}: assuming H100 peak (pass --peak-tflops)")
    return PEAK_TFLOPS["H100"] * 1e12, name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--peak-tflops", type=float, default=None, help="peak dense bf16 TFLOP/s of one GPU")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny model on CPU: checks the script, not the GPU")
    args = ap.parse_args()
    import torch

    from aci.state import STATE_ENV

    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        print("no CUDA device: bench/gpu_train.py measures GPU training and runs only where CUDA is present")
        return 0
    shape = QWEN3_1_7B if cuda else TINY
    s = {"cuda": cuda, "max_length": 4096 if cuda else 256, "steps": args.steps if cuda else 8,
         "logging_steps": 2 if cuda else 1, "aci_args": [] if cuda else ["--batch-size=2", "--grad-accum=2"]}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                      TOKENIZERS_PARALLELISM="false")
    os.environ.pop(STATE_ENV, None)
    peak_flops, device = peak(args, cuda)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        build(work / "model", shape, cuda)
        (work / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples(1600 if cuda else 32,
                                                                                        2000 if cuda else 300)))
        print(f"model and data ready in {time.monotonic() - t0:.0f} s on {device}", flush=True)
        results = {}
        for name, fn in (("aci", run_aci), ("trl", run_plain)):
            t = time.monotonic()
            got = fn(work, s)
            points, checks = got if name == "aci" else (got, None)
            if checks:
                doc_len = checks["mean_tokens"]
            rate = steady_rate(points, 3 if cuda else 2)
            results[name] = (rate, rate * flops_per_token(shape, doc_len) / peak_flops)
            print(f"{name}: {rate:,.0f} tokens/s, MFU {results[name][1]:.3f} ({time.monotonic() - t:.0f} s)", flush=True)
    print(f"FLOPs/token {flops_per_token(shape, doc_len):.3e} (mean document {doc_len:.0f} tokens), peak "
          f"{peak_flops / 1e12:.0f} TFLOP/s")
    print(f"tokens_per_s_aci={results['aci'][0]:.0f} tokens_per_s_trl={results['trl'][0]:.0f} "
          f"mfu_trl={results['trl'][1]:.3f} speedup={results['aci'][0] / results['trl'][0]:.2f}")
    print(f"mfu={results['aci'][1]:.3f}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--plain"]:
        plain(*sys.argv[2:6])
    else:
        sys.exit(main())
