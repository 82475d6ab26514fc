"""The evaluation's chart, ``savings.png``, drawn with matplotlib.

Top row: the tokens a fix costs by program size, re-sent against replayed (notice
included), per call-id shape; beside it the cost of one fix against the program's size,
each scenario a point, with the break-even marked. Below, one row per measured effect of
a fix: the wall time of the fixes that resume after a slow step, and the tool
calls a fix made again.

matplotlib comes with the ``eval`` extra and is imported only when a chart is drawn, so
``import ptc_retry.eval`` and ``ptc-retry eval --help`` do without it. The chart is drawn
on a figure of its own with the Agg canvas (pyplot's figures and backend are left alone),
in matplotlib's default style and its bundled DejaVu Sans whatever the user's
matplotlibrc says, and saved without a ``Software`` tag: with the same matplotlib, the
same figures give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .figures import for_each_shape, short_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["DPI", "HEIGHT", "WIDTH", "savings_chart"]

#: The PNG's size in pixels, and the resolution it is drawn at.
WIDTH, HEIGHT, DPI = 1200, 1100, 100

_TITLE = "ptc-retry eval: what fixing a failed program costs"
_HEADER = 78  # pixels: the title and the key

INK = "#212529"
MUTED = "#6c757d"
GRID = "#dee2e6"
# Okabe-Ito colours, which stay apart for every kind of colour blindness: grey for the
# stock kernel's re-send, then one colour (and marker) per call-id shape, in order.
RESEND = "#999999"
SHAPE_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7")
SHAPE_MARKERS = ("o", "x", "s", "^")

_STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 11,
    "text.color": INK,
    "axes.edgecolor": MUTED,
    "axes.labelcolor": INK,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.axisbelow": True,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.color": GRID,
    "grid.linewidth": 0.8,
    "xtick.color": MUTED,
    "ytick.color": MUTED,
    "xtick.labelcolor": INK,
    "ytick.labelcolor": INK,
    "legend.frameon": False,
    "legend.fontsize": 11,
}


def savings_chart(figures: dict[str, Any]) -> bytes:
    """The PNG (``WIDTH`` x ``HEIGHT`` pixels) for the figures of
    :func:`ptc_retry.eval.figures.analyse`, as ``report.json`` holds them.

    Raises ``ModuleNotFoundError`` naming the extra to install when matplotlib is missing.
    """
    try:
        # The package itself first: once a submodule is imported, importing the submodule
        # again would not notice that the package has become unimportable.
        from matplotlib import style
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.legend_handler import HandlerTuple
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"the evaluation's chart needs matplotlib ({exc}); "
            "install it with: pip install 'ptc-retry[eval]'",
            name="matplotlib",
        ) from exc

    shapes = list(figures["id_shapes"].values())
    with style.context(["default", _STYLE]):
        figure = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)
        # The title and the key in a header of fixed height: constrained layout gives a
        # suptitle and a legend above the panels the same margin, one over the other.
        split = figure.add_gridspec(2, 1, height_ratios=[_HEADER, HEIGHT - _HEADER])
        header, body = figure.add_subfigure(split[0]), figure.add_subfigure(split[1])
        header.text(0.008, 0.92, _TITLE, va="top", fontsize=16, fontweight="bold")
        handles, labels = zip(*_legend_entries(shapes))
        header.legend(
            handles,
            labels,
            loc="lower left",
            bbox_to_anchor=(0.002, -0.04),
            ncols=len(handles),
            handlelength=2.8,
            columnspacing=2.2,
            handler_map={tuple: HandlerTuple(ndivide=None, pad=0.4)},
        )
        effects = [draw for has_data, draw in _EFFECT_PANELS if has_data(shapes)]
        ratios = [1.55, *(1.0 for _ in effects)]
        rows = body.add_gridspec(len(ratios), 1, height_ratios=ratios)
        top = rows[0].subgridspec(1, 2, width_ratios=[1, 1.15])
        by_size = body.add_subplot(top[0])
        _tokens_by_size(by_size, figures, shapes)
        _break_even(body.add_subplot(top[1], sharey=by_size), figures, shapes)
        for index, draw in enumerate(effects, 1):
            draw(body.add_subplot(rows[index]), figures, shapes)
        out = io.BytesIO()
        figure.savefig(out, format="png", dpi=DPI, metadata={"Software": None})
    return out.getvalue()


# -- the panels --------------------------------------------------------------------------------


def _tokens_by_size(ax: Axes, figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> None:
    """Grouped bars: per size class, the mean fix re-sent, then replayed per id shape."""
    unit = figures["unit"]
    sizes = list(shapes[0]["by_size"])
    series = [(RESEND, [_mean(shapes[0]["by_size"][size], "off_fix") for size in sizes])]
    for index, shape in enumerate(shapes):
        means = [_mean(shape["by_size"][size], "on_fix", "on_notice") for size in sizes]
        series.append((_color(index), means))
    width = 0.84 / len(series)
    for index, (color, values) in enumerate(series):
        offset = (index - (len(series) - 1) / 2) * width
        bars = ax.bar([k + offset for k in range(len(sizes))], values, width * 0.9, color=color)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=2, fontsize=9)
    labels = []
    for size in sizes:
        count = shapes[0]["by_size"][size]["scenarios"]
        saved = for_each_shape([s["by_size"][size]["saved_with_notice"] for s in shapes], _saving)
        labels.append(f"{size}\n{count} scenario{'s' * (count != 1)}\n{saved}")
    ax.set_xticks(range(len(sizes)), labels=labels)
    ax.tick_params(axis="x", length=0)
    _log_axis(ax, "y")
    highest = max([10.0, *(v for _, values in series for v in values)])
    ax.set_ylim(10, highest * 2.5)
    ax.set_ylabel(f"{unit} per fix (log scale)")
    _titles(
        ax,
        f"{unit.capitalize()} per fix, by program size",
        "mean per scenario; ptc-retry's bars count the notice the model reads",
    )


def _break_even(ax: Axes, figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> None:
    """Each failed program's fix against its size, the two costs the break-even compares
    (re-sending: the program; replaying: the replay line and the notice) and where they
    cross."""
    unit = figures["unit"]
    first = shapes[0]
    sizes = [float(r["program_bytes"]) for r in first["scenarios"]]
    resent = [_per_program(r, "off_fix") for r in first["scenarios"]]
    _points(ax, sizes, resent, RESEND, "o", hollow=False)
    for index, shape in enumerate(shapes):
        rows = shape["scenarios"]
        costs = [_per_program(r, "on_fix", "on_notice") for r in rows]
        marker = SHAPE_MARKERS[index % len(SHAPE_MARKERS)]
        _points(ax, [float(r["program_bytes"]) for r in rows], costs, _color(index), marker, True)

    evens = [s["break_even"] for s in shapes if s["break_even"].get("available")]
    low = min([*sizes, *(be["every_failure_replayed"]["bytes"] for be in evens)]) / 1.8
    high = max(sizes, default=1000.0) * 1.8
    ax.set_xlim(low, high)
    _log_axis(ax, "x", bytes_=True)
    ax.grid(True, axis="x", which="major")
    ax.set_xlabel("size of the failed program (bytes, log scale)")
    if not evens:
        _titles(ax, "Cost of one fix against program size", "no replay: no break-even")
        return
    # One OFF play serves every id shape, so the re-send costs the same per byte for all.
    per_byte = evens[0]["per_byte"]
    ax.plot(
        [low, high],
        [per_byte * low, per_byte * high],
        color=RESEND,
        lw=1.4,
        ls="--",
        label=f"re-send: {per_byte:.2f} {unit} per byte of program"
        if unit == "tokens"
        else "re-send: the whole program",
    )
    # Identical break-evens (the id shapes usually agree) are drawn and labelled once.
    crossings: dict[tuple[float, int], list[int]] = {}
    for index, shape in enumerate(shapes):
        be = shape["break_even"]
        if be.get("available"):
            cost = be["replay_line"] + be["notice"]
            crossings.setdefault((cost, be["every_failure_replayed"]["bytes"]), []).append(index)
    recommended = figures.get("recommended_notice_min_bytes")
    for row, ((cost, crossing), who) in enumerate(crossings.items()):
        color = INK if len(who) > 1 else _color(who[0])
        whose = "" if len(who) == len(shapes) else f" ({short_label(shapes[who[0]])} ids)"
        ax.axhline(
            cost, color=color, lw=1.2, ls="--", label=f"replay line + notice: {cost:.0f} {unit}"
        )
        ax.plot([crossing], [cost], marker="D", color=color, markersize=7, zorder=5)
        note = f"break-even{whose}: {crossing:,} B"
        if unit != "bytes":
            note += f" ({cost:.0f} {unit})"
        if recommended is not None and row == len(crossings) - 1:
            note += f"\nso notice_min_bytes = {recommended}"
        ax.annotate(
            note,
            xy=(crossing, cost),
            xytext=(0.04, 0.96 - 0.09 * row),
            textcoords="axes fraction",
            va="top",
            fontsize=9.5,
            fontweight="bold",
            color=color,
            arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1, "relpos": (0.1, 0)},
        )
    if len(crossings) == 1:
        ax.axvspan(low, next(iter(crossings))[1], color="#f1f3f5", zorder=0, lw=0)
    ax.legend(loc="lower right", fontsize=9, handlelength=2.4)
    _titles(
        ax,
        "Cost of one fix against program size",
        "a point per failed program; the two costs cross at the break-even",
    )


def _resume_time(ax: Axes, figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> None:
    """Horizontal bars: the wall time of each resumed scenario's fix, re-sent (the slow
    step runs again) and replayed with ``resume=True`` per id shape."""
    rows = [r for r in shapes[0]["scenarios"] if r["resume"]]
    labels = [f"{r['size']}: {r['shape'].replace(' (resume)', '')}" for r in rows]
    _arm_bars(ax, shapes, rows, labels, "fix_seconds", lambda v: f"{v:.2f} s", 0.5)
    ax.set_xlabel("wall time of the fix (s)")
    resumed = [s["resume"] for s in shapes if s["resume"]]
    resent = resumed[0]["off_fix_seconds"]
    replayed = for_each_shape([r["on_fix_seconds"] for r in resumed], lambda v: f"{v:.1f}")
    _titles(
        ax,
        f"Wall time of the fix: {resent:.1f} s re-sent, {replayed} s with resume",
        "failed after a slow step: a re-send runs that step again, resume=True starts at "
        "the failed statement",
    )


def _tool_calls(ax: Axes, figures: dict[str, Any], shapes: Sequence[dict[str, Any]]) -> None:
    """Horizontal bars: the host tool calls each tool scenario's fix made again, re-sent
    (every call) and replayed per id shape (the recorded results are reused)."""
    rows = [r for r in shapes[0]["scenarios"] if r["tools"]]
    labels = [f"{r['size']}: {r['failed_tool_calls']} tool calls, then an error" for r in rows]
    _arm_bars(ax, shapes, rows, labels, "tool_calls", lambda v: f"{v:.0f}", 2.0)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tool calls the fix made again")
    totals = [s["tools"] for s in shapes if s.get("tools")]
    replayed = for_each_shape([t["on_tool_calls"] for t in totals], lambda v: f"{v}")
    _titles(
        ax,
        f"Tool calls repeated by a fix: {totals[0]['off_tool_calls']} re-sent, {replayed} replayed",
        "failed after its last tool call: a re-send calls every tool again, a replay "
        "reuses the recorded results",
    )


def _arm_bars(
    ax: Axes,
    shapes: Sequence[dict[str, Any]],
    rows: Sequence[dict[str, Any]],
    labels: Sequence[str],
    key: str,
    show: Callable[[float], str],
    least: float,
) -> None:
    """Horizontal bars, a group per row: its ``off_<key>`` (re-sent), then its
    ``on_<key>`` per id shape; the axis reaches at least ``least``."""
    series = [(RESEND, [float(r[f"off_{key}"]) for r in rows])]
    for index, shape in enumerate(shapes):
        own = {r["name"]: r for r in shape["scenarios"]}
        series.append((_color(index), [float(own[r["name"]][f"on_{key}"]) for r in rows]))
    height = 0.84 / len(series)
    for index, (color, values) in enumerate(series):
        offset = (index - (len(series) - 1) / 2) * height
        bars = ax.barh([k + offset for k in range(len(rows))], values, height * 0.9, color=color)
        ax.bar_label(bars, labels=[show(v) for v in values], padding=3, fontsize=9)
    ax.set_yticks(range(len(rows)), labels=list(labels))
    ax.tick_params(axis="y", length=0)
    ax.invert_yaxis()
    ax.grid(False, axis="y")
    ax.grid(True, axis="x")
    highest = max([least, *(v for _, values in series for v in values)])
    ax.set_xlim(0, highest * 1.12)


def _has_resume(shapes: Sequence[dict[str, Any]]) -> bool:
    return any(s["resume"] for s in shapes)


def _has_tools(shapes: Sequence[dict[str, Any]]) -> bool:
    return any(s.get("tools") for s in shapes)


#: The rows below: one panel per measured effect of a fix, drawn when the figures hold data
#: for it. The output tokens that recover a cut-off call join here once the evaluation
#: measures them.
_EFFECT_PANELS: tuple[
    tuple[
        Callable[[Sequence[dict[str, Any]]], bool],
        Callable[[Axes, dict[str, Any], Sequence[dict[str, Any]]], None],
    ],
    ...,
] = ((_has_resume, _resume_time), (_has_tools, _tool_calls))


# -- pieces ------------------------------------------------------------------------------------


def _titles(ax: Axes, title: str, subtitle: str) -> None:
    """A bold title over a muted one-line subtitle, both left-aligned over ``ax``."""
    ax.set_title(title, pad=20)
    ax.annotate(
        subtitle,
        xy=(0, 1),
        xycoords="axes fraction",
        xytext=(0, 6),
        textcoords="offset points",
        fontsize=9.5,
        color=MUTED,
        va="bottom",
    )


def _log_axis(ax: Axes, which: str, bytes_: bool = False) -> None:
    """A log scale labelled at its decades: 10, 100, 1,000 (or 100 B, 1 KB, 10 KB)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def label(value: float, _position: float) -> str:
        if not bytes_:
            return f"{value:,.0f}"
        return f"{value / 1000:,.0f} KB" if value >= 1000 else f"{value:.0f} B"

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def _marker(color: str, marker: str, hollow: bool) -> dict[str, Any]:
    """A scatter marker's style: hollow for ptc-retry's points, so that where the id
    shapes measure the same, one point shows inside the other instead of hiding it."""
    if not hollow:
        return {"marker": marker, "markersize": 7, "color": color, "markeredgecolor": "white"}
    size = 6.5 if marker in ("x", "+") else 10.0
    return {
        "marker": marker,
        "markersize": size,
        "markerfacecolor": "none",
        "markeredgecolor": color,
        "markeredgewidth": 1.8,
    }


