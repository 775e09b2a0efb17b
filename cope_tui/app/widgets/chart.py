"""A small braille line chart: tokens/s against VRAM budget, one line per candidate.

Each series is drawn in braille dots with its own colour and its mark (the candidate's
rank) at every data point, so the lines stay apart with NO_COLOR too.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

PALETTE = ("green", "cyan", "magenta", "yellow", "red", "blue")
_DOT = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row][col] of a braille cell


def render_chart(
    series: list[tuple[str, list[tuple[float, float]]]],
    width: int,
    height: int,
    *,
    x_label: str = "VRAM GiB",
    y_label: str = "tok/s",
) -> Text:
    """`series`: (mark, [(x, y), ...]), the mark's first character drawn at each point;
    a plot area of width x height cells with axes."""
    points = [p for _, pts in series for p in pts]
    if not points or width < 16 or height < 4:
        return Text("no data yet" if not points else "too small to plot", style="dim")
    y_min, y_max = min(y for _, y in points), max(y for _, y in points)
    pad_y = max((y_max - y_min) * 0.1, y_max * 0.02, 1e-9)
    y_lo, y_hi = max(y_min - pad_y, 0.0), y_max + pad_y
    x_lo, x_hi = min(x for x, _ in points), max(x for x, _ in points)
    if x_hi == x_lo:
        x_hi = x_lo + 1.0
    gutter = max(len(f"{y_hi:.0f}"), len(f"{y_lo:.0f}")) + 1
    plot_w, plot_h = width - gutter, height - 2  # axis row, x labels row
    dots_w, dots_h = plot_w * 2, plot_h * 4
    cells = [[0] * plot_w for _ in range(plot_h)]
    owner: list[list[int | None]] = [[None] * plot_w for _ in range(plot_h)]
    marks: dict[tuple[int, int], int] = {}

    def to_dot(x: float, y: float) -> tuple[int, int]:
        dx = round((x - x_lo) / (x_hi - x_lo) * (dots_w - 1))
        dy = round((y - y_lo) / (y_hi - y_lo) * (dots_h - 1))
        return dx, dots_h - 1 - dy

    def plot(i: int, dx: int, dy: int) -> None:
        cx, cy = dx // 2, dy // 4
        if 0 <= cx < plot_w and 0 <= cy < plot_h:
            cells[cy][cx] |= _DOT[dy % 4][dx % 2]
            owner[cy][cx] = i

    for i, (_, pts) in enumerate(series):
        dots = [to_dot(x, y) for x, y in sorted(pts)]
        for (x0, y0), (x1, y1) in zip(dots, dots[1:]):
            n = max(abs(x1 - x0), abs(y1 - y0), 1)
            for s in range(n + 1):
                plot(i, round(x0 + (x1 - x0) * s / n), round(y0 + (y1 - y0) * s / n))
        for dx, dy in dots:
            plot(i, dx, dy)
            marks[(dy // 4, min(dx // 2, plot_w - 1))] = i

    out = Text(no_wrap=True, overflow="crop")
    for row in range(plot_h):
        label = f"{y_hi:.0f}" if row == 0 else (f"{y_lo:.0f}" if row == plot_h - 1 else "")
        out.append(label.rjust(gutter - 1) + ("┤" if label else "│"), style="dim")
        for col in range(plot_w):
            if (row, col) in marks:
                i = marks[(row, col)]
                out.append(series[i][0][:1], style=f"bold {PALETTE[i % len(PALETTE)]}")
            elif cells[row][col]:
                i = owner[row][col] or 0
                out.append(chr(0x2800 + cells[row][col]), style=PALETTE[i % len(PALETTE)])
            else:
                out.append(" ")
        out.append("\n")
    out.append(" " * (gutter - 1) + "└" + "─" * plot_w + "\n", style="dim")
    left, right = f"{x_lo:.1f}", f"{x_hi:.1f} {x_label}"
    pad = max(plot_w + 1 - len(left) - len(right), 1)
    out.append(" " * (gutter - 1) + left + " " * pad + right, style="dim")
    return out


def charted(rec, n_series: int) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(mark, candidate id) of the lines drawn: the best `n_series` at this budget by rank,
    and the baseline as B when it is not among them. The sweep prices these alone."""
    best = rec.estimates[:n_series]
    shown = [(str(rank), e.candidate.id) for rank, e in enumerate(best, 1)]
    baseline = rec.baseline()
    if baseline not in best:
        shown.append(("B", baseline.candidate.id))
    return shown


def swept_title(title: str, done: int, total: int) -> str:
    """The chart's title while the sweep fills in: how far it is."""
    return title if done >= total else f"{title} (filling in: {done}/{total} priced)"


class ThroughputChart(Widget):
    """tokens/s against VRAM budget for the best few candidates, with a legend."""

    DEFAULT_CSS = """
    ThroughputChart { height: 1fr; min-height: 6; }
    """

    def __init__(self, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kw)
        self.series: list[tuple[str, list[tuple[float, float]]]] = []
        self.message = "computing the VRAM sweep..."
        self.legend = ""

    def set_series(self, series: list[tuple[str, list[tuple[float, float]]]], message: str = "",
                   legend: str = "") -> None:
        self.series, self.message, self.legend = series, message, legend
        self.refresh()

    def render(self) -> Text:
        if not self.series:
            return Text(self.message, style="dim")
        w, h = self.size.width, self.size.height
        legend = Text(self.legend, style="dim", no_wrap=True, overflow="ellipsis")
        chart = render_chart(self.series, w, max(h - 1, 4))
        return Text("\n").join([chart, legend])
