"""``kvsim.base.say_once``: each message said once a process; ``held_back`` silences only the
thread that holds it back, and marks nothing said."""

from __future__ import annotations

import logging
import threading

import pytest

from kvsim.base import say_once


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(say_once, "SAID", set())


@pytest.mark.usefixtures("fresh")
def test_held_back_silences_its_own_thread_only(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("kvsim.test_say_once")
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with say_once.held_back():
            say_once.warn_once(logger, "from the holding thread")
            inside.set()
            done.wait(5)

    holder = threading.Thread(target=hold)
    with caplog.at_level(logging.WARNING, logger="kvsim.test_say_once"):
        holder.start()
        assert inside.wait(5)
        say_once.warn_once(logger, "from another thread")  # (a process-wide counter lost it)
        done.set()
        holder.join(5)
        said = [r.getMessage() for r in caplog.records]
        assert said == ["from another thread"]
        # not marked said while held back: said when built for real
        say_once.warn_once(logger, "from the holding thread")
    assert [r.getMessage() for r in caplog.records][-1] == "from the holding thread"
