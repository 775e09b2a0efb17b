"""Prompt sets for recording traces: a person's prompt file, or one shipped per domain.

A prompt file holds one prompt per line, or prompts as blocks separated by blank
lines; lines starting with '#' are comments. The shipped sets are
`assets/prompts/<domain>.txt`.
"""

from __future__ import annotations

from importlib import resources

from engine.core.errors import CopeInputError
from engine.core.input_limits import PROMPTS_MAX_BYTES, read_capped

DOMAINS = ("chat", "code", "math")


def parse_prompts(text: str) -> list[str]:
    """Prompts from text: blocks separated by blank lines when the text holds a blank
    line between prompts, else one per line; lines starting with '#' are comments."""
    lines = [ln.rstrip() for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if any(not ln.strip() for ln in lines):
        blocks, current = [], []
        for ln in lines + [""]:
            if ln.strip():
                current.append(ln.strip())
            elif current:
                blocks.append("\n".join(current))
                current = []
        return blocks
    return [ln.strip() for ln in lines if ln.strip()]


def load_prompts(path: str) -> list[str]:
    raw = read_capped(path, what="prompt file", cap=PROMPTS_MAX_BYTES)  # a FIFO or a sparse giant: refused
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not UTF-8 text (byte {exc.start})", path=str(path)) from None
    prompts = parse_prompts(text)
    if not prompts:
        raise CopeInputError("holds no prompt (empty, or only comments)", path=path)
    return prompts


def domain_prompts(domain: str) -> list[str]:
    if domain not in DOMAINS:
        raise CopeInputError(f"unknown domain {domain!r}: one of {', '.join(DOMAINS)}")
    text = resources.files("assets").joinpath("prompts", f"{domain}.txt").read_text(encoding="utf-8")
    return parse_prompts(text)
