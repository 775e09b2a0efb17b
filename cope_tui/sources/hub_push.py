"""`cope trace push REPO_ID`: publish a recorded trace as a Hugging Face Hub dataset.

The dataset holds `trace.cope.npz` (COPE's own format, what `cope trace pull REPO_ID`
reads back), `routing.csv` (the llama-moe-trace CSV of the same routing) and `README.md`
(a dataset card from the trace's metadata: engine/traces/trace_card.py). Uploaded with
huggingface_hub's `HfApi.create_repo` (exist_ok) and `upload_folder` (one commit) under
the user's token (HF_TOKEN or `hf auth login`; never a command-line flag). Every failure
is one CopeInputError naming the repo.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cope_tui.sources.hub_download import endpoint
from cope_tui.sources.hub_model import short_error
from cope_tui.sources.hub_policy import hub_call
from cope_tui.sources.hub_trace import split_spec
from engine.core.cache_dirs import cached_traces
from engine.core.errors import CopeInputError
from engine.models.catalog import model_label
from engine.traces import load_trace, write_llama_moe_trace_csv
from engine.traces.trace import RoutingTrace
from engine.traces.trace_card import CSV_FILE, TRACE_FILE, CardFacts, dataset_card

DEFAULT_LICENCE = "cc-by-4.0"

MIN_UPLOAD_BYTES_PER_S = 100_000  # an upload's share of the deadline: a slow uplink's rate (100 kB/s)


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    url: str
    commit: str
    files: tuple[str, ...]
    private: bool


def newest_recorded_trace(model: str) -> Path:
    """The newest trace `cope trace record` cached for `model` (recorded ones only: never re-publish a pull)."""
    for path in cached_traces(model_label(model)):
        try:
            if load_trace(path).meta.origin == "recorded":
                return path
        except CopeInputError:
            continue
    raise CopeInputError(f"no recorded trace of {model} in the trace cache: record one with `cope trace record "
                         f"--model {model}`, or name a file with --trace")


def _token() -> str:
    from huggingface_hub import get_token  # noqa: PLC0415

    token = get_token()
    if not token:
        raise CopeInputError("publishing needs a Hugging Face token with write access: run `hf auth login` or set "
                             "HF_TOKEN")
    return token


def _stage(trace: RoutingTrace, source: Path, folder: Path, facts: CardFacts) -> tuple[str, ...]:
    shutil.copyfile(source, folder / TRACE_FILE)
    write_llama_moe_trace_csv(trace, folder / CSV_FILE)
    (folder / "README.md").write_text(dataset_card(trace, facts), encoding="utf-8")
    return (TRACE_FILE, CSV_FILE, "README.md")


def push_trace(repo_id: str, trace_path: str | Path, *, private: bool = False, licence: str = DEFAULT_LICENCE,
               quantization: str | None = None, runtime: str | None = None, log=None) -> PushResult:
    """Publish the trace at `trace_path` to the dataset `repo_id` (created when missing)."""
    say = log or (lambda message: None)
    repo, extra = split_spec(repo_id)
    if extra is not None:
        raise CopeInputError("expected a dataset repo id org/name (no file part)", path=repo_id)
    trace = load_trace(trace_path)
    if trace.meta.origin != "recorded":
        raise CopeInputError(f"is a {trace.meta.origin} trace: `cope trace push` publishes traces you recorded "
                             "(cope trace record)", path=str(trace_path))
    facts = CardFacts(repo_id=repo, date=dt.datetime.now(dt.timezone.utc).date().isoformat(), licence=licence,
                      quantization=quantization, runtime=runtime)
    token = _token()

    from huggingface_hub import HfApi  # noqa: PLC0415

    where = endpoint()
    api = HfApi(endpoint=where, token=token)
    with tempfile.TemporaryDirectory(prefix="cope-push-") as tmp:
        files = _stage(trace, Path(trace_path), Path(tmp), facts)
        size = sum((Path(tmp) / name).stat().st_size for name in files)
        try:
            say(f"creating dataset {repo} ({'private' if private else 'public'}) on {where}")
            hub_call(f"{where}/api/repos/create", lambda: api.create_repo(repo, repo_type="dataset", private=private,
                                                                          exist_ok=True), where=repo, raw=True)
            say(f"uploading {', '.join(files)}")
            # the deadline (hub_policy), plus the upload's time at a slow uplink's MIN_UPLOAD_BYTES_PER_S
            info = hub_call(f"{where}/api/datasets/{repo}/commit/main", lambda: api.upload_folder(
                repo_id=repo, repo_type="dataset", folder_path=tmp,
                commit_message=f"COPE routing trace of {trace.meta.model or 'a model'}"),
                where=repo, raw=True, extra_s=size / MIN_UPLOAD_BYTES_PER_S)
        except CopeInputError:  # the deadline passed (hub_policy): its one line
            raise
        except Exception as exc:  # noqa: BLE001 - any client or network failure: one line naming the repo
            raise CopeInputError(f"publishing to the Hub at {where} failed: {short_error(exc)}", path=repo) from None
    return PushResult(repo_id=repo, url=str(info.repo_url) if getattr(info, "repo_url", None) else str(info),
                      commit=str(getattr(info, "oid", "")), files=files, private=private)
