"""A damaged index file is named in one line that says what is wrong with it, not faiss's C++ function and source
line.

    .venv/bin/python -m pytest -q tests/core/test_index_files.py
"""

from __future__ import annotations

import json
import shutil

import pytest

from spanseek.core import phrase_index
from spanseek.core.faiss_spec import faiss_reason
from spanseek.core.phrase_index import IndexFormatError, PhraseIndex


def test_faiss_reason_keeps_only_what_faiss_says():
    located = RuntimeError("Error in std::unique_ptr<faiss::Index> faiss::read_index_up(IOReader*, int) at "
                           '/project/faiss/impl/index_read.cpp:3251: Index type 0x62726167 ("garb") not recognized')
    assert faiss_reason(located) == 'Index type 0x62726167 ("garb") not recognized'
    assert faiss_reason(RuntimeError("Error: 'index_ivf' failed: nlist too large")) == "nlist too large"
    assert faiss_reason(ValueError("first line\nlast line")) == "last line"
    assert faiss_reason(EOFError()) == "EOFError"


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_faiss_file_is_named_in_one_line_without_faiss_source_lines(tiny_index, tmp_path, damage):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_index, broken)
    manifest = json.loads((broken / phrase_index.MANIFEST).read_text())
    for key in ("files", phrase_index.CHECKSUM_FIELD):  # as an index written before checksums: the read must say it
        manifest.pop(key, None)
    (broken / phrase_index.MANIFEST).write_text(json.dumps(manifest))
    path = broken / phrase_index.FAISS_INDEX
    data = path.read_bytes()
    path.write_bytes(b"garbage!" * 64 if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(IndexFormatError) as caught:
        PhraseIndex(broken)
    message = str(caught.value)
    assert message.startswith(f"{path}: cannot be read (") and message.endswith("rebuild or restore the index")
    assert "\n" not in message and "Error in" not in message and ".cpp" not in message, message
    if damage == "garbage":
        assert 'Index type 0x62726167 ("garb") not recognized' in message
