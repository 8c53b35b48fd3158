"""`datahunt watch`'s own Prometheus metrics, so an existing Prometheus, Grafana and Alertmanager can use it.

One registry per watcher (never the process-wide default, so two watchers in one process do not collide),
served over HTTP by `prometheus_client`'s own server. Names start with `datahunt_watch_`; every gauge is the
rolling window's figure at the last interval, `datahunt_watch_alert{kind}` is 1 while that rule fires, and
`datahunt_watch_alerts_total{kind}` counts how often it started firing.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from inference.watch_rules import ALERT_KINDS, AlertKind, Expected, WindowStats


class WatchMetrics:
    """The gauges and counters of one watcher, in a registry of their own."""

    def __init__(self, server: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"server": server}
        names = ["server"]

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"datahunt_watch_{name}", doc, [*names, *extra], registry=self.registry)

        self.labels = labels
        self.up = gauge("up", "1 when the last reading of the server's counters succeeded.")
        self.accept_length = gauge("accept_length", "Acceptance length over the rolling window.")
        self.position_accept = gauge("position_accept", "P(position i accepted | positions before it were).",
                                     ("position",))
        self.tokens_per_second = gauge("tokens_per_second", "Tokens the engine generated per second (window).")
        self.window_rounds = gauge("window_rounds", "Verification rounds the window holds.")
        self.break_even = gauge("break_even_accept_length", "The acceptance length speculation must beat.")
        self.expected_speedup = gauge("expected_speedup", "Acceptance length over the break-even.")
        self.paying = gauge("paying", "1 when acceptance is above the break-even, 0 below (absent: unknown).")
        self.recorded_position0 = gauge("recorded_position0_accept", "The draft's recorded position-0 acceptance.")
        self.alert = gauge("alert", "1 while the rule fires.", ("kind",))
        self.alerts_total = Counter("datahunt_watch_alerts", "Times each rule started firing.", [*names, "kind"],
                                    registry=self.registry)
        self.restarts_total = Counter("datahunt_watch_server_restarts", "Server restarts seen (counters reset).",
                                      names, registry=self.registry)
        for kind in ALERT_KINDS:
            self.alert.labels(server=server, kind=kind).set(0)
            self.alerts_total.labels(server=server, kind=kind)
        self.restarts_total.labels(**labels)
        self.up.labels(**labels).set(0)

    def update(self, stats: WindowStats | None, expected: Expected, firing: set[AlertKind], paying: bool | None
               ) -> None:
        """Set every gauge from this interval's window and verdicts."""
        s = self.labels
        self.up.labels(**s).set(1)
        if expected.break_even is not None:
            self.break_even.labels(**s).set(expected.break_even)
        if expected.position0 is not None:
            self.recorded_position0.labels(**s).set(expected.position0)
        for kind in ALERT_KINDS:
            self.alert.labels(server=s["server"], kind=kind).set(1 if kind in firing else 0)
        if stats is None or stats.accept_length is None:
            return
        self.accept_length.labels(**s).set(stats.accept_length)
        self.window_rounds.labels(**s).set(stats.rounds)
        for i, rate in enumerate(stats.per_position):
            self.position_accept.labels(server=s["server"], position=str(i)).set(rate)
        if stats.tokens_per_s is not None:
            self.tokens_per_second.labels(**s).set(stats.tokens_per_s)
        if expected.break_even:
            self.expected_speedup.labels(**s).set(stats.accept_length / expected.break_even)
        if paying is not None:
            self.paying.labels(**s).set(1 if paying else 0)

    def fired(self, kind: AlertKind) -> None:
        """Count a rule that started firing."""
        self.alerts_total.labels(server=self.labels["server"], kind=kind).inc()

    def restarted(self) -> None:
        """Count a server restart."""
        self.restarts_total.labels(**self.labels).inc()

    def down(self) -> None:
        """The last reading failed."""
        self.up.labels(**self.labels).set(0)

    def serve(self, port: int, host: str = "127.0.0.1") -> Any:
        """Serve the metrics at http://host:port/metrics from a daemon thread; return the HTTP server (its
        `server_port` is the port taken, `shutdown()` stops it)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server
