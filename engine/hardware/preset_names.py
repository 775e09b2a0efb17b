"""How a person's or a system's name for a GPU or CPU finds a preset.

A preset is found by its id, its display name, or a shortened form: without the vendor
("RTX 4090", "Ryzen 9 7950X"), without a memory size ("RTX 5070" for "RTX 5070 12GB"; a GPU
sold in several sizes then needs its size: engine.hardware.presets.get_gpu_preset), or
by the model number alone ("4090", "7950x", "14900k", "6454s"; a Xeon's with its tier, "Gold
6248R", a Xeon W's as Intel writes it, "w9-3495X", "W-2295"); an Intel F or KF part by the part
it is without integrated graphics ("i5-13400F" is the Core i5-13400). CPU names are also read
the way /proc/cpuinfo and lscpu write them ("AMD Ryzen 9 7950X 16-Core Processor",
"13th Gen Intel(R) Core(TM) i9-13900K", "Intel(R) Xeon(R) CPU E7-8880 v3 @ 2.30GHz"):
trademark marks, core counts, "Processor", clock speeds and the integrated graphics are
dropped first. An alias that several presets share ("a100") is reported as ambiguous.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from functools import cache

from engine.core.errors import CopeInputError
from engine.core.names import did_you_mean, squash

_VENDOR_PREFIX = re.compile(r"^(nvidia|geforce|amd|intel)+")
# CPU families whose model number alone (or after the family word) names one part.
_FAMILY = re.compile(
    r"^(ryzenthreadripperpro|ryzenthreadripper|threadripperpro|threadripper|ryzenaimax|ryzenai|ryzen\d|"
    r"coreultra\d|corei\d|core|epyc|xeon(?:platinum|gold|silver|bronze|w\d(?=\d{4}))?|rtx|gtx)"
)
_INTEL_NO_GRAPHICS = re.compile(r"^((?:intel)?(?:core(?:ultra\d?)?)?(?:i\d)?\d{3,5}k?)f$")
_FAMILY_WORD = re.compile(r"^(ryzen|threadripper|epyc|xeon|core|rtx|gtx)")

_CPU_NOISE = (
    r"\((?:R|TM|C)\)", "[®™]", r"\b\d+(?:st|nd|rd|th)\s+Gen\b", r"\bCPU\b", r"@\s*[\d.]+\s*[GM]Hz",
    r"\b\d+-Cores?\b", r"\bProcessor\b", r"\s+w/\s.*$", r"\bwith\s+Radeon\b.*$",
)


def without_vendor(squashed: str) -> str:
    return _VENDOR_PREFIX.sub("", squashed) or squashed


def cpu_model_text(name: str) -> str:
    """A CPU's model as /proc/cpuinfo names it, without marks, core counts and clocks:
    "AMD Ryzen 9 7950X 16-Core Processor" -> "AMD Ryzen 9 7950X"."""
    text = name
    for pattern in _CPU_NOISE:
        text = re.sub(pattern, " ", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip()


def model_number(squashed_name: str) -> str:
    """The model number of a squashed, vendor-less name ("ryzen97950x" -> "7950x")."""
    return _FAMILY.sub("", squashed_name)


@cache  # every lookup walks every preset's aliases (562 CPUs): each set is made once
def aliases(preset_id: str, name: str) -> frozenset[str]:
    """The squashed spellings that find a preset: id, display name, and shortened forms."""
    ids = {preset_id}
    names = {name}
    ids |= {re.sub(r"(?i)[\s_-]*\d+\s*gb\b", "", x) for x in ids}
    names |= {re.sub(r"(?i)[\s_-]*\d+\s*gb\b", "", x) for x in names}
    out = {squash(x) for x in ids}
    out |= {without_vendor(squash(x)) for x in names}  # vendor words only off names
    out |= {a.replace("pcie", "").replace("sxm", "") for a in out}  # "h100" is either form factor
    # "Threadripper 7980X", "i9-13900K", "Ultra 7 155H", "Gold 6248R", and a Xeon W by its number as
    # Intel writes it ("w9-3495X", "W-2295")
    out |= {re.sub(r"^(ryzen(?=threadripper)|core(?=i\d|ultra\d)|xeon(?=w\d|platinum|gold|silver|bronze))", "", a)
            for a in out}
    numbers = {model_number(a) for a in out}
    out |= numbers  # "4090", "7950x", "13900k", "9654"
    # The family word before the number: "ryzen7950x" (as "Ryzen-7950X"), "xeon8480", "epyc9654".
    for a in list(out):
        family = _FAMILY_WORD.match(a)
        if family:
            out |= {family.group(1) + n for n in numbers if n and n != a}
    return frozenset(a for a in out if a)


def find_preset(kind: str, asset: str, names: Mapping[str, str], query: str, *,
                extra_ids: Iterable[str] = (), more_names: Mapping[str, Iterable[str]] | None = None) -> str:
    """The id of the preset `query` names among `names` (id -> display name).

    `extra_ids`: ids found by their id alone (CPU machine presets); `more_names`: other
    names of a preset ("NVIDIA GeForce RTX 4090 24GB"). Raises CopeInputError, one line,
    when none or several presets answer to the name.
    """
    found = match_preset(names, query, extra_ids=extra_ids, more_names=more_names)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise CopeInputError(f"{kind} preset {query!r} is ambiguous: it could be {', '.join(found)}")
    known = ", ".join([*extra_ids, *names])
    raise CopeInputError(f"unknown {kind} preset {query!r}{suggestion(names, query, extra_ids=extra_ids)}; "
                         f"`cope presets` lists them: {known} (assets/{asset})")


def suggestion(names: Mapping[str, str], query: str, *, extra_ids: Iterable[str] = ()) -> str:
    """" (did you mean X?)" for a name no preset answers to: the ids closest to the name as
    typed, else to it as /proc/cpuinfo writes it without marks, core counts and vendor
    ("AMD EPYC 7B13 64-Core Processor" is compared as "epyc7b13"), else its model number
    to the presets' model numbers ("7B13": epyc-7713, ...); "" when none is close."""
    ids = [*extra_ids, *names]
    model = without_vendor(squash(cpu_model_text(query)))
    for text in (query, model):
        guess = did_you_mean(text, ids)
        if guess:
            return guess
    by_number: dict[str, str] = {}
    for preset_id, name in names.items():
        by_number.setdefault(model_number(without_vendor(squash(name))), preset_id)
    close = difflib.get_close_matches(model_number(model), list(by_number), n=3, cutoff=0.75) if model else []
    return f" (did you mean {' or '.join(by_number[c] for c in close)}?)" if close else ""


