"""Job metrics: one frozen record, rendered in the Prometheus text format.

A figure the running lowering cannot observe exactly is ``None`` — never a
guess. The native Spark lowering, for example, cannot tell on-time from late
events (Spark drops late rows after partial aggregation and counts groups,
not events), so those counts are ``None`` there.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["JobMetrics"]

_HELP = {
    "input_rows": ("counter", "Data rows read from the sources."),
    "batches": ("counter", "Micro-batches run."),
    "invalid_events": ("counter", "Rows without a valid event time (not windowed)."),
    "on_time_events": ("counter", "Events at or after the watermark when they arrived."),
    "mildly_late_events": ("counter", "Late events still added to a retained window."),
    "very_late_events": ("counter", "Late events dropped because all their windows had closed."),
    "future_events": ("counter", "Events further ahead of the watermark than the future tolerance."),
    "windows_emitted": ("counter", "Window results emitted."),
    "joined_rows": ("counter", "Rows a join emitted (its withdrawn rows are counted as retractions)."),
    "retractions": ("counter", "Retraction rows emitted."),
    "state_evictions": ("counter", "State entries evicted by TTL."),
    "watermark_ms": ("gauge", "Current overall watermark, epoch milliseconds."),
    "watermark_advances": ("counter", "Times the overall watermark advanced."),
    "state_windows": (
        "gauge",
        "Windows held in state (open, or retained for late events); a job keeping long sliding "
        "windows as panes counts its pane rows, a join the rows it holds.",
    ),
    "state_bytes": ("gauge", "Bytes of window state held by the stateful operator."),
    "arithmetic_errors": (
        "counter",
        "Values that became null because arithmetic had no defined result "
        "(integer overflow, division or remainder by zero, a value a cast cannot convert).",
    ),
    "quarantined_batches": ("counter", "Micro-batches set aside to the quarantine directory."),
    "quarantined_rows": ("counter", "Rows set aside to the quarantine directory."),
    "quarantined_files": ("counter", "Source files set aside to the quarantine directory, unreadable."),
}


@attrs.frozen(kw_only=True, repr=False)
class JobMetrics:
    """What a job has done so far. ``None`` means "this lowering cannot observe it".

    The rows out of a job are counted as what they are: window results in
    ``windows_emitted``, a join's rows in ``joined_rows`` (each is ``None``
    for a job whose output is not of its kind).

    ``watermark_ms`` is :data:`~krishiv_py.END_OF_TIME_MS` once every source
    has ended (:attr:`end_of_input`); displays spell it "end of input".
    """

    input_rows: int
    batches: int
    invalid_events: int | None
    on_time_events: int | None
    mildly_late_events: int | None
    very_late_events: int | None
    future_events: int | None
    windows_emitted: int | None
    retractions: int | None
    state_evictions: int | None
    watermark_ms: int | None
    watermark_advances: int
    #: Rows a join emitted (a job whose output is a join's rows; ``windows_emitted`` is None there).
    joined_rows: int | None = None
    state_windows: int | None = None
    state_bytes: int | None = None
    #: Values that became null because arithmetic had no defined result
    #: (docs/expressions.md "When arithmetic has no result").
    arithmetic_errors: int | None = None
    #: Micro-batches whose rows were set aside to the job's quarantine directory.
    quarantined_batches: int | None = None
    #: Rows set aside to the quarantine directory.
    quarantined_rows: int | None = None
    #: Source files a ``bad_files="quarantine"`` source could not read, set aside to the
    #: quarantine directory (``files/<source>/``, each with its reason).
    quarantined_files: int | None = None
    #: Each source's own watermark (without idle markers), by stream name.
    source_watermarks: Mapping[str, int] = attrs.field(factory=dict, hash=False)
    #: The sources idle now (left out of the overall watermark).
    idle_sources: frozenset[str] = frozenset()
    #: Each source's lag in force (ms): its fixed lag, or what its automatic lag chose
    #: (``watermark(column, "auto")``) for the next micro-batch.
    source_lags: Mapping[str, int] = attrs.field(factory=dict, hash=False)

    @property
    def end_of_input(self) -> bool:
        """True once the watermark is at the end of time: every source has ended."""
        from krishiv_py.plan.watermarks import END_OF_TIME_MS

        return self.watermark_ms is not None and self.watermark_ms >= END_OF_TIME_MS

    def _display_value(self, name: str) -> str:
        from krishiv_py._display import fmt_ms

        value = getattr(self, name)
        if name == "watermark_ms":
            return fmt_ms(value, missing="none yet")
        if name == "source_watermarks":
            idle = self.idle_sources
            return ", ".join(
                f"{s}: {fmt_ms(w)}{' (idle)' if s in idle else ''}" for s, w in sorted(value.items())
            )
        if name == "idle_sources":
            return ", ".join(sorted(value))
        return "n/a" if value is None else str(value)

    def __repr__(self) -> str:
        parts = []
        for field in attrs.fields(JobMetrics):
            value = getattr(self, field.name)
            if field.name in _PER_SOURCE:
                if value:
                    parts.append(f"{field.name}={dict(value) if isinstance(value, Mapping) else set(value)}")
                continue
            shown = str(value)
            if field.name == "watermark_ms" and value is not None:
                text = self._display_value(field.name)
                shown = f"<{text}>" if self.end_of_input else f"{value} ({text})"
            parts.append(f"{field.name}={shown}")
        return f"JobMetrics({', '.join(parts)})"

    def _repr_html_(self) -> str:
        from krishiv_py._display import html_card

        rows = [
            (f.name, self._display_value(f.name))
            for f in attrs.fields(JobMetrics)
            if (getattr(self, f.name) is not None or f.name == "watermark_ms")
            and not (f.name in _PER_SOURCE and not getattr(self, f.name))
        ]
        return html_card("krishiv_py JobMetrics", rows)

    def figures(self) -> dict[str, tuple[str, str, int]]:
        """Each figure this lowering observes: ``{name: (Prometheus type, help text, value)}``.

        ``None`` figures are left out; the per-source ones are :meth:`source_figures`.
        """
        out = {}
        for field in attrs.fields(JobMetrics):
            value = getattr(self, field.name)
            if value is not None and field.name not in _PER_SOURCE:
                kind, text = _HELP[field.name]
                out[field.name] = (kind, text, int(value))
        return out

    def source_figures(self) -> dict[str, tuple[str, dict[str, int]]]:
        """The per-source gauges: ``{name: (help text, {source: value})}`` (empty without sources)."""
        if not self.source_watermarks:
            return {}
        return {
            "source_watermark_ms": (
                "Watermark of each source, epoch milliseconds.",
                dict(self.source_watermarks),
            ),
            "source_idle": (
                "1 while the source is idle (left out of the overall watermark), else 0.",
                {s: int(s in self.idle_sources) for s in self.source_watermarks},
            ),
            **(
                {
                    "source_lag_ms": (
                        "Watermark lag of each source in force, milliseconds (an automatic lag: "
                        "the one it chose for the next micro-batch).",
                        dict(self.source_lags),
                    )
                }
                if self.source_lags
                else {}
            ),
        }

    def to_prometheus(self, *, job: str | None = None) -> str:
        """Render as Prometheus text exposition (``krishiv_window_<name>[_total]``).

        Figures that are ``None`` are left out rather than reported as zero.
        """
        label = f'{{job="{_escape(job)}"}}' if job else ""
        lines = []
        for name, (kind, text, value) in self.figures().items():
            metric = f"krishiv_window_{name}" + ("_total" if kind == "counter" else "")
            lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}", f"{metric}{label} {value}"]
        for metric, (text, values) in self.source_figures().items():
            name = f"krishiv_window_{metric}"
            lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
            for source, value in sorted(values.items()):
                labels = ([f'job="{_escape(job)}"'] if job else []) + [f'source="{_escape(source)}"']
                lines.append(f"{name}{{{','.join(labels)}}} {value}")
        return "\n".join(lines) + "\n"


#: Per-source figures: shown and exported with a ``source`` label, not as one value.
_PER_SOURCE = ("source_watermarks", "idle_sources", "source_lags")


def _escape(label: str) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
