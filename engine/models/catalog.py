"""The model catalog shipped in assets/models.json, and the one door to a ModelSpec.

`load_model` takes what the user typed: a catalog id or name, a Hub repo id of a catalog
model, or the path to a Hugging Face `config.json` (or to the folder holding one).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.core.names import did_you_mean
from engine.models.hf_config import model_from_hf_config
from engine.models.model import ModelSpec, model_from_dict
from engine.models.quant import quantizations

CATALOG_FILE = "assets/models.json"
SCHEMA_VERSION = 1


@cache
def catalog() -> dict[str, ModelSpec]:
    """Catalog models by id, in file order; the file is validated here, once."""
    try:
        data = load_asset_json("models.json")
    except json.JSONDecodeError as exc:
        raise CopeInputError(f"not valid JSON: {exc.msg}", path=CATALOG_FILE, line=exc.lineno) from None
    return _parse_catalog(data, origin=CATALOG_FILE)


def _parse_catalog(data: Any, *, origin: str) -> dict[str, ModelSpec]:
    if not isinstance(data, dict):
        raise CopeInputError("the catalog must be a JSON object", path=origin)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise CopeInputError(
            f"field 'schema_version' must be {SCHEMA_VERSION}, got {data.get('schema_version')!r}",
            path=origin)
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise CopeInputError("field 'models' must be a non-empty list", path=origin)
    known_quants = quantizations()
    models: dict[str, ModelSpec] = {}
    names: dict[str, str] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise CopeInputError(f"models[{index}] must be an object", path=origin)
        model = model_from_dict(entry, origin=origin)
        for field in ("id", "name", "arch", "source"):
            if not str(entry.get(field, "")).strip():
                raise CopeInputError(f"models[{index}] ({model.id}): field {field!r} is empty",
                                     path=origin)
        keys = (model.id.lower(), model.name.lower(), *(a.lower() for a in model.aliases))
        for key in keys:
            if key in names and names[key] != model.id:
                raise CopeInputError(f"models[{index}]: {key!r} is also used by {names[key]!r}",
                                     path=origin)
        if model.id in models:
            raise CopeInputError(f"models[{index}]: duplicate id {model.id!r}", path=origin)
        if model.default_quant.upper() not in known_quants:
            raise CopeInputError(
                f"models[{index}] ({model.id}): field 'default_quant' {model.default_quant!r} "
                "is not in assets/quantizations.json", path=origin)
        for key in keys:
            names[key] = model.id
        models[model.id] = model
    return models


# Suffixes that name a release or a packaging of the same weights' shape, not another
# shape: "Qwen3-Coder-30B-A3B" is the catalog's "Qwen3-Coder-30B-A3B-Instruct", and
# "Qwen3-30B-A3B-GGUF" (a quantizer's repository name) is Qwen3-30B-A3B.
_RELEASE_SUFFIXES = ("-gguf", "-instruct", "-chat", "-it", "-hf")


def _bare(name: str) -> str:
    name = name.strip().lower()
    stripped = True
    while stripped:
        stripped = False
        for suffix in _RELEASE_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, stripped = name[: -len(suffix)], True
    return name


def _names(model: ModelSpec) -> tuple[str, ...]:
    return (model.id.lower(), model.name.lower(), *(a.lower() for a in model.aliases))


def get_model(id_or_name: str) -> ModelSpec:
    """A catalog model by id, name or alias, case-insensitively; failing that, by the
    same with a release suffix (-Instruct, -Chat, -it, -hf, -GGUF) dropped on both sides,
    when exactly one model answers."""
    wanted = id_or_name.strip().lower()
    for model in catalog().values():
        if wanted in _names(model):
            return model
    bare = _bare(wanted)
    matches = [m for m in catalog().values() if bare in {_bare(n) for n in _names(m)}]
    if len(matches) == 1:
        return matches[0]
    raise CopeInputError(f"unknown model {id_or_name!r}{did_you_mean(id_or_name, catalog())}; "
                         f"known: {', '.join(catalog())}")


def load_model(arg: str) -> ModelSpec:
    """A catalog id or name, a catalog model's Hub repo id, or a path to a config.json."""
    path = Path(arg).expanduser()
    if path.is_file():
        return model_from_hf_config(arg)
    if path.is_dir():
        if (path / "config.json").is_file():
            return model_from_hf_config(str(path / "config.json"))
        raise CopeInputError("folder holds no config.json", path=arg)
    try:
        return get_model(arg)
    except CopeInputError:
        pass
    for model in catalog().values():
        if model.hf_repo and model.hf_repo.lower() == arg.strip().lower():
            return model
    if path.suffix.lower() == ".json":
        raise CopeInputError("file not found", path=arg)
    raise CopeInputError(
        f"unknown model {arg!r}: neither a catalog model ({', '.join(catalog())}) "
        "nor a path to a config.json"
    )


def model_label(arg: str) -> str:
    """The catalog id when the catalog knows the model (so `cope advise` finds it), else the argument."""
    try:
        return load_model(arg).id
    except Exception:  # noqa: BLE001 - a label only: any failure falls back to the name given
        path = Path(arg)
        return path.name if path.exists() else arg
