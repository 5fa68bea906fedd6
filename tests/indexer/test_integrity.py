"""Index integrity: checksums of every file, load errors that name the file (and line), verify against the build.

Oracles: flipping one byte of any file of a built index (each file the manifest records, and the manifest itself)
makes `index verify` fail and opening refuse, naming that file; an index whose faiss file was replaced with a
consistent but wrong one (checksums re-recorded) fails verify on recall; damaged stores of an index without
checksums (built by an older version) still give errors naming the file, never a raw parser or faiss message.

    .venv/bin/python -m pytest -q tests/indexer/test_integrity.py
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from spanseek.cli import main
from spanseek.core import integrity, phrase_index
from spanseek.core.phrase_index import IndexFormatError, Manifest, PhraseIndex
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.verify import verify_index

FACTORY = "IVF4,SQ8"  # a compressed index: every kind of file (faiss with inverted lists, codes store)


@pytest.fixture(scope="module")
def ivf_index(tmp_path_factory, tiny_corpus, tiny_model_dir):
    out = tmp_path_factory.mktemp("integrity") / "ivf"
    build_index(tiny_corpus, tiny_model_dir, out, BuildOptions(factory=FACTORY, shard_passages=7, progress=False,
                                                               precision="fp32", gpu=False, keep_codes=True))
    return out


def _copy(src, tmp_path, name="copy"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _flip(path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _strip_checksums(index_dir) -> None:
    """Make the manifest look like one written before checksums were recorded."""
    d = json.loads((index_dir / phrase_index.MANIFEST).read_text())
    for key in ("files", phrase_index.CHECKSUM_FIELD):
        d.pop(key)
    (index_dir / phrase_index.MANIFEST).write_text(json.dumps(d))


def test_the_manifest_records_every_file(ivf_index):
    m = Manifest.load(ivf_index)
    on_disk = sorted(p.relative_to(ivf_index).as_posix() for p in ivf_index.rglob("*")  # but the writers' lock
                     if p.is_file() and p.name not in (phrase_index.MANIFEST, integrity.LOCK))
    assert sorted(m.files) == on_disk and phrase_index.CODES in on_disk and phrase_index.FAISS_INDEX in on_disk
    assert any(name.startswith(phrase_index.LEXICAL + "/") for name in on_disk)  # a store kept as a directory too
    assert all(rec["bytes"] == (ivf_index / name).stat().st_size for name, rec in m.files.items())
    assert verify_index(ivf_index, sample=50)["ok"]


def test_a_flipped_byte_in_any_file_fails_verify_and_open_naming_it(ivf_index, tmp_path):
    names = [*Manifest.load(ivf_index).files, phrase_index.MANIFEST]
    assert len(names) >= 10
    for name in names:
        broken = _copy(ivf_index, tmp_path, f"flip-{name}")
        _flip(broken / name)
        report = verify_index(broken, sample=20)
        assert not report["ok"] and any(str(broken / name) in p for p in report["problems"]), (name, report)
        with pytest.raises(IndexFormatError, match=f"{broken / name}"):
            PhraseIndex(broken)
        shutil.rmtree(broken)


def test_a_change_of_a_damaged_index_does_not_record_the_damage_as_good(ivf_index, tmp_path):
    """A delete rewrites a few files and records the manifest again: the files it did not write keep their recorded
    checksums, so a byte flipped before it is still found by verify after it (before, every file was hashed
    afresh and verify said ok)."""
    from spanseek.indexer.lifecycle import delete_documents

    broken = _copy(ivf_index, tmp_path)
    _flip(broken / phrase_index.CODES)
    assert not verify_index(broken, sample=20)["ok"]
    doc = json.loads((broken / phrase_index.DOCS).read_text().splitlines()[0])["id"]
    assert delete_documents(broken, [doc])["deleted"] == 1
    report = verify_index(broken, sample=20)
    assert not report["ok"] and any(str(broken / phrase_index.CODES) in p for p in report["problems"]), report
    clean = _copy(ivf_index, tmp_path, "clean")
    assert delete_documents(clean, [doc])["deleted"] == 1 and verify_index(clean, sample=20)["ok"]


def test_a_changed_manifest_value_is_caught_by_its_checksum(ivf_index, tmp_path):
    broken = _copy(ivf_index, tmp_path)
    text = (broken / phrase_index.MANIFEST).read_text()
    tokens = json.loads(text)["tokens"]
    (broken / phrase_index.MANIFEST).write_text(text.replace(f'"tokens": {tokens}', f'"tokens": {tokens + 1}'))
    with pytest.raises(IndexFormatError, match=rf"{broken / phrase_index.MANIFEST}: checksum mismatch"):
        PhraseIndex(broken)
    d = json.loads(text)
    del d["encoder"]
    (broken / phrase_index.MANIFEST).write_text(json.dumps(d))
    with pytest.raises(IndexFormatError, match=r"manifest.json: missing field\(s\) encoder"):
        PhraseIndex(broken)


def test_serve_search_and_verify_refuse_a_damaged_index_on_the_command_line(ivf_index, tmp_path, capsys,
                                                                             tiny_model_dir):
    from spanseek.service.cli import check_servable
    from spanseek.service.settings import Settings

    broken = _copy(ivf_index, tmp_path)
    _flip(broken / phrase_index.VECTORS)
    message = f"{broken / phrase_index.VECTORS}: checksum mismatch"
    with pytest.raises(IndexFormatError, match=message):
        check_servable(Settings(index=broken, model=str(tiny_model_dir)))
    assert main(["search", "--index", str(broken), "--model", str(tiny_model_dir), "who?"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert main(["index", "verify", str(broken)]) == 1
    assert message in json.loads(capsys.readouterr().out)["problems"][0]


def test_verify_fails_when_recall_falls_far_below_the_builds(ivf_index, tmp_path):
    """A faiss file that is intact but wrong (here: trained and filled on shuffled vectors, its checksum
    re-recorded) is caught by repeating the build's recall measurement."""
    import faiss

    broken = _copy(ivf_index, tmp_path)
    index = faiss.read_index(str(broken / phrase_index.FAISS_INDEX))
    built = Manifest.load(broken).faiss_params["recall"]
    vectors = np.load(broken / phrase_index.VECTORS).astype(np.float32)
    index.reset()
    index.add_with_ids(np.random.default_rng(0).permutation(vectors), np.arange(len(vectors)))
    faiss.write_index(index, str(broken / phrase_index.FAISS_INDEX))
    Manifest.create(broken, Manifest.load(broken).to_dict()).write(broken)  # checksums match the new file
    report = verify_index(broken, sample=50)
    assert not report["ok"], report
    assert any(f"{broken / phrase_index.FAISS_INDEX}: recall@10 is" in p and f"the build measured {built['recall@10']}" in p
               for p in report["problems"]), report


