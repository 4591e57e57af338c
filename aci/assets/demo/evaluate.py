"""Evaluate a model on the lock-codes benchmark (the `aci demo` toy task), PostTrainBench style.

Same command line as a PostTrainBench task's `evaluate.py`:

    python evaluate.py --model-path final_model [--limit N] [--max-tokens T] [--json-output-file metrics.json]

Loads the model with transformers, renders each test item with `templates/<family>.jinja` (chosen from
the model's `model_type`, not from the tokenizer's own template), generates greedily, and grades by the
rule the prompt states: the last line `ANSWER: <code>` must equal the gold answer. Writes the metrics
JSON (`accuracy`, `n_examples`, `correct`) and one line per sample to `logs/`. `--seed S` scores a
seeded random subset of `--limit` items instead of the first ones, so repeated trials give a range.
"""

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEST = HERE / "data" / "test.jsonl"
FAMILIES = {"qwen2": "qwen", "qwen3": "qwen", "llama": "llama", "gemma3": "gemma", "smollm3": "smollm"}
ANSWER = re.compile(r"^\s*ANSWER:\s*(.+?)\s*$", re.M)


def grade(response: str, gold: str) -> bool:
    found = ANSWER.findall(response)
    return bool(found) and found[-1] == gold


def main() -> int:
    p = argparse.ArgumentParser(description="lock-codes benchmark")
    p.add_argument("--model-path", default="final_model")
    p.add_argument("--limit", type=int, default=None, help="items to score; -1 or none: all (PostTrainBench's meaning)")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-connections", type=int, default=8, help="prompts per batch")
    p.add_argument("--json-output-file", default=None)
    p.add_argument("--templates-dir", default=str(HERE / "templates"))
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    if args.limit is not None and args.limit < -1:
        p.error("--limit must be -1 (all items) or a count >= 0")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    items = [json.loads(line) for line in TEST.read_text().splitlines() if line.strip()]
    if args.limit is not None and args.limit != -1:
        items = random.Random(args.seed).sample(items, min(args.limit, len(items))) if args.seed is not None \
            else items[: args.limit]
    config = json.loads((Path(args.model_path) / "config.json").read_text())
    family = FAMILIES.get(config.get("model_type"), config.get("model_type"))
    template = (Path(args.templates_dir) / f"{family}.jinja").read_text()
    tok = AutoTokenizer.from_pretrained(args.model_path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32)
    model.eval()
    started = time.time()
    batch_size = max(1, args.max_connections * 4)
    results = []
    for i in range(0, len(items), batch_size):
        chunk = items[i: i + batch_size]
        prompts = [tok.apply_chat_template([{"role": "user", "content": it["question"]}], chat_template=template,
                                           tokenize=False, add_generation_prompt=True) for it in chunk]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.max_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        for it, row in zip(chunk, out, strict=True):
            text = tok.decode(row[enc["input_ids"].shape[1]:], skip_special_tokens=True)
            results.append({"id": it["id"], "response": text, "gold": it["answer"], "correct": grade(text, it["answer"])})
    correct = sum(r["correct"] for r in results)
    n = len(results)
    metrics = {"accuracy": correct / n if n else 0.0, "n_examples": n, "correct": correct,
               "seconds": round(time.time() - started, 2)}
    logs = HERE / "logs"
    logs.mkdir(exist_ok=True)
    with open(logs / f"eval-{time.strftime('%Y%m%d-%H%M%S')}-{random.randrange(1 << 16):04x}.jsonl", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in results))
    print(json.dumps(metrics))
    if args.json_output_file:
        Path(args.json_output_file).write_text(json.dumps(metrics, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
