"""Model folders as the benchmark loads them, and `build()`, which makes one from any checkpoint.

PostTrainBench serves `final_model/` with vLLM. A training checkpoint is not such a folder: it may be a
LoRA adapter, carry optimizer state, lack the tokenizer or the processor files Gemma needs, and its
`generation_config.json` usually ends generation at `<|endoftext|>` only, so replies run to the token
limit and the answer line is lost. `build()` turns a checkpoint into the folder the benchmark expects.
Promotion and every evaluation of a checkpoint go through it, so what is evaluated is what is shipped.

Only merging a LoRA needs torch (and peft); copying a full checkpoint and writing the tokenizer,
template and generation config is plain file work, so building is fast and cannot change the weights.
A folder built to ship (`shard_bytes` set: promotion) holds no weights file over that size: merges are
saved in shards of it, and copied weights with a larger file are re-sharded byte for byte (`shards`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from aci.errors import ACIError
from aci.evaluation import shards

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
WEIGHTS_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "chat_template.jinja",
)
# Files a multimodal base (Gemma 3) needs beside the tokenizer for vLLM to build its processor.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
TEMPLATE_FILE = "chat_template.jinja"
# End-of-turn markers of the common chat formats, most specific first: ChatML (Qwen, SmolLM), Gemma,
# Llama 3, Phi, Command. A template with none of them ends turns with the tokenizer's eos token.
EOT_MARKERS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|END_OF_TURN_TOKEN|>")


def read_json(path: Path) -> Any:
    """A JSON file's content, None when absent; ACIError naming the file when it is broken."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ACIError(f"{path} is not valid JSON: {e}") from None


def write_json(path: Path, data: Any) -> None:
    """Write strict JSON: Infinity and NaN, which Python's json accepts and writes, are refused (transformers
    and vLLM read these files with strict parsers too)."""
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
    except ValueError as e:
        raise ACIError(f"cannot write {path.name}: {e} (only finite numbers are valid JSON)") from None
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())


def is_adapter(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file()


def safetensors_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith("adapter_model"))


def bin_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("pytorch_model*.bin"))


def missing_shards(folder: Path) -> list[str]:
    """Shards named by the safetensors index that are not in the folder."""
    index = read_json(folder / WEIGHTS_INDEX)
    if not index:
        return []
    names = sorted(set((index.get("weight_map") or {}).values()))
    return [n for n in names if not (folder / n).is_file()]


def weights_bytes(folder: Path) -> int:
    """Bytes of the model weights in `folder` (what a copy or a merge of it writes, give or take the tokenizer)."""
    return sum(p.stat().st_size for p in [*safetensors_files(folder), *bin_files(folder)])


