"""What to run: the ranking seen through the runtimes that can run it.

For every ranked candidate: which runtimes run it (exactly, approximately, why not) and
whether what each keeps in host memory fits RAM; candidates whose placements are the
same (every expert on the GPU, or none) are grouped, since residency and execution do
not matter then. From that:
- run_now: the fastest candidate an installed runtime runs exactly and that fits RAM
  (else the fastest stock llama.cpp runs, flagged as not installed);
- best_overall: the fastest candidate any runtime runs exactly and that fits RAM.
A candidate that fits no runtime's RAM is never recommended. "Fastest" is by decode
(TPOT, the Recommendation's order), or with a workload by request time (TTFT + N x
TPOT, the WorkloadRanking's order): `pick_order` is the one place that says which, and
both picks, the speedup line and every front end's run-now row follow it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Mapping

from engine.advice.advise import Recommendation
from engine.advice.workload import export_with_batch
from engine.cost.estimate import Estimate
from engine.llamacpp.builds import LlamaBuild
from engine.replays.policy import Kind
from engine.runtimes import REGISTRY, STOCK_NAME, Placement, Support, placement_of
from engine.runtimes.export import ExportPlan, export_for, plan_from_recommendation
from engine.runtimes.host import HostChoice, host_choice
from engine.runtimes.llamacpp import llama_shape

if TYPE_CHECKING:
    from engine.runtimes.export import Export
    from engine.advice.workload import WorkloadRanking

ALL_GPU_GROUP = "everything fits on the GPU, so residency and execution do not matter"
ALL_CPU_GROUP = "no expert slots: every routed expert runs on the CPU whatever the policy"


@dataclass(frozen=True)
class RuntimeRun:
    support: Support
    host: HostChoice | None  # None when the runtime does not run the candidate

    @property
    def fits(self) -> bool:
        return self.host is not None and self.host.fits

    @property
    def runs_exactly(self) -> bool:
        return self.support.exact and self.fits

    def to_dict(self) -> dict:
        # by hand: the support's line with the host's fit added to it
        out = self.support.to_dict()
        if self.host is not None:
            out["fits_ram"] = self.host.fits
            out["mmap"] = self.host.mapped
            if self.host.note:
                out["note"] += f"; {self.host.note}"
        return out


@dataclass(frozen=True)
class CandidateRuns:
    estimate: Estimate
    placement: Placement
    runs: tuple[RuntimeRun, ...]  # every runtime that runs it (exactly or approximately), registry order
    label: str  # llama.cpp: runs-on-stock | needs-fork | not-expressible
    same_as: str | None = None  # identical placement: the id of the row that stands for the group
    group_size: int = 1  # rows this one stands for (itself included)
    group_note: str = ""

    @property
    def id(self) -> str:
        return self.estimate.candidate.id

    def run_on(self, runtime: str) -> RuntimeRun | None:
        return next((r for r in self.runs if r.support.runtime == runtime), None)

    def exact_runtimes(self) -> list[str]:
        """Runtimes that run it exactly and whose host memory fits RAM, registry order."""
        return [r.support.runtime for r in self.runs if r.runs_exactly]

    def approximate_runtimes(self) -> list[str]:
        """Runtimes that run it approximately and whose host memory fits RAM, registry order."""
        return [r.support.runtime for r in self.runs if not r.support.exact and r.fits]

    @property
    def who_runs_it(self) -> str:
        """Which runtime it needs, in words: "runs on stock llama.cpp", "approximately on
        SGLang + kt-kernel", "no runtime runs it yet", or that it does not fit in RAM."""
        if self.ram_refused:
            return "does not fit in RAM"
        title = {r.info.name: r.info.title for r in REGISTRY}
        exact = [title[name] for name in self.exact_runtimes()]
        if exact:
            return "runs on " + ", ".join(exact)
        approx = [title[name] for name in self.approximate_runtimes()]
        return "approximately on " + ", ".join(approx) if approx else "no runtime runs it yet"

    @property
    def ram_refused(self) -> str | None:
        """Why it is never recommended for RAM: no runtime that runs it (exactly or
        approximately) has the RAM it needs."""
        if self.runs and not any(r.fits for r in self.runs):
            return self.runs[0].host.note  # type: ignore[union-attr]
        return None


