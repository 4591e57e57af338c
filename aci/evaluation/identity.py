"""Which model a folder is: its content hash, its architecture, and where it came from (rule `base-model-only`).

Registering a folder with a parent makes it evaluable, trainable, promotable and a permitted rollout
policy, so under the `posttrainbench` profile a registration that claims descent from the base model
must show it (`provenance`):

* evidence, at least one of: the folder lies in the output folder of a training job of this run (the
  job's parent then is the parent); its `adapter_config.json` names the base model (or a registered
  checkpoint derived from it) as `base_model_name_or_path`; it holds the `trainer_state.json` a
  Hugging Face / TRL trainer writes (`Trainer.save_state()`, every `checkpoint-N`), so a training run
  produced it, from the parent the caller names;
* no name pointing at another model: `config.json` `_name_or_path`, `adapter_config.json`
  `base_model_name_or_path`, a model card's `base_model:`, the folder's own name or a hub-cache
  `models--Org--Name` folder above it. A name points elsewhere when it is a hub id or path that is not
  the base model or a registered checkpoint, or when it names the base's family with another size or
  variant (`Qwen3-1.7B` or `...-Instruct` for the base `Qwen3-1.7B-Base`, `gemma-3-4b-it` for
  `gemma-3-4b-pt`);
* the architecture of the parent (`same_architecture`): layers, hidden and intermediate sizes, attention
  and key-value heads, vocabulary and model type, read from the text model's config (`text_config` when
  nested, as in Gemma 3; a text-only checkpoint of a multimodal base compares with the base's text part).

None of this can tell a deliberate forgery (a `trainer_state.json` copied into a downloaded instruct
model) from a real run; it catches the mistake and the shortcut, and the judges read the trace.

Every registered folder is pinned by `content_hash` at registration; evaluation, training and promotion
call `verify` and refuse a folder whose hash changed. The hash covers every file's relative name and
size, whole files up to 1 MiB (configs, tokenizer, adapter settings), and of each larger file (weights)
its safetensors header plus 64 blocks of 64 KiB spread evenly over it. Why not a full sha256: it reads
the whole checkpoint at every evaluation, training start and promotion; `bench/content_hash.py` measured
sha256 at 1.3 GB/s on this project's machine (1.64 s for 2.2 GB, so ~6 s for Qwen3-4B's 8 GB at every
check), while this hash reads ~4 MiB per weight file (10 ms for the same 2.2 GB). Any replacement of the weights by another
model's or another training step's changes essentially every block, so it is caught; what it misses is
an edit confined to unsampled bytes, which no training run or tool produces. File times are left out
on purpose: copying or touching a folder does not change what it is.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path

from aci import jobfiles, records
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import folder

WHOLE_FILE_BYTES = 1 << 20
BLOCKS = 64
BLOCK_BYTES = 64 << 10
HEADER_MAX = 100 << 20  # a safetensors header is JSON; larger means the file is not safetensors

# The fields that identify a checkpoint's family and size (in the text model's config).
ARCHITECTURE_KEYS = ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                     "num_key_value_heads", "vocab_size")
TRAINER_STATE = "trainer_state.json"
_INSTRUCT = {"instruct", "chat", "it", "rlhf"}
_VARIANTS = _INSTRUCT | {"base", "pt", "hf"}
_SIZE = re.compile(r"^\d+(\.\d+)?[bm]$")
_HUB_CACHE = re.compile(r"^models--([^/]+?)--([^/]+)$")


# -- content hash ------------------------------------------------------------------------------------
def _file_digest(p: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        if size <= WHOLE_FILE_BYTES:
            h.update(f.read())
            return h.hexdigest()
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        h.update(head)
        if 0 < n <= min(HEADER_MAX, size - 8):
            h.update(f.read(n))
        step = (size - BLOCK_BYTES) // (BLOCKS - 1)
        for i in range(BLOCKS):
            f.seek(i * step)
            h.update(f.read(BLOCK_BYTES))
    return h.hexdigest()


def pin(root: Path) -> dict:
    """`content_hash` of the folder (see the module docstring) and `files`, each file's size and digest,
    kept with it so a refusal can name what changed."""
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            size = p.stat().st_size
            files[p.relative_to(root).as_posix()] = f"{size}:{_file_digest(p, size)}"
    total = hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in files.items()).encode()).hexdigest()
    return {"content_hash": total, "files": files}


def verify(ctx: Context, entry: dict, root: Path) -> None:
    """Refuse a registered folder whose content changed since registration (rule `base-model-only`).

    A LoRA checkpoint's `merged/` copy may be deleted (to save disk: the adapter is then merged again
    when needed); changed, it is refused like any other file.
    """
    recorded = entry.get("content_hash")
    if not recorded:
        return  # registered before folders were pinned
    if not root.is_dir():
        raise ACIError(f"checkpoint {entry['checkpoint']!r}: its folder {root} is gone (deleted, or removed by the "
                       f"trainer's checkpoint limit); evaluate, train or promote another checkpoint")
    now = pin(root)
    if now["content_hash"] == recorded:
        return
    before, after = dict(entry.get("files") or {}), now["files"]
    if not (root / "merged").exists():
        before = {k: v for k, v in before.items() if not k.startswith("merged/")}
    diff = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
    if entry.get("files") and not diff:
        return
    raise ctx.rules.refuse(
        "base-model-only", f"checkpoint {entry['checkpoint']!r} changed since it was registered ("
                           f"{', '.join(diff[:4]) or 'its files'} differ{'s' if len(diff) == 1 else ''}): {root} is "
                           f"no longer the model that was registered, evaluated and traced to the base model; save "
                           f"new weights to a new folder and register that")


# -- architecture ----------------------------------------------------------------------------------
def architecture(config: dict) -> dict:
    """The identifying fields of a model config, from its text model (`text_config` when nested)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    out = {k: text[k] for k in ARCHITECTURE_KEYS if k in text}
    if "model_type" not in out and "model_type" in config:
        out["model_type"] = config["model_type"]
    return out