def has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file() or (
        (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file())


def tokenizer_template(folder: Path) -> str | None:
    """The chat template the folder's tokenizer carries (`chat_template.jinja` wins, as in transformers)."""
    jinja = folder / TEMPLATE_FILE
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    cfg = read_json(folder / "tokenizer_config.json") or {}
    tpl = cfg.get("chat_template")
    if isinstance(tpl, list):  # named templates: inference uses "default"
        tpl = next((t.get("template") for t in tpl if isinstance(t, dict) and t.get("name") == "default"), None)
    return tpl if isinstance(tpl, str) and tpl.strip() else None


def eos_token(folder: Path) -> str | None:
    cfg = read_json(folder / "tokenizer_config.json") or {}
    tok = cfg.get("eos_token")
    if isinstance(tok, dict):
        tok = tok.get("content")
    if not tok:
        special = read_json(folder / "special_tokens_map.json") or {}
        tok = special.get("eos_token")
        tok = tok.get("content") if isinstance(tok, dict) else tok
    return tok if isinstance(tok, str) and tok else None


def token_id(folder: Path, token: str) -> int | None:
    """The id of `token` in the folder's tokenizer, without loading transformers when tokenizer.json exists."""
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_file(str(folder / "tokenizer.json")).token_to_id(token)
        except Exception as e:  # a corrupt tokenizer.json
            raise ACIError(f"{folder / 'tokenizer.json'} cannot be read: {e}") from None
    cfg = read_json(folder / "tokenizer_config.json") or {}
    for tid, spec in (cfg.get("added_tokens_decoder") or {}).items():
        if isinstance(spec, dict) and spec.get("content") == token:
            return int(tid)
    added = read_json(folder / "added_tokens.json") or {}
    if token in added:
        return int(added[token])
    if not has_tokenizer(folder):
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tid = tok.convert_tokens_to_ids(token)
    return tid if isinstance(tid, int) and tid != tok.unk_token_id else None


def end_of_turn(folder: Path, template: str | None) -> tuple[str, int]:
    """The token that closes an assistant turn under `template` (default: the folder's own), and its id."""
    text = template or tokenizer_template(folder) or ""
    candidates = [m for m in EOT_MARKERS if m in text]
    eos = eos_token(folder)
    if eos and eos not in candidates:
        candidates.append(eos)
    for tok in candidates:
        tid = token_id(folder, tok)
        if tid is not None:
            return tok, tid
    raise ACIError(
        f"cannot find the end-of-turn token for {folder}: the chat template names none of "
        f"{', '.join(EOT_MARKERS)} and the tokenizer has no eos token in its vocabulary; "
        f"set the run card's template (aci plan update --template templates/<model>.jinja)",
        rule="end-of-turn",
    )


def eos_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def local_dir(name_or_path: str, workdir: Path) -> Path | None:
    """A model's local folder: a path as given (relative to `workdir`), else its snapshot in the HF cache."""
    p = Path(name_or_path).expanduser()
    p = p if p.is_absolute() else workdir / p
    if p.is_dir():
        return p.resolve()
    if name_or_path.count("/") != 1 or name_or_path.startswith((".", "/")):
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception:  # not in the cache (or no hub library): the caller says what is missing
        return None


def _copy(src: Path, dst: Path, link: bool) -> None:
    """Copy a file (hard link when `link` and possible) and flush it to disk."""
    if link:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copyfile(src, dst)  # kernel-side copy (sendfile / copy_file_range) where available
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Flush every file and the folder entry itself, so a crash cannot leave a half-written file."""
    for p in folder.iterdir():
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _merge_lora(adapter: Path, onto: Path, out: Path, shard_bytes: int | None) -> None:
    from aci.evaluation import isolated

    isolated.run(merge_lora_here, adapter=str(adapter), onto=str(onto), out=str(out), shard_bytes=shard_bytes)


def merge_lora_here(adapter: str, onto: str, out: str, shard_bytes: int | None = None) -> dict:
    """Merge in this process (`_merge_lora` runs it in a child through `aci.evaluation.isolated`)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model = AutoModelForCausalLM.from_pretrained(onto, dtype="auto").to(device)
        merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except Exception as e:
        raise ACIError(f"merging the LoRA adapter {adapter} onto {onto} failed: {type(e).__name__}: {e}") from None
    merged.save_pretrained(out, **shards.save_limit(shard_bytes))  # safetensors by default in every supported transformers
    for stray in ("generation_config.json", *TOKENIZER_FILES):  # rewritten by build() from their sources
        (Path(out) / stray).unlink(missing_ok=True)
    return {}


def _resave_bin(source: Path, out: Path, shard_bytes: int | None) -> None:
    """A checkpoint with only pytorch_model*.bin weights, saved again as safetensors (in a child process)."""
    from aci.evaluation import isolated

    isolated.run(resave_here, source=str(source), out=str(out), shard_bytes=shard_bytes)


def resave_here(source: str, out: str, shard_bytes: int | None = None) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype="auto")
    model.save_pretrained(out, **shards.save_limit(shard_bytes))
    (Path(out) / GENERATION_CONFIG).unlink(missing_ok=True)
    return {}


