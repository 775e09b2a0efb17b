"""Model: the catalog (searchable), a local GGUF file or a Hub repo id; quantization,
context and threads."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from cope_tui.app.panes import Apply
from cope_tui.app.widgets.options_row import OptionsRow
from engine.core.errors import CopeInputError
from engine.core.names import squash
from engine.core.spans import count_of
from engine.models.catalog import catalog
import difflib


def closest_models(query: str) -> list[str]:
    """The catalog ids (at most 3, closest first) for a search that matched none. Compared
    as `cope advise --model` compares (engine.hardware.preset_names: case, spaces and dashes do not
    count, 0.75 similarity), against each id, name and alias, and against their start as
    long as what was typed: a search is typed from the start of a name, so 'deepsek' is
    close to 'deepseek-v3' though far from the whole of it."""
    key = squash(query)
    if not key:
        return []
    scored = []
    for model in catalog().values():
        names = [squash(n) for n in (model.id, model.name, *model.aliases)]
        score = max(max(difflib.SequenceMatcher(None, key, n[:len(key)]).ratio(),
                        difflib.SequenceMatcher(None, key, n).ratio()) for n in names)
        if score >= 0.75:
            scored.append((-score, len(scored), model.id))
    return [model_id for _, _, model_id in sorted(scored)[:3]]


def no_match_text(query: str, close: list[str]) -> str:
    """What the CLI says of an unknown model, for a search: ' (did you mean X or Y?)'."""
    guess = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"no catalog model matches {query.strip()!r}{guess}"


class ModelPane(VerticalScroll):
    DEFAULT_CSS = """
    ModelPane { padding: 0 1; }
    ModelPane .row { height: auto; margin-top: 1; }
    ModelPane .row Label { width: 12; }
    ModelPane .row Input { width: 1fr; }
    ModelPane #catalog { height: 7; border: none; }
    ModelPane #model-now { color: $text-muted; }
    ModelPane #catalog-hint { height: auto; display: none; color: $warning; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="model-now")
        with Horizontal(classes="row"):
            yield Label("Catalog")
            yield Input(placeholder="search the catalog (name, id, arch)", id="search", compact=True)
        yield Static("", id="catalog-hint")  # shown when the search matches nothing
        yield OptionList(id="catalog", compact=True)
        with Horizontal(classes="row"):
            yield Label("GGUF file")
            yield Input(placeholder="/path/to/model.gguf (Enter to open)", id="gguf", compact=True)
        with Horizontal(classes="row"):
            yield Label("Hub repo")
            yield Input(placeholder="org/name (Enter to read its config.json)", id="repo", compact=True)
        yield OptionsRow("model", id="model-options")
        yield OptionsRow("policy", id="policy-options")
        with Horizontal(classes="row"):
            yield Button("Apply", id="apply", variant="primary", compact=True)

    def on_mount(self) -> None:
        self._fill("")

    def _fill(self, query: str) -> None:
        q = query.strip().lower()
        models = [m for m in catalog().values()
                  if all(word in f"{m.id} {m.name} {' '.join(m.aliases)} {m.arch} {m.hf_repo or ''}".lower()
                         for word in q.split())]
        hint = self.query_one("#catalog-hint", Static)
        hint.display = not models
        if not models:  # a misspelling: the closest, listed so that Enter picks the first
            close = closest_models(query)
            hint.update(Text(no_match_text(query, close)))
            models = [catalog()[model_id] for model_id in close]
        options = self.query_one("#catalog", OptionList)
        options.clear_options()
        for model in models:
            label = Text(model.name + "  ")
            label.append(f"{model.id} · {model.arch} · {model.n_routed_experts}x top-{model.top_k}", style="dim")
            options.add_option(Option(label, id=model.id))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "search":
            self._fill(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "search":
            options = self.query_one("#catalog", OptionList)
            if options.option_count:
                self._pick(options.get_option_at_index(options.highlighted or 0).id)
        elif event.input.id == "gguf" and event.value.strip():
            self.post_message(Apply(model=event.value.strip(), quant=None, gguf_file=None))
        elif event.input.id == "repo" and event.value.strip():
            self.post_message(Apply(model=event.value.strip(), gguf_file=None))
        else:
            self._apply()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._pick(event.option.id)

    def _pick(self, model_id: str | None) -> None:
        if model_id:
            self.post_message(Apply(model=model_id, gguf_file=None))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            event.stop()
            self._apply()

    def _apply(self) -> None:
        """Every model and policy field at once (a GGUF file fixes the quantization)."""
        try:
            changes = {**self.query_one("#model-options", OptionsRow).values(),
                       **self.query_one("#policy-options", OptionsRow).values()}
        except CopeInputError as exc:
            self.app.say(str(exc), "error")  # type: ignore[attr-defined]
            return
        request = self.app.request  # type: ignore[attr-defined]
        if request is not None and request.model.exact_bytes is not None:
            changes.pop("quant")
        self.post_message(Apply(**changes))

    def update_from(self, app) -> None:  # type: ignore[no-untyped-def]
        req = app.request  # the ranking's, or the CPU-only plan's
        if req is None:
            return
        model = req.model
        fixed = model.exact_bytes is not None
        self.query_one("#model-now", Static).update(
            f"In use: [b]{model.name}[/b] ({model.arch}, {model.n_moe_layers} MoE layers x "
            f"{model.n_routed_experts} experts, top-{model.top_k}), {req.quant.name}"
            + (" fixed by the GGUF file" if fixed else "")
            + f", context {req.context_tokens}, {count_of(req.threads, 'thread')}"
        )
        row = self.query_one("#model-options", OptionsRow)
        row.show(app.choices)
        row.disable("quant", fixed)
        self.query_one("#policy-options", OptionsRow).show(app.choices)