@dataclass(frozen=True)
class RunPick:
    row: CandidateRuns
    runtime: str
    installed: bool

    @property
    def estimate(self) -> Estimate:
        return self.row.estimate

    @property
    def host(self) -> HostChoice:
        run = self.row.run_on(self.runtime)
        assert run is not None and run.host is not None
        return run.host


@dataclass(frozen=True)
class RunAdvice:
    rows: tuple[CandidateRuns, ...]  # ranked like the Recommendation (decode)
    run_now: RunPick | None
    best_overall: RunPick | None
    installed: tuple[str, ...]
    plan: ExportPlan
    ranking: "WorkloadRanking | None" = None  # with a workload: the picks follow its request times
    builds: Mapping[str, LlamaBuild] = field(default_factory=dict)  # found here: what commands are spelled for
    side_dir: str | None = None  # where the picks' artefacts are written (their paths in argv)

    def row(self, candidate_id: str) -> CandidateRuns:
        return next(r for r in self.rows if r.id == candidate_id)

    def shown(self) -> list[CandidateRuns]:
        """One row for each group of identical placements."""
        return [r for r in self.rows if r.same_as is None]

    def seconds(self, row: CandidateRuns) -> float:
        """What the picks are ordered by: the request time with a workload, else TPOT."""
        if self.ranking is None:
            return row.estimate.tpot_s
        priced = self.ranking.of(row.id)
        assert priced is not None, f"{row.id} is not in the workload ranking"
        return priced.request_s

    @property
    def speedup_elsewhere(self) -> float | None:
        """How much faster best_overall is than run_now when it needs another runtime."""
        now, best = self.run_now, self.best_overall
        if best is None or now is None or best.row is now.row:
            return None
        if self.seconds(best.row) >= self.seconds(now.row):
            return None
        return self.seconds(now.row) / self.seconds(best.row)

    def export(self, rec: Recommendation, pick: RunPick, **kw) -> "Export":  # type: ignore[no-untyped-def]
        """The command of a pick on its runtime, spelled for the builds found here, with the
        -b/-ub a workload chose for it (`compose_export` keywords pass through)."""
        return compose_export(rec, pick.estimate, runtime=pick.runtime, ranking=self.ranking,
                              **{"builds": self.builds, "side_dir": self.side_dir, **kw})

    def picks(self) -> tuple[RunPick, ...]:
        """run_now and best_overall, each once."""
        found = [p for p in (self.run_now, self.best_overall) if p is not None]
        return tuple(p for i, p in enumerate(found) if all(p is not q for q in found[:i]))


def pick_order(rows: Iterable[CandidateRuns], ranking: "WorkloadRanking | None") -> list[CandidateRuns]:
    """The order run_now and best_overall are picked in: the Recommendation's (decode), or
    with a workload the ranking's (request time; engine.advice.workload.rank_workload sorts it)."""
    rows = list(rows)
    if ranking is None:
        return rows
    position = {w.candidate_id: i for i, w in enumerate(ranking.estimates)}
    missing = [r.id for r in rows if r.id not in position]
    if missing:
        raise ValueError(f"the workload ranking is of another recommendation: it lacks {', '.join(missing[:3])}")
    return sorted(rows, key=lambda r: position[r.id])


def _group_of(placement: Placement) -> str | None:
    if placement.all_on_gpu:
        return ALL_GPU_GROUP
    if placement.all_on_cpu and placement.layout.value == "layers":
        return ALL_CPU_GROUP
    return None


def _row(estimate: Estimate, rec: Recommendation, plan: ExportPlan) -> CandidateRuns:
    model = rec.request.model
    candidate = estimate.candidate
    placement = placement_of(candidate, model, plan.memory, plan.popularity)
    runs = []
    for runtime in REGISTRY:
        support = runtime.support(candidate, placement, model, plan)
        if support.runs:
            runs.append(RuntimeRun(support, host_choice(runtime, candidate, placement, model, plan)))
    return CandidateRuns(estimate, placement, tuple(runs), llama_shape(candidate, placement, model).label)


def _grouped(rows: list[CandidateRuns]) -> list[CandidateRuns]:
    members: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        group = _group_of(row.placement)
        if group is not None:
            members.setdefault(group, []).append(i)
    out = list(rows)
    for note, idx in members.items():
        if len(idx) < 2:
            continue
        # The standalone candidate names the group (all-gpu, all-cpu); else the fastest member.
        lead = next((i for i in idx if rows[i].estimate.candidate.kind is not Kind.MATRIX), idx[0])
        for i in idx:
            out[i] = replace(rows[i], same_as=None if i == lead else rows[lead].id,
                             group_size=len(idx) if i == lead else 1, group_note=note)
    return out