def _points(
    ax: Axes, xs: list[float], ys: list[float], color: str, marker: str, hollow: bool
) -> None:
    ax.plot(xs, ys, ls="none", zorder=4, **_marker(color, marker, hollow))


def _legend_entries(shapes: Sequence[dict[str, Any]]) -> list[tuple[Any, str]]:
    """One (handle, label) per colour; the handle shows the bar and the marker together."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    def entry(color: str, marker: str, hollow: bool, label: str) -> tuple[Any, str]:
        dot = Line2D([], [], ls="none", **_marker(color, marker, hollow))
        return (Patch(color=color), dot), label

    return [
        entry(RESEND, "o", False, "re-send, stock python3 kernel"),
        *(
            entry(
                _color(i), SHAPE_MARKERS[i % len(SHAPE_MARKERS)], True, f"ptc-retry, {s['label']}"
            )
            for i, s in enumerate(shapes)
        ),
    ]


def _color(index: int) -> str:
    """The colour of the ``index``-th id shape."""
    return SHAPE_COLORS[index % len(SHAPE_COLORS)]


def _mean(bucket: dict[str, Any], *keys: str) -> float:
    return sum(bucket[key] for key in keys) / max(1, bucket["scenarios"])


def _per_program(row: dict[str, Any], *keys: str) -> float:
    return sum(row[key] for key in keys) / max(1, row["programs"])


def _saving(share: float | None) -> str:
    if share is None:
        return "n/a"
    return f"saved {share:.0%}" if share >= 0 else f"{-share:.0%} more"
