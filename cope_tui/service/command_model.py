"""Which model (and quantization) a pasted llama.cpp command runs, for `cope estimate`.

`--model` wins; else the `-m` file when it is on this machine (the model reader knows it);
else the catalog model and quantization its published name says (engine/models/model_names.py).
What the name says about the quantization, a nearest row priced in its place or a tag
COPE does not recognise, becomes a note of the estimate (text and JSON), not only a line
on stderr. `-c 0` is the model's trained context in llama.cpp (n_ctx_train): `command_context`
reads it from the model (the catalog's config.json max_position_embeddings, a GGUF's
`<arch>.context_length`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cope_tui.service.request import load_model
from engine.core.errors import CopeInputError
from engine.llamacpp.llama_args import LlamaCommand
from engine.models.catalog import get_model
from engine.models.model_names import model_from_file_name, quant_from_file_name


@dataclass(frozen=True)
class CommandModel:
    model: str  # what to plan with: a catalog id, a file, ...
    quant: str | None  # the quantization the file name says (None: --quant, the file, or the model's usual)
    notes: tuple[str, ...] = ()  # for the estimate's notes
    said: str | None = None  # one line for stderr: how the model was found
    alias: str | None = None  # the catalog alias the file name matched (another release of the same shape)


def command_model(command: LlamaCommand, model: str | None, quant: str | None) -> CommandModel:
    """The model `command` runs, given the --model and --quant flags (None: not given)."""
    if model is not None:
        return _named_model(command, model, quant)
    path = command.model_path
    if path and os.path.exists(path):
        return CommandModel(path, None)  # the model reader may know the file
    path = path or command.model_name
    named = model_from_file_name(path) if path else None
    if named is None:
        raise CopeInputError("--model: say which model the command runs (a catalog id, see `cope models`)")
    # How the user named the model, for the messages: the -hf/-hff/-mu flags, else the -m file.
    given, short = command.model_source or f"-m {path}", command.model_source or f"-m {os.path.basename(path)}"
    # The file is elsewhere (another machine): its name says the catalog model.
    found = None if quant else named.quant
    said = f"{given}: priced as the catalog's {named.model_id}" + (f", {found}" if found else "") + \
        " (from the file name)"
    spec = get_model(named.model_id)
    alias = named.matched if named.matched in spec.aliases else None
    if quant:
        return CommandModel(named.model_id, None, (), said, alias)  # --quant wins over the name
    notes = named.notes
    if found is None:
        usual = spec.default_quant
        notes = tuple(f"{n}; priced as {usual}, the model's usual GGUF (give the GGUF file for exact sizes, or "
                      "--quant)" for n in notes)
    return CommandModel(named.model_id, found, tuple(f"{short}: {n}" for n in notes), said, alias)


def _named_model(command: LlamaCommand, model: str, quant: str | None) -> CommandModel:
    """--model names the model; the -m file, when it is not on this machine, may still say
    its quantization (`--model qwen3-30b-a3b -- ... -m Qwen3-30B-A3B-UD-Q5_K_XL.gguf`), which
    wins over the model's usual one; --quant wins over both."""
    path = command.model_path or command.model_name
    if quant or not path or os.path.exists(path) or model.lower().endswith(".gguf"):
        return CommandModel(model, None)
    found, tag, notes = quant_from_file_name(path)
    if found is None:
        return CommandModel(model, None)
    short = command.model_source or f"-m {os.path.basename(path)}"
    said = f"{short}: priced as {model} at {found} (the file name says {tag})"
    return CommandModel(model, found, tuple(f"{short}: {n}" for n in notes), said)


def command_context(command: LlamaCommand, model: str, gguf_file: str | None = None,
                    alias: str | None = None) -> tuple[int | None, str | None]:
    """The context to price `command` at (None: the plan's default) and a note when `-c 0`
    asks for the model's trained context."""
    if command.context != 0:
        return command.context, None
    spec = load_model(model, gguf_file=gguf_file)
    if spec.context_length is None:
        return None, ("-c 0: llama.cpp uses the model's trained context (n_ctx_train), which COPE does not know for "
                      f"{spec.name}: priced at the default context instead (give -c N)")
    where = "the GGUF's context_length" if spec.exact_bytes is not None else "its config.json max_position_embeddings"
    other = ("" if alias is None else f"; the file is {alias}, another release of the same shape that may be "
             "trained for another context (give -c N to price that)")
    return spec.context_length, (f"-c 0: llama.cpp uses the model's trained context (n_ctx_train): "
                                 f"{spec.context_length} tokens for {spec.name} ({where}); --fit does not lower "
                                 f"it{other}")
