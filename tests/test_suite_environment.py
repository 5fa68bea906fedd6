"""The environment the test process runs in, set by tests/conftest.py before torch or faiss load.

    .venv/bin/python -m pytest -q tests/test_suite_environment.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_openmp_waits_passively_in_the_test_process_unless_told():
    """Spinning OpenMP threads took the cores from each other on a loaded machine (faiss's k-means 4x slower): the
    root conftest sets OMP_WAIT_POLICY=PASSIVE, as the spanseek command does, before OpenMP loads, and keeps a value
    the environment gives."""
    code = ("import runpy, os, sys; runpy.run_path(sys.argv[1]); "
            "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules, 'faiss' in sys.modules)")
    conftest = str(Path(__file__).parent / "conftest.py")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for given, expected in [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")]:
        run_env = env if given is None else {**env, "OMP_WAIT_POLICY": given}
        out = subprocess.run([sys.executable, "-c", code, conftest], env=run_env, capture_output=True, text=True,
                             check=True, timeout=120)
        assert out.stdout.split() == [expected, "False", "False"], out.stdout


def test_on_a_worker_the_longest_files_go_first_and_in_one_process_the_order_is_kept():
    """make test runs the files on two workers, the longest first (tests/conftest.py: LONGEST_FIRST); a name there
    that is no test file any more would quietly order nothing."""
    from types import SimpleNamespace

    from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems

    root = Path(__file__).resolve().parents[1]
    assert all((root / path).is_file() and Path(path).name.startswith("test_") for path in LONGEST_FIRST)
    nodeids = ["tests/a.py::one", f"{LONGEST_FIRST[1]}::x", "tests/a.py::two", f"{LONGEST_FIRST[0]}::y",
               f"{LONGEST_FIRST[1]}::z"]
    items = [SimpleNamespace(nodeid=n) for n in nodeids]
    pytest_collection_modifyitems(SimpleNamespace(), items)  # one process
    assert [item.nodeid for item in items] == nodeids
    pytest_collection_modifyitems(SimpleNamespace(workerinput={"workerid": "gw0"}), items)
    assert [item.nodeid for item in items] == [f"{LONGEST_FIRST[0]}::y", f"{LONGEST_FIRST[1]}::x",
                                               f"{LONGEST_FIRST[1]}::z", "tests/a.py::one", "tests/a.py::two"]
