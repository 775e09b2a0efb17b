"""How COPE's compiled loops are compiled: numba's njit, releasing the GIL, with an on-disk
cache that is optional (a full disk or a file cut short turns it off and the loops compile in
memory, said once in a warning), and the inlined helpers the loops call.

Imported only by the loop modules (engine/replays/replay_kernels.py,
engine/replays/moe_cache_kernels.py), which only engine.replays.compiled loads, so importing
the rest of engine/ never imports numba.
"""

from __future__ import annotations

import os
import time
import warnings

import numba
from numba.core.caching import FunctionCache


class SparingCache(FunctionCache):
    """numba's on-disk cache of one function, optional: a save that fails (a full disk, a
    file-size limit, a folder gone read-only) or an entry that cannot be read back (a file
    cut short by a killed run) turns the cache off for this process, which then compiles in
    memory, said once in a warning, instead of failing the run."""

    def __init__(self, py_func) -> None:  # type: ignore[no-untyped-def]
        super().__init__(py_func)
        _sweep_numba_temps(self.cache_path)

    def save_overload(self, sig, data) -> None:  # type: ignore[no-untyped-def]
        try:
            super().save_overload(sig, data)
        except OSError as exc:
            self.disable()
            _say_once(f"cannot save compiled replay loops in {self.cache_path} ({exc.strerror or exc}): "
                      "compiling them in memory (they are compiled again next run)")

    def load_overload(self, sig, target_context):  # type: ignore[no-untyped-def]
        try:
            return super().load_overload(sig, target_context)
        except Exception as exc:  # noqa: BLE001 - numba's pickles cut short: EOFError, UnpicklingError, ...
            self.disable()
            _say_once(f"cannot read compiled replay loops from {self.cache_path} ({type(exc).__name__}): "
                      "compiling them in memory")
            return None


class KernelCacheWarning(UserWarning):
    """The compiled loops could not be cached on disk (they run, compiled in memory)."""


_SAID: set[str] = set()


def _say_once(text: str) -> None:
    if not _SAID:
        _SAID.add(text)
        warnings.warn(KernelCacheWarning(text), stacklevel=3)


STALE_NUMBA_TEMP_S = 600.0  # numba writes an entry in well under a second; older temps are a killed run's


def _sweep_numba_temps(folder: str) -> None:
    """Remove numba's temps ("<entry>.tmp.<hex>") that a killed run left: numba names them
    without a process id, so by age."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    now = time.time()
    for name in names:
        if ".tmp." not in name:
            continue
        path = os.path.join(folder, name)
        try:
            if now - os.stat(path).st_mtime > STALE_NUMBA_TEMP_S:
                os.unlink(path)
        except OSError:
            pass


def jit(fn):
    """numba.njit, releasing the GIL, with an on-disk cache where one can be written (and
    compiled in memory where none can: `SparingCache`)."""
    compiled = numba.njit(nogil=True)(fn)
    try:
        # what numba.njit(cache=True) does (Dispatcher.enable_caching), with the sparing cache
        compiled._cache = SparingCache(compiled.py_func)
    except (RuntimeError, OSError):  # "cannot cache function ...: no locator available for file ..."
        pass
    return compiled


def inline(fn):
    """A list operation the loops call: inlined into them by numba itself (`inline="always"`
    works on numba's IR), so the loops pay no call for it."""
    return numba.njit(inline="always")(fn)
