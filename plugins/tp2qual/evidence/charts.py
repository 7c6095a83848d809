"""The report's charts as data: SVG elements the template writes out (autoescaped), so no figure
becomes markup by string pasting and the report needs no script. Pure: numbers in, shapes out.

``sample_chart``: one value per sample with both axes, units, sample numbers and a floor line.
``interval_chart``: one row per candidate, its median as a dot and its 95 % CI as a whisker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INK, MUTED, GRID, BLUE, RED = "#1f2328", "#57606a", "#d0d7de", "#0969da", "#cf222e"


@dataclass(frozen=True)
class Element:
    tag: str  # line | polyline | circle | rect | text
    attrs: tuple[tuple[str, str], ...]
    text: str = ""
    title: str = ""  # a tooltip


@dataclass(frozen=True)
class Svg:
    width: int
    height: int
    label: str  # aria-label
    elements: tuple[Element, ...]


def _el(tag: str, text: str = "", title: str = "", **attrs: float | str) -> Element:
    shown = tuple((k.replace("_", "-"), _num(v)) for k, v in attrs.items())
    return Element(tag, shown, text, title)


def _num(value: float | str) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = [round(first, 12)]
    while ticks[-1] < high - step * 1e-9 and len(ticks) < count + 3:
        ticks.append(round(first + len(ticks) * step, 12))
    return ticks


def label(value: float) -> str:
    return f"{value:.4g}"


@dataclass(frozen=True)
class _Scale:
    low: float
    high: float
    start: float  # pixels
    end: float

    def __call__(self, value: float) -> float:
        return self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start)


def sample_chart(
    title: str,
    unit: str,
    samples: list[tuple[int, float]],
    floor: tuple[float, str] | None = None,
    width: int = 440,
    height: int = 230,
) -> Svg:
    """(sample number, value) pairs as a line with dots; ``floor``: (value, words) drawn dashed."""
    left, right, top, bottom = 62, 14, 16, 42
    values = [v for _, v in samples] + ([floor[0]] if floor else [])
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.05 if floor else 0.0  # a floor at the lowest value stays off the axis
    ticks = nice_ticks(low - pad, high + pad)
    low, high = ticks[0], ticks[-1] if ticks[-1] > ticks[0] else ticks[0] + 1
    y = _Scale(low, high, height - bottom, top)
    n = len(samples)
    x = _Scale(0, max(1, n - 1), left + 10, width - right - 10)
    out = _axes(left, right, top, bottom, width, height, f"{title} ({unit})", "sample number")
    for t in ticks:
        out += [
            _el("line", x1=left, x2=width - right, y1=y(t), y2=y(t), stroke=GRID),
            _el("text", label(t), x=left - 6, y=y(t) + 4, text_anchor="end", font_size=11),
        ]
    every = max(1, math.ceil(n / 12))
    points = [
        (x(k) if n > 1 else (left + width - right) / 2, y(v)) for k, (_, v) in enumerate(samples)
    ]
    for k, ((number, _), (px, _)) in enumerate(zip(samples, points, strict=True)):
        if k % every == 0 or k == n - 1:
            out.append(
                _el(
                    "text",
                    str(number),
                    x=px,
                    y=height - bottom + 15,
                    text_anchor="middle",
                    font_size=11,
                )
            )
    if floor is not None:
        fy = y(floor[0])
        out += [
            _el(
                "line",
                x1=left,
                x2=width - right,
                y1=fy,
                y2=fy,
                stroke=RED,
                stroke_width=1.5,
                stroke_dasharray="6 4",
            ),
            _el(
                "text",
                floor[1],
                x=width - right - 4,
                y=fy - 4,
                text_anchor="end",
                font_size=11,
                fill=RED,
            ),
        ]
    line = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    out.append(_el("polyline", points=line, fill="none", stroke=BLUE, stroke_width=2))
    for (number, value), (px, py) in zip(samples, points, strict=True):
        tip = f"sample {number}: {label(value)} {unit}"
        out.append(_el("circle", title=tip, cx=px, cy=py, r=3.5, fill=BLUE))
    return Svg(width, height, f"{title} per sample, {unit}", tuple(out))


def _axes(
    left: int,
    right: int,
    top: int,
    bottom: int,
    width: int,
    height: int,
    y_title: str,
    x_title: str,
) -> list[Element]:
    mid = (top + height - bottom) / 2
    return [
        _el("line", x1=left, x2=left, y1=top, y2=height - bottom, stroke=INK),
        _el("line", x1=left, x2=width - right, y1=height - bottom, y2=height - bottom, stroke=INK),
        _el(
            "text",
            x_title,
            x=(left + width - right) / 2,
            y=height - 6,
            text_anchor="middle",
            font_size=12,
            fill=MUTED,
        ),
        _el(
            "text",
            y_title,
            x=14,
            y=mid,
            text_anchor="middle",
            font_size=12,
            fill=MUTED,
            transform=f"rotate(-90 14 {mid:.1f})",
        ),
    ]


@dataclass(frozen=True)
class Interval:
    name: str
    median: float
    low: float | None  # 95 % CI of the median's sample; None when not recorded
    high: float | None


def interval_chart(title: str, unit: str, rows: list[Interval], width: int = 520) -> Svg:
    """One row per candidate: the median as a dot, the 95 % CI as a whisker, from 0 up."""
    left, right, top, bottom, pitch = 170, 60, 12, 44, 26
    height = top + bottom + pitch * max(1, len(rows))
    high = max([r.high or r.median for r in rows] + [r.median for r in rows] + [0.0])
    ticks = nice_ticks(0.0, high or 1.0)
    x = _Scale(0.0, ticks[-1] if ticks[-1] > 0 else 1.0, left, width - right)
    out = _axes(left, right, top, bottom, width, height, "", f"{title} ({unit})")
    for t in ticks:
        out += [
            _el("line", x1=x(t), x2=x(t), y1=top, y2=height - bottom, stroke=GRID),
            _el(
                "text", label(t), x=x(t), y=height - bottom + 15, text_anchor="middle", font_size=11
            ),
        ]
    for k, row in enumerate(rows):
        cy = top + pitch * k + pitch / 2
        whisker = row.low is not None and row.high is not None
        ci = f", 95 % CI [{label(row.low or 0)}, {label(row.high or 0)}]" if whisker else ""
        tip = f"{row.name}: median {label(row.median)} {unit}{ci}"
        out.append(
            _el("text", row.name[:26], x=left - 8, y=cy + 4, text_anchor="end", font_size=12)
        )
        if row.low is not None and row.high is not None:
            out += [
                _el("line", x1=x(row.low), x2=x(row.high), y1=cy, y2=cy, stroke=INK),
                _el("line", x1=x(row.low), x2=x(row.low), y1=cy - 6, y2=cy + 6, stroke=INK),
                _el("line", x1=x(row.high), x2=x(row.high), y1=cy - 6, y2=cy + 6, stroke=INK),
            ]
        end = x(max(row.median, row.high or row.median))
        out += [
            _el("circle", title=tip, cx=x(row.median), cy=cy, r=5, fill=BLUE),
            _el("text", label(row.median), x=end + 8, y=cy + 4, font_size=11, fill=MUTED),
        ]
    return Svg(width, height, f"{title} by candidate, {unit}", tuple(out))


def xy_chart(
    title: str,
    unit: str,
    x_title: str,
    series: list[tuple[str, str, list[tuple[float, float]]]],
    width: int = 440,
    height: int = 230,
) -> Svg:
    """Points against a numeric x (the context ladder: prompt tokens), one line per series
    (name, colour, points sorted by x), a legend when there is more than one."""
    left, right, top, bottom = 62, 14, 16, 42
    xs = [x for _, _, pts in series for x, _ in pts] or [0.0, 1.0]
    ys = [y for _, _, pts in series for _, y in pts] or [0.0, 1.0]
    xt, yt = nice_ticks(0.0, max(xs)), nice_ticks(0.0, max(ys))
    x = _Scale(xt[0], xt[-1] if xt[-1] > xt[0] else xt[0] + 1, left + 10, width - right - 10)
    y = _Scale(yt[0], yt[-1] if yt[-1] > yt[0] else yt[0] + 1, height - bottom, top)
    out = _axes(left, right, top, bottom, width, height, f"{title} ({unit})", x_title)
    for t in yt:
        out += [
            _el("line", x1=left, x2=width - right, y1=y(t), y2=y(t), stroke=GRID),
            _el("text", label(t), x=left - 6, y=y(t) + 4, text_anchor="end", font_size=11),
        ]
    for t in xt:
        out.append(
            _el(
                "text", label(t), x=x(t), y=height - bottom + 15, text_anchor="middle", font_size=11
            )
        )
    for n, (name, colour, pts) in enumerate(series):
        line = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in pts)
        out.append(_el("polyline", points=line, fill="none", stroke=colour, stroke_width=2))
        for px, py in pts:
            tip = f"{name}: {label(py)} {unit} at {label(px)} {x_title}"
            out.append(_el("circle", title=tip, cx=x(px), cy=y(py), r=3.5, fill=colour))
        if len(series) > 1:
            out.append(
                _el("text", name, x=left + 8, y=top + 12 + 14 * n, font_size=11, fill=colour)
            )
    return Svg(width, height, f"{title} against {x_title}, {unit}", tuple(out))
