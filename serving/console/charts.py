"""Charts drawn on the server as SVG text: no script, no CDN, nothing to build; the page works offline.

    svg = bars([("gpt-4o-mini", 120), ("gpt-4o", 30)], title="answering model", unit="requests")
    svg = columns(["2026-12-01", "2026-12-02"], {"spent": [0.4, 0.5], "reference": [2.1, 2.6]}, title="USD per day")
    svg = intervals([("served", 0.91, 0.85, 0.95, 120)], title="accuracy (consensus)")

Each returns a standalone `<svg>` element (with its xmlns: the same text is a valid .svg file, which
`switchcraft traffic report` writes). Labels are escaped.
"""

from __future__ import annotations

from html import escape

COLOURS = ("#2f6db5", "#e08a1e", "#3a9a5b", "#b23b3b", "#7a5cb5", "#5a8a9a", "#a0a03a", "#888888")
FONT = 'font-family="system-ui, sans-serif" font-size="12"'
LABEL_CHARS = 90  # a bar chart's labels are elided beyond this many characters (a cascade of three 2025 models fits)


def _fmt(v: float) -> str:
    if float(v).is_integer():
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    return f"{v:.4g}"


def _label(text: str, width: int = 34) -> str:
    text = str(text)
    return escape(text if len(text) <= width else text[: width - 1] + "…")


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" {FONT}>'
            f'<title>{escape(title)}</title>'
            f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>')
    return head + "".join(body) + "</svg>"


def top_n(items: list[tuple[str, float]], n: int = 10, other: str = "other") -> list[tuple[str, float]]:
    """The n largest items, the rest summed as one `other` row (a chart stays readable however many there are)."""
    ranked = sorted(items, key=lambda kv: -kv[1])
    if len(ranked) <= n + 1:
        return ranked
    rest = ranked[n:]
    return ranked[:n] + [(f"{other} ({len(rest)})", sum(v for _, v in rest))]


def bars(items: list[tuple[str, float]], *, title: str, unit: str = "", width: int = 640) -> str:
    """Horizontal bars, one a row, the value at its end. The label column is as wide as the longest label (up to
    `LABEL_CHARS` characters, the rest elided with the whole label in a tooltip) and the chart widens with it:
    no label is cut at the left edge."""
    longest = max([len(str(label)) for label, _ in items] + [8])
    label_w = min(LABEL_CHARS, longest) * 7 + 12  # ~7 px a character at 12 px system-ui
    width = max(width, label_w + 330)
    row_h, top = 22, 28
    height = top + row_h * max(1, len(items)) + 8
    top_value = max([v for _, v in items] + [0]) or 1.0
    span = width - label_w - 110  # room for "12,345 requests" after the longest bar
    body = []
    for i, (label, value) in enumerate(items):
        y = top + i * row_h
        w = max(1.0, span * value / top_value) if value else 0.0
        body.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end"><title>{escape(str(label))}</title>'
                    f'{_label(label, LABEL_CHARS)}</text><rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{COLOURS[0]}"/>'
                    f'<text x="{label_w + w + 4:.1f}" y="{y + 15}">{_fmt(value)} {escape(unit)}</text>')
    if not items:
        body.append(f'<text x="{label_w}" y="{top + 15}" fill="#777">no data in this range</text>')
    return _svg(width, height, title, body)


def columns(labels: list[str], series: dict[str, list[float]], *, title: str, unit: str = "",
            width: int = 640, height: int = 240) -> str:
    """Grouped vertical columns: one group per label (a day, an hour), one colour per series, a legend."""
    left, bottom, top = 60, 40, 44
    plot_w, plot_h = width - left - 10, height - top - bottom
    values = [v for vs in series.values() for v in vs]
    top_value = max(values + [0]) or 1.0
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" stroke="#999"/>',
            f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{_fmt(top_value)}</text>',
            f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>',
            f'<text x="{left - 4}" y="{top - 6}" text-anchor="end" fill="#555">{escape(unit)}</text>']
    for j, name in enumerate(series):
        x = left + j * 150
        body.append(f'<rect x="{x}" y="24" width="10" height="10" fill="{COLOURS[j % len(COLOURS)]}"/>'
                    f'<text x="{x + 14}" y="33">{escape(name)}</text>')
    n = max(1, len(labels))
    group_w = plot_w / n
    need = 5.5 * max([len(str(label)[-11:]) for label in labels] + [1]) + 8  # px a label takes at 10 px
    step = -(-n // max(1, int(plot_w // need)))  # every step-th label named: none overlaps its neighbour
    col_w = max(1.0, group_w * 0.8 / max(1, len(series)))
    for i, label in enumerate(labels):
        x0 = left + i * group_w + group_w * 0.1
        for j, vs in enumerate(series.values()):
            h = plot_h * (vs[i] / top_value) if vs[i] else 0.0
            body.append(f'<rect x="{x0 + j * col_w:.1f}" y="{top + plot_h - h:.1f}" width="{col_w:.1f}" '
                        f'height="{h:.1f}" fill="{COLOURS[j % len(COLOURS)]}"><title>{escape(label)} '
                        f'{escape(list(series)[j])}: {_fmt(vs[i])} {escape(unit)}</title></rect>')
        if i % step == 0:
            body.append(f'<text x="{x0 + group_w * 0.4:.1f}" y="{top + plot_h + 16}" text-anchor="middle" '
                        f'font-size="10">{escape(label[-11:])}</text>')
    if not labels:
        body.append(f'<text x="{left + 10}" y="{top + plot_h / 2}" fill="#777">no data in this range</text>')
    return _svg(width, height, title, body)


def intervals(items: list[tuple[str, float | None, float, float, int]], *, title: str, width: int = 640) -> str:
    """A point and its 95% interval on [0, 1] per row, with the count behind it."""
    label_w, row_h, top = 230, 24, 44
    span = width - label_w - 110  # room for "0.818 (n=1000)" after the axis
    height = top + row_h * max(1, len(items)) + 8
    body = []
    for t in (0.0, 0.5, 1.0):
        x = label_w + span * t
        body.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 8}" stroke="#ddd"/>'
                    f'<text x="{x:.1f}" y="{top - 8}" text-anchor="middle" font-size="10">{t:.1f}</text>')
    for i, (label, mean, low, high, n) in enumerate(items):
        y = top + i * row_h + 12
        body.append(f'<text x="{label_w - 6}" y="{y + 4}" text-anchor="end">{_label(label)}</text>')
        if mean is None:
            body.append(f'<text x="{label_w}" y="{y + 4}" fill="#777">no explored requests</text>')
            continue
        body.append(f'<line x1="{label_w + span * low:.1f}" y1="{y}" x2="{label_w + span * high:.1f}" y2="{y}" '
                    f'stroke="{COLOURS[0]}" stroke-width="2"/>'
                    f'<circle cx="{label_w + span * mean:.1f}" cy="{y}" r="4" fill="{COLOURS[0]}"/>'
                    f'<text x="{label_w + span + 6}" y="{y + 4}">{mean:.3f} (n={n})</text>')
    return _svg(width, height, title, body)
