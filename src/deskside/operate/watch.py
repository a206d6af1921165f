"""`deskside watch`: look at a running cluster every `survive.interval` seconds, keep the
series (the same as `deskside status` reads), and act on a wedge by the recipe's
recovery policy (`deskside.survive.recovery`): a diagnostic bundle first, then the
engines restarted, workers first. What it saw and did goes to `survive.json` in the head's
state folder, where `deskside status` and the head's exporter read it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from deskside.errors import DesksideError
from deskside.operate.restart import restart_engines
from deskside.operate.status import ClusterStatus, status
from deskside.operate.verdict import head_of, read_survive, write_survive
from deskside.recipe.survive import Survive
from deskside.records.recipes import load_run_recipe
from deskside.records.run import RunRecord, load_run
from deskside.records.survive import MAX_RESTARTS_KEPT, RestartRecord, SurviveRecord
from deskside.records.where import bundles_dir
from deskside.runtime.nodes import control_of, login_control, transports_of
from deskside.survive.classify import WEDGED
from deskside.survive.recovery import decide
from deskside.transport.base import Transport

Say = Callable[[str], None]
# run, folder, reason, the nodes' transports -> the bundle's path
BundleWriter = Callable[[RunRecord, Path, str, Mapping[str, Transport]], str]


class Watch:
    """One watcher of one run (see the module docstring). `bundle` writes the diagnostic
    bundle before a restart (`deskside node watch` hands it `deskside diagnose`'s); with
    None the recovery restarts without one."""

    def __init__(
        self,
        run_name: str,
        known_hosts: str | None = None,
        say: Say = lambda _m: None,
        bundle: BundleWriter | None = None,
        transports: Mapping[str, Transport] | None = None,
    ) -> None:
        self.run_name, self.known_hosts, self.say, self.bundle = run_name, known_hosts, say, bundle
        self.given = dict(transports or {})

    def _transports(self, run: RunRecord) -> dict[str, Transport]:
        return transports_of(run, self.known_hosts, self.given)

    def once(self) -> SurviveRecord | None:
        """One look, and the action it calls for. None when the run is gone."""
        run = load_run(self.run_name)
        if run is None:
            return None
        recipe = load_run_recipe(run)
        survive = recipe.survive if recipe is not None else Survive()
        ts = self._transports(run)
        head_t = ts[head_of(run).name]
        st = status(run, ts, recovery=False)
        now = time.time()
        before = read_survive(run, head_t)
        ours = before is not None and before.run_started_at == run.started_at
        restarts = list(before.restarts) if before is not None and ours else []
        since = None
        if st.cluster == WEDGED:
            was = before.wedged_since if before is not None and ours else None
            kept = was is not None and before is not None and before.state == WEDGED
            since = was if kept else now
        decision = decide(st.cluster, now, survive.recover, restarts, since)
        if decision.action == "restart":
            restarts.append(self._recover(run, ts, st, now))
        record = SurviveRecord(
            recipe=run.recipe_name,
            run_started_at=run.started_at,
            at=now,
            interval=survive.interval,
            state=st.cluster,
            reasons=st.reasons,
            suspects=st.suspects,
            stalled_seconds=st.stalled_seconds,
            wedged_since=None if decision.action == "restart" else since,
            recover=survive.recover.enabled,
            max_restarts=survive.recover.max_restarts,
            period=survive.recover.period,
            restarts=restarts[-MAX_RESTARTS_KEPT:],
            decision=decision.why if decision.action != "none" else "",
        )
        write_survive(run, head_t, record)
        return record

    def _recover(
        self, run: RunRecord, ts: Mapping[str, Transport], st: ClusterStatus, now: float
    ) -> RestartRecord:
        headline = st.reasons[0] if st.reasons else "wedged"
        for r in st.reasons:
            if r.startswith("wedged:"):
                headline = r
        self.say(f"{run.recipe_name}: {headline}")
        bundle = None
        recipe = load_run_recipe(run)
        want_bundle = recipe.survive.recover.bundle if recipe is not None else True
        if want_bundle and self.bundle is not None:
            try:
                bundle = self.bundle(run, bundles_dir(run.recipe_name), headline, ts)
                self.say(f"diagnostic bundle: {bundle}")
            except (DesksideError, OSError) as exc:
                self.say(f"the diagnostic bundle failed: {exc}")
        controls = {n.name: login_control(ts[n.name], control_of(run, n)) for n in run.nodes}
        try:
            done = restart_engines(run, ts, controls, self.say)
            ok = True
        except DesksideError as exc:
            done, ok = f"restart failed: {exc.message}", False
        self.say(done)
        return RestartRecord(
            at=now, reason=headline, suspects=st.suspects, bundle=bundle, ok=ok, detail=done
        )

    def run(self, interval: float | None = None, stop: Callable[[], bool] = lambda: False) -> None:
        """Look every `interval` seconds (default the recipe's) until the run is gone or
        `stop()` says so."""
        while not stop():
            t0 = time.monotonic()
            record = self.once()
            if record is None:
                return
            wait = interval if interval is not None else record.interval
            time.sleep(max(0.0, wait - (time.monotonic() - t0)))


__all__ = ["Watch", "read_survive"]
