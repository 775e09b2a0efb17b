"""The help screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# COPE: experts between GPU and CPU

COPE replays how the model routes tokens under every candidate policy and ranks them
by estimated time per output token. Figures carry their basis: **detected** (read from
this machine), **measured** (probed), **preset** (spec sheet), **assumed**.

| key | does |
|-----|------|
| `1`..`6` | Hardware, Model, Trace, Probes, Results, Export |
| `p` | start probes (measure this machine for the chosen model) |
| `m` | measure this machine's bandwidths (loads torch) |
| `Escape` | cancel probes or recording; close this screen |
| `r` | recompute the ranking |
| `c` | copy the llama.cpp command of the selected candidate |
| `s` | save it to a file (side files beside it) |
| `e` | paste the llama.cpp command you run today: estimated beside COPE's best |
| `?` / `F1` | this help |
| `q` | quit |

- **Hardware**: choose the GPU preset to plan for and the VRAM budget; the CPU is
  this machine's.
- **Model**: search the catalog (Enter picks), open a local `.gguf` (its tensors fix
  the quantization), or type a Hugging Face repo id; context and threads.
- **Trace**: a **SYNTHETIC** trace is made-up routing. Pull a trace from the trace
  cache, record one with transformers, or import a file.
- **Results**: move the cursor to select a candidate; the chart shows tokens/s against
  the VRAM budget for the best few, so you see where more VRAM stops paying.
- **Export**: `stock` runs on stock llama.cpp, `fork` needs the community fork's
  `--moe-cache-*` flags, `not expr.` cannot be said to llama.cpp: the command then runs
  the nearest candidate that can, with its estimated speed. Paste the command you run
  today (`e`) to see what it maps to, its estimate, COPE's speedup over it and the
  flags COPE does not model (the app's twin of `cope estimate`).

The headless twin is `cope advise --json`; both read and write the same profile and
trace caches.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: thick $primary;
        background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