def match_preset(names: Mapping[str, str], query: str, *, extra_ids: Iterable[str] = (),
                 more_names: Mapping[str, Iterable[str]] | None = None) -> list[str]:
    """Every preset id the name could mean (sorted); empty when none."""
    key = query.strip().lower()
    extra = {squash(i): i for i in extra_ids}
    if key in names:
        return [key]
    if squash(query) in extra:
        return [extra[squash(query)]]
    hits: dict[str, set[str]] = {}
    for preset_id, name in names.items():
        for alias in aliases(preset_id, name):
            hits.setdefault(alias, set()).add(preset_id)
        for other in (more_names or {}).get(preset_id, ()):
            hits.setdefault(without_vendor(squash(other)), set()).add(preset_id)
    tries: list[str] = []
    for text in (query, cpu_model_text(query)):
        s = squash(text)
        tries += [s, without_vendor(s)]
    tries += [t.replace("pcie", "") for t in tries]  # "A100-PCIE-40GB" as nvidia-smi says
    # Intel's F and KF parts are the same cores and memory without the integrated graphics.
    tries += [m.group(1) for t in tries if (m := _INTEL_NO_GRAPHICS.match(t))]
    for t in tries:
        if t in hits:
            return sorted(hits[t])
    return []


def presets_named_in(names: Mapping[str, str], text: str) -> list[str]:
    """Presets whose family word and model number both appear as words of `text`
    ("AMD EPYC 9355 (VM with 56 of 64 threads)" -> the EPYC 9355), sorted."""
    words = [squash(w) for w in re.split(r"[\s,;()/]+", cpu_model_text(text)) if squash(w)]
    seen = set(words) | {a + b for a, b in zip(words, words[1:])}  # "E7-8880 v3" is two words
    out = []
    for preset_id, name in names.items():
        squashed = without_vendor(squash(name))
        family = _FAMILY_WORD.match(squashed)
        number = model_number(squashed)
        if family and family.group(1) in seen and number in seen and re.search(r"\d", number):
            out.append(preset_id)
    return sorted(out)
