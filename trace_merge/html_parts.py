"""HTML pieces of the report and the Darshan view: tables, key-value lists and embedded figures (self-contained:
figures are PNGs in ``data:`` URIs)."""
from __future__ import annotations

import base64
import html
import io
import json
import logging
from typing import TYPE_CHECKING, Any

import pandas as pd

from trace_merge.formatting import cell

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)


def png(fig: "Figure") -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def table(df: pd.DataFrame, max_rows: int = 200) -> str:
    if not len(df):
        return "<p><i>no data</i></p>"
    shown = df.head(max_rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    cols = [str(c) for c in shown.columns]
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell(v, c))}</td>" for c, v in zip(cols, row)) + "</tr>"
        for row in shown.itertuples(index=False))
    more = f"<p><i>{len(df) - max_rows} more rows not shown</i></p>" if len(df) > max_rows else ""
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>{more}'


def key_values(d: dict[str, Any]) -> str:
    if not d:
        return "<p><i>none</i></p>"
    def text(k: Any, v: Any) -> str:
        return json.dumps(v, default=str) if isinstance(v, (dict, list)) else cell(v, str(k))

    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(text(k, v))}</td></tr>" for k, v in d.items())
    return f'<table class="kv">{rows}</table>'


def figure(title: str, make) -> str:
    try:
        fig = make()
    except Exception as exc:  # a figure that cannot be drawn must not cost the user the whole report
        logger.warning("report: figure %r not drawn: %s", title, exc)
        return f'<p class="warn">{html.escape(title)}: not drawn ({html.escape(str(exc))})</p>'
    return f'<img alt="{html.escape(title)}" src="data:image/png;base64,{png(fig)}">'
