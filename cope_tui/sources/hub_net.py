"""Whether the Hugging Face Hub answers, asked once and quickly, before huggingface_hub is.

huggingface_hub retries a failed request with backoff (five retries, up to a minute
each when the server does not answer) and logs every retry as a warning: with no network,
`cope trace pull` or `--model org/repo` took 26 s to two minutes and printed a page of
"Retrying in 1s". One request to the endpoint's root with a short timeout says whether the
Hub is there; when it is not, COPE uses the Hub cache or fails with one line. The
check goes through huggingface_hub's own HTTP client (its proxies, certificates and
headers). HF_HUB_OFFLINE=1 skips the network altogether (the callers check it first).
"""

from __future__ import annotations

import time

from cope_tui.sources.hub_policy import no_agent_registry

REACH_TIMEOUT_S = 3.0  # connect and read: the Hub answers its root in well under a second
_ASKED: dict[str, tuple[float, str | None]] = {}  # endpoint -> (when, why not reached)
_REMEMBER_S = 30.0  # one command asks once; the app asks again after a while


def quiet_hub_logging() -> None:
    """huggingface_hub's retry warnings are not for COPE's users: errors reach them as one line."""
    try:
        from huggingface_hub.utils import logging as hf_logging  # noqa: PLC0415

        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        pass


def unreachable(endpoint: str) -> str | None:
    """Why the Hub at `endpoint` cannot be reached (None: it answered, any HTTP status)."""
    quiet_hub_logging()
    when, why = _ASKED.get(endpoint, (-_REMEMBER_S, None))
    if time.monotonic() - when < _REMEMBER_S:
        return why
    why = _ask(endpoint)
    _ASKED[endpoint] = (time.monotonic(), why)
    # huggingface_hub's agent registry is never fetched (a 3 s wait with no network, and a
    # crash in every call when the Hub answers it with the wrong shape): hub_policy.py
    no_agent_registry()
    return why


def _ask(endpoint: str) -> str | None:
    import httpx2  # noqa: PLC0415 - huggingface_hub's HTTP client
    from huggingface_hub.utils import get_session  # noqa: PLC0415

    try:
        get_session().head(endpoint.rstrip("/") + "/", timeout=httpx2.Timeout(REACH_TIMEOUT_S),
                           follow_redirects=False)
    except httpx2.TimeoutException:
        _drop_session()  # its connection hangs: closing it at exit would wait again
        return f"no answer within {REACH_TIMEOUT_S:g} s"
    except (httpx2.HTTPError, OSError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return text if len(text) <= 120 else text[:117] + "..."
    return None


def _drop_session() -> None:
    from huggingface_hub.utils import _http  # noqa: PLC0415

    client, _http._GLOBAL_CLIENT = _http._GLOBAL_CLIENT, None  # the next request opens a fresh one
    del client  # not closed: a graceful close of the hung connection is what would wait