def architecture_diff(mine: dict, theirs: dict) -> list[str]:
    """`key a vs b` for every identifying field both configs state and that differs: the text models'
    fields, and the top-level ones too when both configs nest a text_config (a text-only checkpoint of a
    multimodal base legitimately differs at the top, e.g. model_type gemma3_text vs gemma3)."""
    pairs = [("", architecture(mine), architecture(theirs))]
    if all(isinstance(c.get("text_config"), dict) for c in (mine, theirs)):
        pairs.append(("top-level ", {k: mine[k] for k in ARCHITECTURE_KEYS if k in mine},
                      {k: theirs[k] for k in ARCHITECTURE_KEYS if k in theirs}))
    return [f"{where}{k} {a[k]} vs {b[k]}" for where, a, b in pairs for k in ARCHITECTURE_KEYS
            if k in a and k in b and a[k] != b[k]]


def same_architecture(ctx: Context, ck_id: str, config_dir: Path, reference: Path | None, what: str) -> None:
    """Refuse `config_dir` when its architecture differs from the model folder `reference`."""
    if reference is None or not (config_dir / folder.CONFIG).is_file() or not (reference / folder.CONFIG).is_file():
        return
    diff = architecture_diff(folder.read_json(config_dir / folder.CONFIG) or {},
                             folder.read_json(reference / folder.CONFIG) or {})
    if diff:
        raise ctx.rules.refuse("base-model-only", f"{ck_id} does not have the architecture of {what} ({'; '.join(diff)}; "
                                                  f"a resized vocabulary counts: keep the base model's)")


# -- names -----------------------------------------------------------------------------------------
def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[-_./\s]+", name.lower()) if t]


def other_model_name(name: str, base: str) -> bool:
    """Whether `name` names the base model's family with another size or variant (see the module docstring)."""
    mine, theirs = _tokens(Path(name).name), _tokens(Path(base).name)
    if not mine or not theirs or mine[0] != theirs[0]:
        return False
    size = next((t for t in mine if _SIZE.match(t)), None)
    base_size = next((t for t in theirs if _SIZE.match(t)), None)
    if size and base_size and size != base_size:
        return True
    if set(mine) & _INSTRUCT - set(theirs):
        return True
    stem, base_stem = [t for t in mine if t not in _VARIANTS], [t for t in theirs if t not in _VARIANTS]
    return stem == base_stem and set(mine) & _VARIANTS != set(theirs) & _VARIANTS


def _declared_names(path: Path) -> list[tuple[str, str]]:
    """(where, name) for every model name the folder states about its origin."""
    out = []
    cfg = folder.read_json(path / folder.CONFIG) or {}
    if isinstance(cfg.get("_name_or_path"), str) and cfg["_name_or_path"]:
        out.append(("config.json _name_or_path", cfg["_name_or_path"]))
    adapter = folder.read_json(path / "adapter_config.json") or {}
    if isinstance(adapter.get("base_model_name_or_path"), str) and adapter["base_model_name_or_path"]:
        out.append(("adapter_config.json base_model_name_or_path", adapter["base_model_name_or_path"]))
    card = path / "README.md"
    if card.is_file():
        m = re.search(r"^base_model:\s*['\"]?([^'\"\n]+)", card.read_text(encoding="utf-8", errors="replace")[:4000],
                      re.M)
        if m and m.group(1).strip() not in ("", "null", "None"):
            out.append(("README.md base_model", m.group(1).strip()))
    return out


