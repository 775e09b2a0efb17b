"""Which catalog model and quantization a GGUF file name says, e.g. for `-m` in a llama.cpp
command whose file is not on this machine.

Published GGUF names follow `<model>[-<variant>]-<quant>[-NNNNN-of-NNNNN].gguf`, with the
quantization last, separated by "-", "_" or "." (TheBloke: `mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf`),
sometimes after a publisher prefix (`unsloth_Qwen3-235B-A22B-Instruct-2507-UD-Q4_K_XL.gguf`, as
LM Studio and Ollama save them). The model is the catalog name, alias or Hub repo name
that occurs in the rest as a whole dash-separated run (the longest one wins, so
"GLM-4.5-Air" beats "GLM-4.5"); the quantization is a row of assets/quantizations.json when
the tag names one. A tag COPE has no row for is priced as the nearest row only where that
is defensible (`NEAREST`: the same K-quant rules with a few tensors one type up or down,
e.g. Q3_K_L -> Q3_K_M, Q2_K_L -> Q2_K, and Unsloth's "UD-" dynamic mixes, built on a K-quant,
as that K-quant's llama.cpp mix: UD-Q4_K_XL -> Q4_K_M), and the note says so; any other tag
(IQ2_XXS, ik_llama.cpp's IQ4_KS, ...) gives None with the tag kept and a note that it was
not recognised: the file's own sizes are then the only exact ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import PurePath, PurePosixPath, PureWindowsPath

from engine.models.catalog import catalog
from engine.models.quant import quantizations

_SPLIT = re.compile(r"-\d{5}-of-\d{5}$", re.IGNORECASE)
# A quantization tag at the end of the stem: llama.cpp's file types (Q4_K_M, IQ4_XS, Q8_0,
# BF16, MXFP4_MOE), Unsloth's dynamic ones (UD-Q4_K_XL) and ik_llama.cpp's (IQ4_KS, IQ5_K).
_QUANT_TAG = re.compile(
    r"(?:^|[-_.])(?P<tag>(?:UD[-_])?(?:I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|FP16|F32|MXFP4(?:_MOE)?))$",
    re.IGNORECASE)
_SEPARATORS = re.compile(r"[-_. ]+")
# Tags that name a table row under another spelling.
_TAG_ALIASES = {"MXFP4_MOE": "MXFP4", "FP16": "F16"}
# Quantizations without a row, priced as the nearest row, and why that is close
# (src/llama-quant.cpp llama_tensor_get_type; "_L"/"_XL": bartowski's and unsloth's names for
# a K-quant with the token embedding and output at Q8_0).
NEAREST: dict[str, tuple[str, str]] = {
    "Q3_K_L": ("Q3_K_M", "llama.cpp's Q3_K_L keeps attention V/output and FFN down at Q5_K where Q3_K_M has Q4_K: "
                         "its file is a little larger than priced"),
    "Q3_K_S": ("Q3_K_M", "llama.cpp's Q3_K_S is Q3_K where Q3_K_M keeps some tensors at Q4_K/Q5_K: its file is a "
                         "little smaller than priced"),
    "Q2_K_S": ("Q2_K", "llama.cpp's Q2_K_S keeps fewer tensors above Q2_K than Q2_K: a little smaller than priced"),
    "Q2_K_L": ("Q2_K", "Q2_K with the token embedding and output at Q8_0: a little larger than priced"),
    "Q3_K_XL": ("Q3_K_M", "Q3_K_L with the token embedding and output at Q8_0: a little larger than priced"),
    "Q4_K_L": ("Q4_K_M", "Q4_K_M with the token embedding and output at Q8_0: a little larger than priced"),
    "Q5_K_L": ("Q5_K_M", "Q5_K_M with the token embedding and output at Q8_0: a little larger than priced"),
    "Q6_K_L": ("Q6_K", "Q6_K with the token embedding and output at Q8_0: a little larger than priced"),
    "IQ4_NL": ("Q4_0", "IQ4_NL and Q4_0 both store 4.5 bits a weight (18-byte blocks of 32)"),
}
# Unsloth's dynamic mixes ("UD-" + a K-quant name): each layer's tensors at the named type or
# above, chosen per model; priced as the named type's llama.cpp mix.
_UD_BASE = {"Q2_K_XL": "Q2_K", "Q3_K_XL": "Q3_K_M", "Q4_K_XL": "Q4_K_M", "Q5_K_XL": "Q5_K_M", "Q6_K_XL": "Q6_K",
            "Q8_K_XL": "Q8_0"}


@dataclass(frozen=True)
class NameMatch:
    model_id: str  # the catalog id
    quant: str | None  # a name in assets/quantizations.json, or None when the tag names none
    quant_tag: str  # the quantization as the file name writes it ("" when it has none)
    matched: str  # the catalog name or alias found in the file name
    notes: tuple[str, ...]


def model_from_file_name(path: str) -> NameMatch | None:
    """The catalog model (and quantization) a GGUF path's file name names; None if none matches.

    Folder names are tried after the file's own name (`.../Qwen3-30B-A3B-GGUF/model-Q4_K_M.gguf`).
    """
    parts = _path_parts(path)
    if not parts:
        return None
    stem, tag = _split_quant(_stem(parts[-1]))
    for candidate in [stem, *reversed(parts[-3:-1])]:
        found = _catalog_match(candidate)
        if found is not None:
            model_id, matched = found
            quant, notes = _quant_for(tag)
            return NameMatch(model_id=model_id, quant=quant, quant_tag=tag, matched=matched, notes=notes)
    return None


def quant_from_file_name(path: str) -> tuple[str | None, str, tuple[str, ...]]:
    """(the quantization, the tag as written, notes) a GGUF path's file name says, whatever
    model it names: what `--model` leaves open."""
    parts = _path_parts(path)
    if not parts:
        return None, "", ()
    _, tag = _split_quant(_stem(parts[-1]))
    quant, notes = _quant_for(tag)
    return quant, tag, notes


def _path_parts(path: str) -> list[str]:
    pure: PurePath = PureWindowsPath(path) if "\\" in path else PurePosixPath(path)
    return [p for p in pure.parts if p not in ("/", "\\")]


def _stem(name: str) -> str:
    stem = re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)
    return _SPLIT.sub("", stem)


def _split_quant(stem: str) -> tuple[str, str]:
    m = _QUANT_TAG.search(stem)
    if not m:
        return stem, ""
    return stem[: m.start("tag")].rstrip("-_. "), m["tag"]


def _normal(text: str) -> str:
    """Lower case, every run of separators one dash: "Qwen3_30B.A3B" -> "qwen3-30b-a3b"; dots
    inside version numbers ("Qwen3.5", "v0.1") stay, as they are part of names."""
    text = text.lower()
    text = re.sub(r"(?<=\d)\.(?=\d)", "\0", text)  # keep 3.5, 0.1
    return _SEPARATORS.sub("-", text).replace("\0", ".").strip("-")


@cache
def _catalog_keys() -> tuple[tuple[str, str, str], ...]:
    """(normalised key, model id, the key as written), longest first; once, as the catalog
    it reads is read once (engine/models/catalog.py)."""
    keys = []
    for model in catalog().values():
        names = [model.id, model.name, *model.aliases]
        if model.hf_repo:
            names.append(model.hf_repo.split("/")[-1])
        for name in dict.fromkeys(names):
            keys.append((_normal(name), model.id, name))
    return tuple(sorted(keys, key=lambda k: -len(k[0])))


def _catalog_match(text: str) -> tuple[str, str] | None:
    haystack = f"-{_normal(text)}-"
    for key, model_id, written in _catalog_keys():
        if f"-{key}-" in haystack:
            return model_id, written
    return None


def quant_for_name(name: str) -> tuple[str | None, tuple[str, ...]]:
    """(the row, notes) a quantization name people use prices as, as a file name's tag is
    read: a row itself (no note), else the nearest row with a note that says so (UD-Q4_K_XL
    -> Q4_K_M, Q4_K_L -> Q4_K_M); None with a note for a name with no defensible row."""
    return _quant_for(name.strip(), said=f"--quant {name.strip()}")


def _quant_for(tag: str, said: str | None = None) -> tuple[str | None, tuple[str, ...]]:
    if not tag:
        return None, ("the file name names no quantization",)
    said = said or f"the file says {tag}"
    upper = tag.upper().replace("-", "_")
    table = quantizations()
    name = _TAG_ALIASES.get(upper, upper)
    if name in table:
        return table[name].name, ()
    if upper.startswith("UD_"):
        base = upper[3:]
        nearest = base if base in table else _UD_BASE.get(base) or NEAREST.get(base, ("",))[0]
        if nearest:
            return nearest, (f"{said}, an Unsloth dynamic quant (its own per-tensor mix, some tensors "
                             f"above {nearest}'s types); priced as {nearest}, the nearest llama.cpp mix COPE sizes "
                             "(give the GGUF file for exact sizes)",)
    elif upper in NEAREST:
        nearest, why = NEAREST[upper]
        return nearest, (f"{said}; priced as {nearest}, the nearest quantization COPE sizes ({why}; "
                         "give the GGUF file for exact sizes)",)
    elif upper in _UD_BASE:  # Unsloth's K-quant XL name without its "UD-"
        nearest = _UD_BASE[upper]
        return nearest, (f"{said}, read as Unsloth's dynamic quant UD-{upper} (its own per-tensor mix, some "
                         f"tensors above {nearest}'s types); priced as {nearest}, the nearest llama.cpp mix COPE "
                         "sizes (give the GGUF file for exact sizes)",)
    return None, (f"{said}, a quantization COPE does not recognise (it sizes {', '.join(table)})",)