def _pick(rows: Iterable[CandidateRuns], allowed: Iterable[str], installed: set[str]) -> RunPick | None:
    allowed = list(allowed)
    for row in rows:
        if row.same_as is not None:
            continue
        ok = [name for name in row.exact_runtimes() if name in allowed]
        if ok:
            chosen = next((n for n in ok if n in installed), ok[0])
            return RunPick(row, chosen, chosen in installed)
    return None


def plan_runs(rec: Recommendation, installed: Iterable[str] = (),
              ranking: "WorkloadRanking | None" = None, builds: Mapping[str, LlamaBuild] | None = None) -> RunAdvice:
    """`ranking`: a workload's ranking of `rec` (engine.advice.workload.rank_workload); the picks
    then follow request time instead of decode. `builds`: the runtimes' builds found here
    (their commands are spelled for them)."""
    plan = plan_from_recommendation(rec)
    installed_set = set(installed)
    rows = _grouped([_row(e, rec, plan) for e in rec.estimates])
    order = pick_order(rows, ranking)
    names = [r.info.name for r in REGISTRY]
    run_now = _pick(order, [n for n in names if n in installed_set], installed_set)
    if run_now is None:
        run_now = _pick(order, [STOCK_NAME], installed_set)
    best = _pick(order, names, installed_set)
    return RunAdvice(tuple(rows), run_now, best, tuple(n for n in names if n in installed_set), plan, ranking,
                     dict(builds or {}))


def who_runs(rec: Recommendation, estimate: Estimate) -> str:
    """Which runtime one of `rec`'s candidates needs, in words (CandidateRuns.who_runs_it)."""
    return _row(estimate, rec, plan_from_recommendation(rec)).who_runs_it


def compose_export(rec: Recommendation, target, *, ranking: "WorkloadRanking | None" = None,  # type: ignore[no-untyped-def]
                   runtime: str = STOCK_NAME, binary: str | None = None, model_path: str | None = None,
                   side_dir: str | None = None, hf_model: str | None = None,
                   builds: Mapping[str, LlamaBuild] | None = None) -> "Export":
    """The one composition of an export (issue 29): the command of `target` (an Estimate
    or Candidate of `rec`) on `runtime`, through the runtime registry
    (engine.runtimes.export.export_for: its artefacts, the fork's CSV and kt-kernel's
    counts, named under `side_dir`; the GGUF as `model_path`, else as the model was read),
    spelled for `builds`, and with a workload's `ranking` the -b/-ub it chose for what the
    command runs. The JSON report's picks, and every front end through
    cope_tui/service/export.py, compose exports here."""
    export = export_for(rec, target, runtime=runtime, binary=binary, model_path=model_path, side_dir=side_dir,
                        hf_model=hf_model, builds=builds)
    return export if ranking is None else export_with_batch(export, ranking)


def pick_to_dict(pick: RunPick | None, export,  # type: ignore[no-untyped-def]
                 ranking: "WorkloadRanking | None" = None) -> dict | None:
    if pick is None:
        return None
    e = pick.estimate
    priced = ranking.of(e.candidate.id) if ranking is not None else None
    request = {} if priced is None else {"request_s": priced.request_s, "ttft_s": priced.prefill.ttft_s,
                                         "prompt_tokens_per_s": priced.prefill.tokens_per_s,
                                         "ubatch": priced.prefill.ubatch, "batch": priced.prefill.batch}
    return {
        "candidate": e.candidate.id,
        "runtime": pick.runtime,
        "installed": pick.installed,
        **request,
        "tpot_s": e.tpot_s,
        "tokens_per_s": e.tokens_per_s,
        "vram_used_bytes": e.vram_used_bytes,
        "ram_used_bytes": pick.host.fit.need_bytes,
        "mmap": pick.host.mapped,
        "argv": list(export.argv),
        "env": dict(export.env),
        "command": export.display(),
        "artefacts": export.artefact_names,
        "placeholders": [p.to_dict() for p in export.placeholders],
        "notes": list(export.notes),
    }