def _folder_names(path: Path) -> list[str]:
    """The folder's own name and any hub-cache `models--Org--Name` above it (as `Org/Name`)."""
    names = [path.name]
    for part in path.parts:
        m = _HUB_CACHE.match(part)
        if m:
            names.append(f"{m.group(1)}/{m.group(2)}")
    return names


def _known_model(ctx: Context, name: str, derived: dict[str, Path]) -> str | None:
    """The checkpoint id `name` refers to: `base`, or a registered checkpoint derived from it; else None."""
    card = ctx.require_card()
    base_dir = folder.local_dir(card.base_model, ctx.workdir)
    if Path(name.strip().rstrip("/")).name.lower() == Path(card.base_model.rstrip("/")).name.lower():
        return "base"  # the base as a hub id, or its folder under another path
    p = Path(name).expanduser()
    p = p if p.is_absolute() else ctx.workdir / p
    if p.exists():
        p = p.resolve()
        if base_dir is not None and p == base_dir:
            return "base"
        for cid, where in derived.items():
            if p == where or where in p.parents:
                return cid
    return None


# -- provenance ------------------------------------------------------------------------------------
def _train_job_of(ctx: Context, path: Path) -> tuple[str, str] | None:
    """(job id, its parent) when `path` lies in the output folder of a training job of this run."""
    jobs_dir = ctx.state.root / records.JOBS
    for cfg_path in sorted(jobs_dir.glob(f"*/{jobfiles.CONFIG}")) if jobs_dir.is_dir() else []:
        try:
            cfg = json.loads(cfg_path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        out = cfg.get("output_dir")
        if out and cfg.get("parent") and (path == Path(out).resolve() or Path(out).resolve() in path.parents):
            return cfg_path.parent.name, cfg["parent"]
    return None


def provenance(ctx: Context, path: Path, parent: str | None, derived: dict[str, Path]) -> tuple[str | None, str]:
    """The parent `path` descends from and the evidence for it, or the `base-model-only` refusal.

    `parent` is what the caller declared (None: infer it); `derived` maps the ids of registered
    checkpoints derived from the base model to their folders.
    """
    base = ctx.require_card().base_model
    for where, name in _declared_names(path):
        if _known_model(ctx, name, derived) is None:
            raise ctx.rules.refuse("base-model-only", f"{path.name}'s {where} is {name!r}, which is neither the run "
                                                      f"card's base model {base!r} nor a registered checkpoint "
                                                      f"derived from it")
    for name in _folder_names(path):
        if other_model_name(name, base):
            raise ctx.rules.refuse("base-model-only", f"the folder name {name!r} names another model than the run "
                                                      f"card's base {base!r} (another size or variant); if it is "
                                                      f"your own training output, give it a name of its own")
    job = _train_job_of(ctx, path)
    if job is not None:
        if parent is not None and parent != job[1]:
            raise ACIError(f"{path} was written by training job {job[0]}, which trained from {job[1]!r}, not {parent!r}")
        return job[1], f"written by training job {job[0]}"
    adapter = folder.read_json(path / "adapter_config.json") or {}
    if adapter.get("base_model_name_or_path"):
        found = _known_model(ctx, adapter["base_model_name_or_path"], derived)
        if parent is not None and found != parent:
            raise ctx.rules.refuse("base-model-only", f"{path.name}'s adapter_config.json says it was trained on "
                                                      f"{adapter['base_model_name_or_path']!r} ({found}), not {parent!r}")
        return found, "adapter_config.json names its base model"
    if parent is not None and (path / TRAINER_STATE).is_file():
        return parent, f"{TRAINER_STATE} from the training run that wrote it"
    if parent is None:
        return None, "no parent declared"
    raise ctx.rules.refuse(
        "base-model-only", f"{path} shows no sign of being trained from {parent!r}: it is not in a training job's "
                           f"output folder, has no adapter_config.json naming its base and no {TRAINER_STATE}. Train "
                           f"with aci train, or keep what your trainer writes (Trainer.save_state() writes "
                           f"{TRAINER_STATE}; a LoRA adapter's adapter_config.json names its base) in the folder")
