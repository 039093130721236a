"""A rank too big to hold whole, in time order window by window (:class:`RankWindows`): how the partitioned merge
reads a large rank's pieces (:func:`trace_merge.partitioned.merge_rank`, docs/measurements.md#engines)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge import align as A
from trace_merge.intervals import time_windows
from trace_merge.schema import FRAME_DTYPES, concat_column
from trace_merge.threads import ahead


def position_dtype(rows: int) -> type:
    """int32 positions among ``rows`` rows where they fit: the order is held while the windows are read."""
    return np.int32 if rows < np.iinfo(np.int32).max else np.int64


class RankWindows:
    """A rank's rows in time order, window by window, gathered from its pieces: the order is taken once from the
    pieces' starts and layers, the categories of every categorical column united once (each window has them all),
    and a window's rows read from the pieces it intersects."""

    def __init__(self, parts: "list[Callable[[str], pd.Series]]", columns: Sequence[str], rank: int, rows: int) -> None:
        self._parts = parts
        starts = [np.asarray(part("start_ns"), dtype=np.int64) for part in parts]
        self._offsets = np.cumsum([0] + [len(s) for s in starts])
        start = np.concatenate(starts)
        del starts
        layer = concat_column([part("layer") for part in parts], "layer")
        order: Optional[np.ndarray] = A.rows_time_order(start, layer)
        # int32 positions where they fit: the order is held while the windows are read
        # (docs/measurements.md#partitioned)
        self.order: np.ndarray = np.arange(start.size, dtype=position_dtype(start.size)) if order is None else \
            order.astype(position_dtype(start.size))
        del order
        self.cuts = time_windows(start[self.order], rows)
        #: :func:`~trace_merge.align.check_layer_overlap` of the rank (from its starts, ends and layers, not its rows)
        is_app = np.asarray(layer == "app")
        end = np.concatenate([np.asarray(part("end_ns"), dtype=np.int64)[is_app[a:b]]
                              for part, a, b in zip(parts, self._offsets, self._offsets[1:])])
        found = A.rank_layer_overlap(rank, start[is_app], end, start[~is_app], layer[~is_app])
        self.warnings = [found] if found else []
        del start, end, layer
        # the categories of every categorical column united in order of first appearance, as concat_column does,
        # from the pieces' own categories
        self._categories = {}
        for c in columns:
            if FRAME_DTYPES[c] == "category":
                united = None
                for part in parts:
                    cats = part(c).cat.categories
                    united = cats if united is None else united.append(cats[~cats.isin(united)])
                self._categories[c] = united

        self._held: dict = {}  # (piece, column) -> its values (:meth:`window`)

    def categories(self, column: str) -> pd.Index:
        return self._categories[column]

    def __call__(self, columns: Sequence[str]):
        return ahead(self.window(self.order[a:b], columns) for a, b in zip(self.cuts, self.cuts[1:]))

    def window(self, rows: np.ndarray, columns: Sequence[str]) -> pd.DataFrame:
        piece = np.searchsorted(self._offsets, rows, "right") - 1
        need = np.flatnonzero(np.bincount(piece)).tolist()  # the pieces it reads (no sort of its rows' pieces)
        local = np.zeros(len(self._offsets), dtype=np.int64)
        sizes = [self._offsets[j + 1] - self._offsets[j] for j in need]
        local[need] = np.cumsum([0] + sizes)[:-1] - self._offsets[need]  # row of the rank -> row of the pieces' concat
        at = rows + local[piece]
        # a piece's columns are kept while windows need it: windows in time order use the same few pieces in turn
        self._held = {(j, c): v for (j, c), v in self._held.items() if j in need and c in columns}
        out = {}
        for c in columns:
            cols = [self._held[j, c] if (j, c) in self._held else self._hold(j, c) for j in need]
            if c in self._categories:
                codes = cols[0] if len(cols) == 1 else np.concatenate(cols)
                out[c] = pd.Categorical.from_codes(codes[at], categories=self._categories[c])
            else:
                out[c] = concat_column(cols, c).take(at)
        return pd.DataFrame(out, columns=list(columns), copy=False)

    def _hold(self, j: int, column: str) -> Any:
        """Piece ``j``'s ``column``: the codes of the rank's categories for a categorical one."""
        col = self._parts[j](column)
        if column in self._categories:
            col = col.cat.set_categories(self._categories[column]).cat.codes.to_numpy()
        self._held[j, column] = col
        return col
