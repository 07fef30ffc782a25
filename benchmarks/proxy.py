"""Figure 10: what `convstore proxy` adds to a provider's stream, recording it.

Three processes on the machine: a paced upstream (`paced_upstream`: an Anthropic stream,
its head and first event at once, then an event every 10 to 20 ms, each stamped with the
shared monotonic clock), `convstore proxy` in front of it recording into SQLite (WAL,
`synchronous=FULL`), and the client here (httpx). Each figure compares the proxied path
with a direct connection to the same upstream, in the same run, interleaved:

- 10a/10b: added time to first byte (request sent → first body byte), p50 and p99 over
  sequential requests; target: p99 ≤ 2 ms added;
- 10c/10d: added latency per SSE event (upstream's send stamp → arrival at the client),
  p50 and p99 over every event of sequential streams; targets: p50 ≤ 0.5 ms and
  p99 ≤ 2 ms added, shown beside the spread of two direct runs (what the measure's own
  noise is);
- 10e: throughput of 50 concurrent paced streams (wall time for all of them), direct /
  proxied; target >= 0.9x.

The added figures are absolute (milliseconds): their "ratio" column is proxied /
direct, their status judged on the added milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from benchmarks.common import Figure, Sizes

CONCURRENT = 50
_STAMP = re.compile(rb"t=(\d+) ")
REQUEST = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "stream": True,
    "messages": [{"role": "user", "content": "Benchmark question"}],
}


@contextmanager
def _process(argv: list[str], ready: str) -> Iterator[str]:
    """A child process, and the rest of its first stdout line after `ready`."""
    child = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith(ready):
            raise RuntimeError(f"{argv[2]} did not start: {line!r}")
        yield line[len(ready) :].strip()
    finally:
        child.terminate()
        child.wait(timeout=60)


def _one(http: httpx.Client, url: str, n: int) -> tuple[float, list[float]]:
    """(time to first byte, each event's latency) of one stream, in seconds."""
    body = {**REQUEST, "messages": [{"role": "user", "content": f"Benchmark question {n}"}]}
    started = time.perf_counter()
    first: float | None = None
    latencies: list[float] = []
    with http.stream("POST", url + "/v1/messages", json=body) as response:
        for chunk in response.iter_raw():
            arrived = time.monotonic_ns()
            if first is None:
                first = time.perf_counter() - started
            latencies.extend((arrived - int(s)) / 1e9 for s in _STAMP.findall(chunk))
    assert first is not None
    return first, latencies


async def _concurrent(url: str, streams: int) -> float:
    """Seconds for `streams` concurrent streams to end."""
    limits = httpx.Limits(max_connections=streams)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one(n: int) -> None:
            body = {**REQUEST, "messages": [{"role": "user", "content": f"Concurrent {n}"}]}
            async with client.stream("POST", url + "/v1/messages", json=body) as response:
                async for _ in response.aiter_raw():
                    pass

        started = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(streams)))
        return time.perf_counter() - started


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def proxy_figures(sizes: Sizes, folder: Path) -> list[Figure]:
    """Figures 10a to 10e."""
    events = 20 if sizes.quick else 50
    rounds = 10 if sizes.quick else 60
    throughput_rounds = 1 if sizes.quick else 3
    python = sys.executable
    with (
        _process([python, "-m", "benchmarks.paced_upstream", str(events)], "port ") as port,
        _process(
            [
                python,
                "-m",
                "convstore.adapters.cli",
                "--db",
                f"sqlite:///{folder / 'proxy.db'}",
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                f"anthropic=http://127.0.0.1:{port}",
            ],
            "convstore proxy listening on ",
        ) as proxy,
    ):
        direct = f"http://127.0.0.1:{port}"
        ttfb: dict[str, list[float]] = {"direct": [], "proxy": [], "direct2": []}
        latency: dict[str, list[float]] = {"direct": [], "proxy": [], "direct2": []}
        urls = {"direct": direct, "proxy": proxy, "direct2": direct}
        with httpx.Client(timeout=60) as http:
            for url in urls.values():  # warm up: connections, the proxy's first store work
                _one(http, url, -1)
            for i in range(rounds):
                names = list(urls)
                order = names[i % 3 :] + names[: i % 3]
                for name in order:
                    first, each = _one(http, urls[name], i)
                    ttfb[name].append(first)
                    latency[name].extend(each)
        walls: dict[str, list[float]] = {"direct": [], "proxy": []}
        for i in range(throughput_rounds):
            for name in ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct"):
                walls[name].append(asyncio.run(_concurrent(urls[name], CONCURRENT)))
    figures = [
        _added("10a", "added time to first byte, p50", ttfb, 0.5, None),
        _added("10b", "added time to first byte, p99", ttfb, 0.99, 2.0),
        _added("10c", "added latency per SSE event, p50", latency, 0.5, 0.5),
        _added("10d", "added latency per SSE event, p99", latency, 0.99, 2.0),
    ]
    ratios = [d / p for d, p in zip(walls["direct"], walls["proxy"], strict=True)]
    figures.append(
        Figure(
            "10e",
            f"throughput of {CONCURRENT} concurrent paced streams",
            f"{CONCURRENT} streams through convstore proxy, recorded",
            f"the same {CONCURRENT} streams straight to the upstream",
            "throughput",
            statistics.median(walls["proxy"]),
            statistics.median(walls["direct"]),
            ratio=statistics.median(ratios),
            target=(">=", 0.9),
            note=f"{events} events 10-20 ms apart per stream; median of {throughput_rounds} "
            "interleaved rounds (wall time for all streams)",
            extra={"walls": walls},
        ).judge()
    )
    return figures


def _added(
    figure: str, title: str, samples: dict[str, list[float]], q: float, target_ms: float | None
) -> Figure:
    direct, proxied, again = (_quantile(samples[n], q) for n in ("direct", "proxy", "direct2"))
    added_ms = (proxied - direct) * 1000
    spread_ms = abs(again - direct) * 1000
    row = Figure(
        figure,
        title,
        "convstore proxy, recording",
        "a direct connection to the same upstream",
        "time",
        proxied,
        direct,
        ratio=proxied / direct if direct else None,
        note=f"added {added_ms:.3f} ms (two direct runs differ by {spread_ms:.3f} ms)"
        + ("" if target_ms is None else f"; target: added <= {target_ms:g} ms")
        + f"; {len(samples['proxy'])} samples each",
        extra={"added_ms": added_ms, "direct_spread_ms": spread_ms},
    )
    if target_ms is not None:
        row.status = "OK" if added_ms <= target_ms else "MISSED"
    return row


__all__ = ["proxy_figures"]
