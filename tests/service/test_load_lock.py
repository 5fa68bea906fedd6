"""A server with writes holds its index's lock from before it reads the base (service.app): an offline change
cannot land between the loading and the live store's taking the lock.

    .venv/bin/python -m pytest -q tests/service/test_load_lock.py
"""

from __future__ import annotations

import shutil

from spanseek.core.phrase_index import PhraseIndex
from spanseek.indexer.out_dir import BuildError
from spanseek.service import app as app_module
from spanseek.service.app import create_app
from tests.indexer.test_live import without_lexical
from tests.service.conftest import serving


def test_add_lexical_while_a_server_with_writes_loads_is_refused_not_left_unserved(write_settings, tiny_index, tmp_path,
                                                                                     monkeypatch):
    """`index add-lexical` run after the server had read the base but before its live store took the index's lock
    gave the index its lexical part on disk while the server went on serving the base it had read, without one.
    The lock is now held from before the base is read: the change is refused, naming the lock, and what is served is
    what is on disk."""
    from spanseek.indexer.lexical import add_lexical

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    without_lexical(index)
    refused: list[str] = []
    live_writes = app_module.LiveWrites

    def offline_change_then_live_writes(*args, **kwargs):  # the window: the base read, the live store not started
        try:
            add_lexical(index, tmp_path / "live")
        except BuildError as e:
            refused.append(str(e))
        return live_writes(*args, **kwargs)

    monkeypatch.setattr(app_module, "LiveWrites", offline_change_then_live_writes)
    app = create_app(write_settings(index=index))
    with serving(app) as client:
        assert client.get("/ready").status_code == 200
        served = app.state.service.live.store.base
        assert (served.lexical is None) == (PhraseIndex(index).lexical is None), refused
    assert len(refused) == 1 and "holds its lock" in refused[0], refused
