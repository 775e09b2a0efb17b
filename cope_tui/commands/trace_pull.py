"""`cope trace pull REPO[/FILE]`: fetch a published routing trace from the Hugging Face Hub.

    cope trace pull org/name[/FILE] [--model ID] [--sha256 HEX] [--out FILE] [--repo-type dataset|model]
    cope trace pull --list [--model ID]      the index's entries ("unverified" until downloaded once)
    cope trace pull --verify-index [--index FILE]   (maintainers, with network) pin the index
    cope trace pull --imatrix REPO[/FILE]    a GGUF repo's imatrix files, or one downloaded and read
    cope trace pull --list --imatrix --model ID   where the imatrix index says a model's are published

Says which file it downloads and how large before it starts; downloads it with
huggingface_hub (its cache, offline mode and token apply), checks its sha256 (--sha256,
else the curated index's, when either gives one) and refuses a mismatch, converts it
(any format engine/traces reads) to COPE's format and writes it to --out or the trace
cache (`<cache>/traces/<model>-<org>--<name>--<file>.cope.npz`), where `cope advise`
finds it. The path goes to stdout, narration to stderr.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.exit_codes import EXIT_INPUT, EXIT_OK
from cope_tui.sources import hub_imatrix
from cope_tui.sources.hub_trace import (
    check_revision,
    entries_for,
    entry_label,
    load_index,
    plan_pull,
    pull_command,
    pull_trace,
    split_spec,
)
from cope_tui.sources.resolve import resolve_model
from cope_tui.sources.trace_index_verify import verify_index
from engine.core.errors import CopeInputError
from engine.core.user_paths import output_path
from engine.traces.trace_card import trace_shape


def register(sub: argparse._SubParsersAction) -> None:
    pull = sub.add_parser("pull", help="download a published routing trace from the Hugging Face Hub")
    pull.add_argument("spec", metavar="REPO[/FILE]", nargs="?",
                      help="dataset repo id org/name, optionally /path/to/file")
    pull.add_argument("--model", metavar="ID", help="the model the trace is from (catalog id, repo id or path); "
                      "default: the one the trace index names")
    pull.add_argument("--sha256", metavar="HEX", help="expected sha256 of the file (default: the index's, if any)")
    pull.add_argument("--out", metavar="FILE", help="where to write the trace (default: the trace cache)")
    pull.add_argument("--repo-type", choices=("dataset", "model"), default=None,
                      help="kind of Hub repo (default dataset; model with --imatrix)")
    pull.add_argument("--revision", metavar="REV", help="branch, tag or commit (default main)")
    pull.add_argument("--list", action="store_true", help="list the trace index's entries (for --model: the ones "
                      "COPE can pull for it) and stop")
    pull.add_argument("--verify-index", action="store_true", help="maintainers: download every readable index "
                      "entry, check it parses, pin its sha256 and size, and rewrite the index (needs network)")
    pull.add_argument("--imatrix", action="store_true", help="a llama.cpp imatrix instead: REPO lists the imatrix "
                      "files of a GGUF repo, REPO/FILE downloads one and reads its per-expert counts (for "
                      "--profile-trace); with --list --model ID, where the imatrix index says they are published")
    pull.add_argument("--index", metavar="FILE", help="the index --verify-index rewrites (default: the shipped one)")
    pull.set_defaults(run=run)


def _say(message: str) -> None:
    print(f"cope: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.imatrix:
        return _imatrix(args)
    if args.verify_index or args.list:
        if args.spec is not None:
            raise CopeInputError("--verify-index and --list take no REPO: they work on the whole index")
        return _verify(args) if args.verify_index else _list(args)
    if args.spec is None:
        raise CopeInputError("`cope trace pull` needs REPO[/FILE] (or --list, or --verify-index)")
    if args.out:
        args.out = str(output_path(args.out, flag="--out"))  # before the download, not after it
    plan = plan_pull(args.spec, repo_type=args.repo_type or "dataset", revision=args.revision)
    result = pull_trace(args.spec, model=args.model, sha256=args.sha256, out=args.out, plan=plan, log=_say)
    trace = result.trace
    for note in trace.meta.notes:
        print(f"cope: note: {note}", file=sys.stderr)
    print(f"cope: wrote {trace_shape(trace)} of {trace.meta.model or 'an unnamed model'} to {result.path}",
          file=sys.stderr)
    print(result.path)
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    if args.model:
        model_id = resolve_model(args.model).id
        matches = entries_for(model_id)
        if not matches:
            _say(f"the trace index offers no published trace of {args.model} or of its shape")
            _point_at_imatrix(model_id)
        for m in matches:
            print(f"{entry_label(m)}\t{m.entry.format}\t{pull_hint(m.entry, model_id)}")
        return EXIT_OK
    for e in load_index():
        state = "" if e.verified else " unverified"
        readable = e.format if e.readable else f"{e.format} (not readable: the card does not state the file format)"
        fits = f"\tsame shape as {', '.join(e.shape_fits)}" if e.shape_fits else ""
        print(f"{e.repo_id}{state}\t{readable}\t{e.model or e.model_in_card or '?'}{fits}")
    return EXIT_OK


def _point_at_imatrix(model_id: str) -> None:
    """Without a trace, a published imatrix is the next best routing statistic: say where."""
    entries = hub_imatrix.imatrix_entries_for(model_id)
    if entries:
        _say(f"the imatrix index lists {len(entries)} place{'s' if len(entries) > 1 else ''} for imatrix files of "
             f"{model_id} ({_seen_words(entries)}; expert popularity, no routing order): "
             f"cope trace pull --list --imatrix --model {model_id}")


def _seen_words(entries) -> str:  # type: ignore[no-untyped-def]
    """How many entries were seen on a page (a file, or the repo alone) and how many follow a convention."""
    n = {kind: sum(e.seen == kind for e in entries) for kind in ("file", "repo", "none")}
    return (f"{n['file']} file{'s' if n['file'] != 1 else ''} and {n['repo']} repo{'s' if n['repo'] != 1 else ''} "
            f"seen on a page, {n['none']} by quantizers' naming conventions")


def _imatrix(args: argparse.Namespace) -> int:
    """`--imatrix`: the index's imatrix repos of a model (--list --model), the imatrix files
    of a repo (REPO) or one downloaded and read (REPO/FILE): its local path on stdout."""
    if args.verify_index or args.out or args.sha256:
        raise CopeInputError("--imatrix takes REPO[/FILE] or --list --model ID (the Hub cache keeps the file and "
                             "checks its hash; --out, --sha256 and --verify-index are for traces)")
    if args.list:
        if args.spec is not None or not args.model:
            raise CopeInputError("--imatrix --list needs --model ID and no REPO")
        return _list_imatrix(resolve_model(args.model).id)
    if args.spec is None:
        raise CopeInputError("`cope trace pull --imatrix` needs REPO[/FILE] (or --list --model ID)")
    check_revision(args.revision)
    repo_type = args.repo_type or "model"
    repo_id, filename = split_spec(args.spec)
    if filename is None:
        for name in hub_imatrix.list_imatrix_files(repo_id, repo_type=repo_type, revision=args.revision):
            print(f"{repo_id}/{name}")
        return EXIT_OK
    local, counts = hub_imatrix.pull_imatrix(repo_id, filename, repo_type=repo_type, revision=args.revision,
                                             log=_say)
    _say(f"{repo_id}/{filename}: per-expert counts of {hub_imatrix.describe_counts(counts)}; recorded as verified; "
         "give it to cope advise with --profile-trace")
    print(local)
    return EXIT_OK


def _list_imatrix(model_id: str) -> int:
    """One line per index entry of the model: where, verified (by the user's own downloads,
    with the sha256) or unverified, the format expected or found, and where the entry comes
    from (seen on a page, or a quantizer's naming convention)."""
    states = hub_imatrix.entry_states(model_id)
    if not states:
        _say(f"the imatrix index names no published imatrix of {model_id} (cope trace pull --imatrix REPO "
             "lists a GGUF repo's)")
    for st in states:
        print(f"{st.entry.where}\t{st.words()}\t{st.entry.basis()}")
        if not st.entry.file:  # what was downloaded from that repo, named
            for d in st.downloads:
                print(f"  {d.repo_id}/{d.file}\tverified {d.verified_at[:10]} sha256 {d.sha256[:12]}")
    if states:
        _say(f"{len(states)} entries for {model_id}: {_seen_words([st.entry for st in states])}, "
             f"{sum(st.verified for st in states)} verified here; download one with "
             "cope trace pull --imatrix REPO/FILE (REPO alone lists its imatrix files)")
    return EXIT_OK


def pull_hint(entry, model_id: str) -> str:
    return pull_command(entry, model_id)


def _verify(args: argparse.Namespace) -> int:
    checks = verify_index(args.index, log=_say)
    for c in checks:
        print(f"{c.repo_id}\t{c.outcome}\t{c.detail}")
    failed = [c for c in checks if c.outcome == "failed"]
    _say(f"{sum(c.outcome == 'verified' for c in checks)} verified, {len(failed)} failed, "
         f"{sum(c.outcome == 'skipped' for c in checks)} skipped (format not read); index rewritten")
    return EXIT_OK if not failed else EXIT_INPUT
