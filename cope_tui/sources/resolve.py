"""What `--model` names, tried in order, with one error listing what was tried.

1. a catalog model (id or name, or the Hub repo id a catalog entry records);
2. a path to a Hugging Face config.json (or a folder holding one);
3. a path to a .gguf file (any shard of a split GGUF), or a folder holding one GGUF model;
4. a Hugging Face repo id `org/name`: its config.json through the Hub client, or, with
   `gguf_file`, that GGUF file's header read remotely.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cope_tui.sources.gguf_model import SPLIT_RE, model_from_gguf
from cope_tui.sources.hub_model import model_from_hub_config, model_from_hub_gguf
from engine.core.errors import CopeInputError
from engine.core.files import open_regular
from engine.core.input_limits import check_model_shape
from engine.core.names import did_you_mean
from engine.core.user_paths import NAME_MAX, input_kind, user_path
from engine.models.catalog import catalog, get_model
from engine.models.hf_config import model_from_hf_config
from engine.models.model import ModelSpec

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_repo_id(text: str) -> bool:
    return bool(REPO_ID_RE.match(text)) and ".." not in text and not text.endswith((".json", ".gguf"))


def resolve_model(arg: str, *, gguf_file: str | None = None) -> ModelSpec:
    model = _resolve(arg, gguf_file)
    # Every source's shape within what real models have: it sizes the replay's arrays.
    check_model_shape(model.n_blocks, model.n_moe_layers, model.n_routed_experts, arg.strip(), model.top_k)
    return model


def _resolve(arg: str, gguf_file: str | None) -> ModelSpec:
    text = arg.strip()
    if gguf_file is not None:
        if not looks_like_repo_id(text):
            raise CopeInputError(f"--gguf-file {gguf_file} needs --model to be a Hugging Face repo id "
                                 f"(org/name), got {arg!r}; for a local file give its path to --model")
        return model_from_hub_gguf(text, gguf_file)

    try:
        return get_model(text)
    except CopeInputError:
        pass
    for model in catalog().values():
        if model.hf_repo and model.hf_repo.lower() == text.lower():
            return model

    path, kind = _local(text, arg)
    if kind == "folder":
        config = path / "config.json"
        if input_kind(config, what="config.json", flag="--model") == "file":
            return model_from_hf_config(str(config))
        ggufs = _gguf_models_in(path)
        if len(ggufs) == 1:
            return _from_gguf(ggufs[0])
        if ggufs:
            raise CopeInputError(f"folder holds {len(ggufs)} GGUF models ({', '.join(p.name for p in ggufs)}); "
                                 "give the file", path=arg)
        raise CopeInputError("folder holds no config.json and no .gguf file", path=arg)
    if kind == "file":
        if _is_gguf(path) or path.suffix.lower() == ".gguf":
            return _from_gguf(path)  # a .gguf that is not one: says what is wrong with it
        return model_from_hf_config(str(path))
    if path.suffix.lower() in (".json", ".gguf"):
        raise CopeInputError("file not found", path=arg)

    if looks_like_repo_id(text):
        return model_from_hub_config(text)
    raise CopeInputError(
        f"unknown model {arg!r}{did_you_mean(arg, catalog())}: not a catalog model (`cope models` lists them), "
        "not an existing config.json or .gguf path, and not a Hugging Face repo id (org/name)"
    )


def _local(text: str, arg: str) -> tuple[Path, str | None]:
    """The path `text` names and what is there ("file", "folder" or None): a FIFO or a
    device is refused here, unopened. A bare name too long for any file is not a path
    (the model-name checks answer for it); a `~user` that is no user is refused."""
    if "/" not in text and "\\" not in text and not text.startswith("~") and len(os.fsencode(text)) > NAME_MAX:
        return Path(""), None
    path = user_path(text, flag="--model")
    return path, input_kind(path, what="config.json or .gguf file", flag="--model")


def _is_gguf(path: Path) -> bool:
    try:
        with open_regular(path) as f:
            return f.read(4) == b"GGUF"
    except (OSError, CopeInputError):
        return False


def _from_gguf(path: Path) -> ModelSpec:
    split = SPLIT_RE.match(path.name)
    if split and not 1 <= int(split["index"]) <= int(split["count"]):
        raise CopeInputError(f"a split GGUF is named NAME-0000i-of-0000n.gguf with 1 <= i <= n; this name says "
                             f"shard {int(split['index'])} of {int(split['count'])}", path=str(path))
    return model_from_gguf(path)


def _gguf_models_in(folder: Path) -> list[Path]:
    """One path per GGUF model in a folder (a split set counts once, by its first shard)."""
    models = []
    for p in sorted(folder.glob("*.gguf")):
        m = SPLIT_RE.match(p.name)
        if m and int(m["index"]) != 1:
            continue
        if p.name.lower().startswith("mmproj"):
            continue  # a multimodal projector beside the language model
        models.append(p)
    return models