def build(source: Path, out: Path, *, base_dir: Path | None, merge_onto: Path | None = None,
          template: str | None = None, set_template: bool = False, link: bool = False,
          sampling: dict | None = None, shard_bytes: int | None = None) -> dict:
    """Write the servable folder for checkpoint `source` into the empty folder `out`.

    `base_dir` is the base model's local folder (tokenizer and processor files are taken from it when
    the checkpoint lacks them); `merge_onto` is the full model a LoRA `source` is merged onto;
    `template` is the chat template text the evaluation renders: it names the end-of-turn token, and it
    becomes the tokenizer's template only where the checkpoint has none of its own (its tokenizer comes
    from elsewhere, or carries no template) or `set_template` asks for it, so a checkpoint's own
    tokenizer and template files reach final_model unchanged.
    `link` hard-links unchanged files instead of copying (for throw-away evaluation folders).
    `sampling` replaces the generation config's sampling keys (see `aci.sampling`).
    `shard_bytes` caps each weights file (see the module docstring); None keeps the checkpoint's files.
    Returns what was written: end-of-turn token and id, where each part came from, and `written`: every
    file of `out` with where it came from.
    """
    out.mkdir(parents=True, exist_ok=True)
    origin = _weights(source, out, merge_onto, link, shard_bytes)
    sources = [d for d in (source, merge_onto, base_dir) if d is not None]
    origin |= _tokenizer(sources, out, template, set_template, link, base_dir=base_dir)
    eot, eot_id = end_of_turn(out, template)
    origin |= _generation_config(sources, out, eot_id, sampling)
    fsync_tree(out)
    return {"eot": eot, "eot_id": eot_id, "origin": origin, "written": _written(out, origin)}


def _weights(source: Path, out: Path, merge_onto: Path | None, link: bool, shard_bytes: int | None) -> dict[str, str]:
    """The weights and `config.json` in `out`: a LoRA merged onto `merge_onto`, safetensors copied (or
    linked; re-sharded where a file is over `shard_bytes`), pytorch .bin files saved as safetensors.
    Returns where the weights came from."""
    if is_adapter(source):
        if merge_onto is None:
            raise ACIError(f"{source} is a LoRA adapter and no full model to merge it onto is known")
        _merge_lora(source, merge_onto, out, shard_bytes)
        return {"weights": f"LoRA {source} merged onto {merge_onto}"}
    files = safetensors_files(source)
    if files:
        gone = missing_shards(source)
        if gone:
            raise ACIError(f"{source} is incomplete: shards {', '.join(gone[:3])} named by {WEIGHTS_INDEX} are missing")
        if not (source / CONFIG).is_file():
            raise ACIError(f"{source} has weights but no {CONFIG}")
        weights = str(source)
        if shard_bytes and any(p.stat().st_size > shard_bytes for p in files):
            write_json(out / WEIGHTS_INDEX, shards.reshard(files, out, shard_bytes))
            weights += f" (re-sharded: at most {shard_bytes} bytes of weights a file)"
        else:
            for p in files:
                _copy(p, out / p.name, link)
            if (source / WEIGHTS_INDEX).is_file():
                _copy(source / WEIGHTS_INDEX, out / WEIGHTS_INDEX, link)
        _copy(source / CONFIG, out / CONFIG, link)
        return {"weights": weights}
    if bin_files(source):
        _resave_bin(source, out, shard_bytes)
        return {"weights": f"{source} (pytorch .bin saved as safetensors)"}
    raise ACIError(f"{source} holds no model weights (no *.safetensors, pytorch_model*.bin or adapter_config.json)")


