"""Leases under load, at a small scale: two live replicas (separate `datahunt serve` processes) on PostgreSQL,
CPU hogs, real offline campaigns; the same code as `benchmarks/lease_soak.py` runs at the full scale.

No live campaign is taken over and no finished one changes afterwards, however starved the replicas are; a
SIGKILLed replica's campaigns are taken over by the other within the lease time plus the sweep interval.
"""

from __future__ import annotations

import pytest

from benchmarks.lease_soak import soak

TTL_S = 6.0  # the default 30 s scaled down, as the original report's run was
CAMPAIGNS = 10


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(900)
def test_loaded_replicas_keep_their_leases_and_take_over_a_killed_ones() -> None:
    # Five campaigns on each replica of four slots: one waits for its turn, as the reported run's did.
    result = soak(campaigns=CAMPAIGNS, ttl_s=TTL_S, hogs=2, kill_campaigns=3, timeout_s=600)
    live, kill = result["live"], result["kill"]
    assert live["final"] == CAMPAIGNS, live
    assert (live["takeovers"], live["takeover_log_lines"], live["moved_to_the_other_replica"]) == (0, 0, 0), live
    assert live["finished_changed"] == 0 and not live["changed_after_final"], live
    assert kill["orphans"] >= 1 and kill["taken_over"] == kill["orphans"], kill
    assert kill["within_limit"] and kill["all_finished"], kill
