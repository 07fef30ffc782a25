"""Timing helpers and the shape of one measured figure.

Absolute times on shared machines drift by tens of percent within a minute, so every
figure is a ratio to a baseline measured in the same run on the same data: contestants
run interleaved, round by round, in rotating order, and a figure's ratio is the median of
the per-round ratios (each round's contestants ran moments apart, so drift cancels).
The garbage collector is collected before and disabled during each timed section, for
every contestant alike.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["OK", "MISSED", "INFO", "SKIPPED"]
Kind = Literal["throughput", "time", "size", "memory"]


@dataclass(frozen=True)
class Sizes:
    """How big a run is: `--quick` shrinks every workload for a smoke run."""

    quick: bool
    replay_events: int
    """Events in the conversation that replay, bytes and memory are measured on."""
    append_rounds: int
    """Interleaved rounds of the append figures (one response each)."""
    replay_rounds: int
    mapper_rounds: int
    mapper_responses: int
    """Responses' events encoded and decoded per mapper round."""
    warmup: int
    full: bool = False
    """`--full`: the sizes a figure allows only when asked (search growth at 1,000,000 items)."""

    @classmethod
    def for_run(cls, *, quick: bool, full: bool = False) -> Sizes:
        """The default sizes, the smoke-run sizes, or (`full`) the longest runs too."""
        if quick:
            return cls(True, 1_000, 30, 5, 9, 10, 2)
        return cls(False, 10_000, 200, 15, 101, 50, 5, full=full)


@dataclass
class Figure:
    """One row of the results table: ours against a named baseline, and the target."""

    figure: str
    """The foundation issue's figure number, e.g. `1a`."""
    title: str
    subject: str
    """What of ours was measured."""
    baseline: str
    """The named baseline it is compared to."""
    kind: Kind
    """`throughput`: baseline time / our time (higher is better); `time`, `size`,
    `memory`: ours / baseline (lower is better)."""
    subject_value: float | None = None
    baseline_value: float | None = None
    unit: str = "s"
    """Unit of the two absolute values: `s`, `B` or `B/event`."""
    ratio: float | None = None
    target: tuple[str, float] | None = None
    """(`>=` or `<=`, value), or None for an informative row."""
    status: Status = "INFO"
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def judge(self) -> Figure:
        """Set `status` from the ratio and the target."""
        if self.ratio is None:
            self.status = "SKIPPED"
        elif self.target is None:
            self.status = "INFO"
        else:
            op, value = self.target
            met = self.ratio >= value if op == ">=" else self.ratio <= value
            self.status = "OK" if met else "MISSED"
        return self


def skipped(
    figure: str, title: str, *, subject: str, baseline: str, kind: Kind, why: str
) -> Figure:
    """A row for a figure that could not be measured in this run."""
    return Figure(figure, title, subject, baseline, kind, status="SKIPPED", note=why)


@dataclass
class Timings:
    """Seconds per call of each contestant, one value per round."""

    rounds: dict[str, list[float]]

    def median(self, name: str) -> float:
        """The contestant's median seconds per call."""
        return statistics.median(self.rounds[name])

    def best(self, name: str) -> float:
        """The contestant's fastest round."""
        return min(self.rounds[name])

    def time_ratio(self, subject: str, baseline: str) -> float:
        """Median over rounds of subject time / baseline time (paired, so drift cancels)."""
        pairs = zip(self.rounds[subject], self.rounds[baseline], strict=True)
        return statistics.median(s / b for s, b in pairs)

    def throughput_ratio(self, subject: str, baseline: str) -> float:
        """Median over rounds of baseline time / subject time."""
        pairs = zip(self.rounds[subject], self.rounds[baseline], strict=True)
        return statistics.median(b / s for s, b in pairs)

    def summary(self) -> dict[str, dict[str, float]]:
        """Median and best per contestant, for the JSON output."""
        return {
            name: {"median_s": self.median(name), "best_s": self.best(name), "rounds": len(v)}
            for name, v in self.rounds.items()
        }


def timed(call: Callable[[], object], number: int = 1) -> float:
    """Seconds per call of `call` run `number` times, with the collector off."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            call()
        return (time.perf_counter() - start) / number
    finally:
        gc.enable()


def interleave(
    contestants: Mapping[str, Callable[[], object]],
    *,
    rounds: int,
    warmup: int,
    number: int = 1,
) -> Timings:
    """Run every contestant once per round, in an order that rotates from round to round.

    `warmup` untimed rounds come first (caches, statements, allocator arenas). Each
    timed section runs its contestant `number` times; a contestant that consumes a
    workload (appends) must be given one that lasts `(warmup + rounds) * number` calls.
    """
    names = list(contestants)
    for _ in range(warmup):
        for name in names:
            for _ in range(number):
                contestants[name]()
    results: dict[str, list[float]] = {name: [] for name in names}
    # Objects alive before the rounds (modules, workloads, stores) are moved out of the
    # collector's reach, so the collection before each timed section only walks garbage
    # of the rounds themselves: cheap, and the same for every contestant.
    gc.collect()
    gc.freeze()
    try:
        for i in range(rounds):
            shift = i % len(names)
            order = names[shift:] + names[:shift]
            if (i // len(names)) % 2:
                order.reverse()
            for name in order:
                results[name].append(timed(contestants[name], number))
    finally:
        gc.unfreeze()
    return Timings(results)


def format_value(value: float | None, unit: str) -> str:
    """A human reading of an absolute value."""
    if value is None:
        return "-"
    if unit == "s":
        for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if value >= scale:
                return f"{value / scale:.3g} {suffix}"
        return f"{value / 1e-9:.3g} ns"
    if unit == "B":
        for scale, suffix in ((2**20, "MiB"), (2**10, "KiB")):
            if value >= scale:
                return f"{value / scale:.3g} {suffix}"
        return f"{value:.0f} B"
    return f"{value:.4g} {unit}"


def render_table(figures: list[Figure]) -> str:
    """The results as one plain-text table, then each row's notes."""
    header = ("#", "figure", "ours", "baseline", "ratio", "target", "status")
    rows = []
    for f in figures:
        if f.ratio is None:
            ratio = "-"
        else:
            ratio = f"{f.ratio:.3f}x " + ("thr" if f.kind == "throughput" else f.kind)
        target = "-" if f.target is None else f"{f.target[0]} {f.target[1]:g}x"
        rows.append(
            (
                f.figure,
                f.title,
                format_value(f.subject_value, f.unit),
                format_value(f.baseline_value, f.unit),
                ratio,
                target,
                f.status,
            )
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*header), line.format(*("-" * w for w in widths))]
    out.extend(line.format(*r) for r in rows)
    out.append("")
    for f in figures:
        out.append(f"[{f.figure}] ours: {f.subject}  |  baseline: {f.baseline}")
        if f.note:
            out.append(f"     {f.note}")
    return "\n".join(out)
