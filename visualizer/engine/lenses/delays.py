"""The delays lens: seeded per-warp waits before loads, stores, atomics and barriers, so that races
show on a GPU (engine/instrument/delays.py has the pass and the draw). Only with a schedule seed: run
i's table is drawn from (seed, i) alone, so the pair names the perturbation and replays it;
launch.json's ``runs`` says each run's draw beside its schedule, and the sites it drew from."""

from __future__ import annotations

from visualizer.engine.lenses import Lens, register


@register
class Delays(Lens):
    name = "delays"
    help = (
        "with --runs and --seed: seeded per-warp delays before loads, stores, atomics and barriers "
        "(races made visible on a GPU; run i's delays are drawn from (seed, i))"
    )

    @classmethod
    def wanted(cls, request, backend_name):
        return super().wanted(request, backend_name) and request.schedule_seed is not None

    @classmethod
    def problem(cls, given, backend_name):
        if given.get("delays") and (given.get("runs") is None or given.get("seed") is None):
            return "--delays needs --runs N and --seed S (the delays are drawn from the seed)"
        return None

    def passes(self, kernel):
        from visualizer.engine.instrument.delays import DelayPass

        return (DelayPass(),)

    def built(self, infos, kernel):
        super().built(infos, kernel)
        self.sites = list(infos["delays"]["sites"])

    def buffers(self):
        from visualizer.engine.instrument.delays import DELAY, delay_table

        return {DELAY: delay_table(self.ctx.request.schedule_seed, 0, self.sites)[0]}

    def before_run(self, run, buffers):
        from visualizer.engine.instrument.delays import DELAY, delay_table

        buffers[DELAY] = delay_table(self.ctx.request.schedule_seed, run, self.sites)[0]

    def reply(self, reply, launch):
        from visualizer.engine.instrument.delays import delay_table

        runs = launch.get("runs")
        if runs is None:
            return
        for i, entry in enumerate(runs["schedules"]):
            entry.update(delay_table(runs["seed"], i, self.sites)[1])
        runs["delay_sites"] = [list(x) for x in self.sites]