def _tokenizer(sources: list[Path], out: Path, template: str | None, set_template: bool, link: bool, *,
               base_dir: Path | None) -> dict[str, str]:
    """The tokenizer and processor files in `out`, each from the first of `sources` that has them, and
    `template` as the tokenizer's chat template where the checkpoint (`sources[0]`) brings none of its
    own or `set_template` asks. Returns where each came from."""
    tok_from = next((d for d in sources if has_tokenizer(d)), None)
    if tok_from is None:
        raise ACIError(f"no tokenizer found in {sources[0]}" + (f" or {base_dir}" if base_dir else "")
                       + "; the checkpoint and the base model both lack tokenizer files")
    for name in TOKENIZER_FILES:
        if (tok_from / name).is_file():
            _copy(tok_from / name, out / name, link)
    origin = {"tokenizer": str(tok_from)}
    source = sources[0]
    own = tokenizer_template(source) if tok_from == source else None
    if template and (set_template or own is None):
        _set_template(out, template)
        origin["template"] = "run card template"
    elif own is not None:
        origin["template"] = f"{source}'s own" + ("" if not template or own == template else
                                                   " (differs from the run card template)")
    proc_from = next((d for d in sources if any((d / n).is_file() for n in PROCESSOR_FILES)), None)
    if proc_from is not None:
        for name in PROCESSOR_FILES:
            if (proc_from / name).is_file():
                _copy(proc_from / name, out / name, link)
        origin["processor"] = str(proc_from)
    return origin


def _generation_config(sources: list[Path], out: Path, eot_id: int, sampling: dict | None) -> dict[str, str]:
    """`generation_config.json` in `out`, from the first of `sources` that has one (else new): the end of
    turn first among the eos ids, the pad id from `config.json` when it names none, and `sampling` in
    place of its sampling keys. Returns where it came from (and the sampling's name)."""
    gen_from = next((d for d in sources if (d / GENERATION_CONFIG).is_file()), None)
    gen = dict(read_json(gen_from / GENERATION_CONFIG) or {}) if gen_from else {}
    config = read_json(out / CONFIG) or {}
    eos = eos_ids(gen.get("eos_token_id", config.get("eos_token_id")))
    gen["eos_token_id"] = [eot_id, *[i for i in eos if i != eot_id]]
    if "pad_token_id" not in gen and config.get("pad_token_id") is not None:
        gen["pad_token_id"] = config["pad_token_id"]
    origin = {}
    if sampling is not None:
        from aci import sampling as sampling_mod

        gen = sampling_mod.apply(gen, sampling)
        origin["sampling"] = sampling_mod.name(sampling)
    write_json(out / GENERATION_CONFIG, gen)
    origin["generation_config"] = str(gen_from) if gen_from else "new"
    return origin


def _written(out: Path, origin: dict[str, str]) -> dict[str, str]:
    """Each file of `out` and where it came from, in words (what promotion lists)."""
    written = {TEMPLATE_FILE: origin.get("template", origin["tokenizer"]), GENERATION_CONFIG:
               f"written: end-of-turn id first in eos_token_id, from {origin['generation_config']}"
               + (f", sampling {origin['sampling']}" if "sampling" in origin else "")}
    if origin.get("template") == "run card template":
        written["tokenizer_config.json"] = f"from {origin['tokenizer']}, chat_template set to the run card template"
    kinds = [(TOKENIZER_FILES, "tokenizer"), (PROCESSOR_FILES, "processor")]
    out_files = {}
    for p in sorted(out.iterdir()):
        if not p.is_file():
            continue
        kind = next((k for names, k in kinds if p.name in names), "weights")
        out_files[p.name] = written.get(p.name) or f"from {origin.get(kind, origin['weights'])}"
    return out_files


def _set_template(out: Path, template: str) -> None:
    """Make `template` the tokenizer's chat template in both places transformers versions read."""
    (out / TEMPLATE_FILE).unlink(missing_ok=True)
    with open(out / TEMPLATE_FILE, "w", encoding="utf-8") as f:
        f.write(template)
    cfg_path = out / "tokenizer_config.json"
    cfg = read_json(cfg_path) or {}
    cfg_path.unlink(missing_ok=True)  # may be a hard link to the checkpoint's file
    cfg["chat_template"] = template
    write_json(cfg_path, cfg)

