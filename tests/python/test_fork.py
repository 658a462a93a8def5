"""A process that forks while other threads write to a CSTrie: every child can build and use
a trie of its own and exit. The CSTrie's map nodes come from a pool whose depot threads share
(`src/cstrie/hamt/pool.rs`); a fork taken while another thread is inside a depot operation
would leave the child's copy of the depot half-written, and the child's next take from it
would wait forever for a thread that does not exist there."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import topicmatch as tm

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

#: Forks per test, and how long one child may take before it counts as hung.
FORKS = 60
CHILD_DEADLINE_S = 20.0


def _churn(m, stop: threading.Event, k: int) -> None:
    """Writes that allocate and free map nodes in bulk: wide levels subscribed and removed,
    so that threads hand surplus blocks to the depot and take them back."""
    words = [f"t{k}-{i}" for i in range(3000)]
    while not stop.is_set():
        m.subscribe_many((f"a/{w}/{j}", f"s{k}") for w in words for j in range(2))
        m.remove_subscriber(f"s{k}")


def _child() -> int:
    """What a forked child does: build a trie of its own, write, read, and say if it agreed."""
    m = tm.CSTrie("mqtt", [(f"x/{i}/+", i) for i in range(2000)])
    for i in range(2000):
        m.unsubscribe(f"x/{i}/+", i)
    m.subscribe("x/#", "all")
    return 0 if m.lookup("x/1/y") == ["all"] and len(m) == 1 else 1


def _wait(pid: int, deadline_s: float) -> int | None:
    """The child's exit status, or None if it is still running at the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.005)
    return None


def test_children_forked_beside_writing_threads_never_hang():
    m = tm.CSTrie("mqtt")
    stop = threading.Event()
    threads = [threading.Thread(target=_churn, args=(m, stop, k)) for k in range(2)]
    for t in threads:
        t.start()
    hung = failed = 0
    try:
        time.sleep(0.2)
        for _ in range(FORKS):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child leaves through _exit
                code = 1
                try:
                    code = _child()
                finally:
                    os._exit(code)
            status = _wait(pid, CHILD_DEADLINE_S)
            if status is None:
                hung += 1
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            elif not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                failed += 1
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert hung == 0, f"{hung} of {FORKS} children hung"
    assert failed == 0, f"{failed} of {FORKS} children failed"
