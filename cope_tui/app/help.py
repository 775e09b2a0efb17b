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

A tab opens with the focus in its first text field, so what you type goes there; the
single-letter keys below act only where no text is typed (Results' table, a button), and
none destroys anything: `q`, `m` and `p` ask first (y/n).

| key | does |
|-----|------|
| `1`..`6` | Hardware, Model, Trace, Probes, Results, Export |
| `F2`..`F7` | the same, also from inside a text field |
| `ctrl+pgup` `ctrl+pgdn` | the previous / next tab, also from inside a text field |
| `alt+1`..`6` | as `F2`..`F7` where the terminal speaks the kitty keyboard protocol (kitty, WezTerm, foot, Ghostty); elsewhere alt+digit types a character |
| `p` | start probes (measure this machine for the chosen model); asks first |
| `m` | measure this machine's bandwidths (loads torch); asks first |
| `Escape` | cancel probes or recording (with neither running: back to Results); close this screen |
| `r` | recompute the ranking |
| `c` | copy the command of the selected candidate (OSC 52: your terminal must support it) |
| `s` | save it to a file (artefacts beside it; asks before overwriting one) |
| `e` | paste the llama.cpp command you run today: estimated beside COPE's best |
| `t` | with a Workload: chart prompt tok/s instead of decode tok/s |
| `k` | in Results: the trade-off table (context 8k to 64k, KV f16 and q8_0) in the ranking's place; again: the ranking |
| `?` / `F1` | this help |
| `q` | quit; asks first |
| `ctrl+q` | quit at once; asks only while probes, a recording or a measurement run |

- **Hardware**: choose the GPU preset to plan for, the CPU (this machine's, or a
  preset) and the VRAM budget; *Measure this machine* measures its bandwidths. The GPU
  field takes what `cope advise --gpu` takes (Enter plans; right arrow completes a preset):
  several cards (`2x rtx-3090`, `rtx-4090,rtx-3090`), a llama.cpp backend
  (`rx-7900-xtx@vulkan`), or `none` for the CPU alone (the one CPU-only command, priced).
- **Model**: search the catalog (Enter picks; a misspelt name lists the closest), open a local `.gguf` (its tensors fix
  the quantization), or type a Hugging Face repo id; context and threads.
- **Trace**: a **SYNTHETIC** trace is made-up routing. Pull a trace from the trace
  cache, record one with transformers, or import a file.
- **Results**: the row marked `▶` is what to run now: the fastest candidate a runtime
  installed here runs (else the fastest stock llama.cpp runs); when none can run (nothing
  fits in RAM), a line above the table says why, as `cope advise` does. *runs on* names the
  runtimes: `stock` llama.cpp, `ik` ik_llama.cpp, `fork` the llama.cpp MoE
  expert-cache fork (github.com/thecodacus/llama.cpp), `kt` SGLang + kt-kernel; `~`
  approximately, `none` no runtime, `no RAM` does not fit in RAM. Move the cursor to
  select a candidate; the chart shows tokens/s against the VRAM budget for the best few:
  the candidates a one-pass hit curve counts at once, the ones replayed step by step
  (caches that prefetch or admit misses) as each finishes, its title saying how far.
  With a **Workload** (Model tab: chat, rag, code-agent) the summary above the table
  names the fastest request (its time, time to first token, prompt and decode tok/s),
  the *cost per token* panel shows the selected candidate's, and the `▶` row is the
  fastest request a runtime here runs; its export carries the `-b`/`-ub` chosen for the
  request, and the context is sized to hold it.

  Above the table, what `cope advise` says first: the command to run, stock llama.cpp's
  commands searched beside it (its expert cache, `--moe-cache-mib`) and llama.cpp's own
  placement of the same command (`--fit`), each figure with its error band; `k` shows
  what each context and KV cache type costs beside the search's best command (tok/s,
  TTFT, VRAM: the trade-off table `cope advise` prints), in the place of the rest. The table
  lists what some runtime runs, in llama.cpp's flags where it has them; the Policy
  Matrix's cells no runtime runs are counted under it, and *list them* adds them below a
  line that says what routing they rest on (SYNTHETIC or replayed).

  | column (narrow terminal) | is |
  |-----|------|
  | `#` | the rank; `▶` the run-now row, pinned on top |
  | `llama.cpp flags, or candidate` (`flags, or candidate`) | llama.cpp's flags (`--n-cpu-moe 22`, `--cpu-moe`), else the Policy Matrix cell; `(base)` the baseline, `(+N same)` N more that place the experts identically, shown as this row |
  | `tok/s`, `band` (`tok/s ±band`) | estimated decode tokens per second, and its regime's cross-validated error (`none`: no published run judges it) |
  | `ms/tok` (wide only) | estimated time per output token |
  | `x base` (wide only) | the speed-up over the baseline |
  | `VRAM GiB` (`VRAM`) | the VRAM it uses |
  | `RAM GiB` (`RAM`) | the host memory it needs on the runtime that runs it |
  | `hits` (wide only) | the routed experts found on the GPU |
  | `runs on` | which runtimes run it (above) |
  | `why` (wide only) | where it puts the experts, and who runs it |

- **Export**: the command of the selected candidate for each runtime that runs it
  (pick one); a candidate no runtime runs gets the nearest one stock llama.cpp runs,
  with its estimated speed. *Export* on top picks, instead of the row, llama.cpp's
  expert-cache command (`--moe-cache-mib`) that Results shows, as `cope export --candidate
  llama-cache` writes it; it is offered only when the search found it faster, and a line
  says why not otherwise. Paste the command you run today (`e`) to see what it maps
  to, its estimate, COPE's speedup over it and the flags COPE does not model (the
  app's twin of `cope estimate`).

The headless twin is `cope advise --json`; both read and write the same profile and
trace caches. `cope` takes `cope advise`'s plan flags to start from (`cope --model
gpt-oss-120b --gpu "2x rtx-3090"`); without them it starts from the plan in use when it
last closed, remembered in `app.json` in your config folder (`~/.config/cope` on Linux, or
`COPE_CONFIG_DIR`).
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