def test_load_errors_of_an_index_without_checksums_name_the_file(ivf_index, tmp_path):
    old = _copy(ivf_index, tmp_path, "old")
    _strip_checksums(old)
    assert PhraseIndex(old).num_tokens > 0  # an older index still opens

    broken = _copy(old, tmp_path, "faiss")
    data = (broken / phrase_index.FAISS_INDEX).read_bytes()
    (broken / phrase_index.FAISS_INDEX).write_bytes(data[: len(data) // 2])
    with pytest.raises(IndexFormatError, match=rf"{broken / phrase_index.FAISS_INDEX}: cannot be read .*damaged"):
        PhraseIndex(broken)

    broken = _copy(old, tmp_path, "passages")
    lines = (broken / phrase_index.PASSAGES).read_bytes().splitlines(keepends=True)
    cut = b"".join(lines[:5]) + lines[5][: len(lines[5]) // 2]  # line 6 is cut in the middle
    (broken / phrase_index.PASSAGES).write_bytes(cut)
    with pytest.raises(IndexFormatError, match=rf"{broken / phrase_index.PASSAGES}:6: invalid JSON"):
        PhraseIndex(broken)

    broken = _copy(old, tmp_path, "npy")
    _flip(broken / phrase_index.TOKEN_FLAGS, at=0.01)  # inside the .npy header
    with pytest.raises(IndexFormatError, match=rf"{broken / phrase_index.TOKEN_FLAGS}: cannot be read"):
        PhraseIndex(broken)

    broken = _copy(old, tmp_path, "bytes")
    _flip(broken / phrase_index.MANIFEST)
    with pytest.raises(IndexFormatError, match=rf"{broken / phrase_index.MANIFEST}: (not UTF-8|invalid JSON)"):
        PhraseIndex(broken)
