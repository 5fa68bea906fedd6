"""Search on a GPU (core.gpu): what goes where, and the same results as CPU search.

The parts run on the CPU here and on the GPU in the ``gpu``-marked tests: ``DeviceVectors`` on a torch device
(CPU here) against reading the store and multiplying; ``DeviceIndex``'s quantiser path (a flat copy of the coarse
centroids, then ``search_preassigned``) with a CPU flat quantiser against faiss's own search; a Searcher using both
against a plain one. Oracles: faiss's CPU search, numpy products, ``RowMap.lookup``.

    .venv/bin/python -m pytest -q tests/core/test_gpu.py
"""

from __future__ import annotations

import logging

import faiss
import numpy as np
import pytest

from spanseek.core.fine_store import FineStore, RotatedPQ, RowMap, train_quantizer
from spanseek.core.gpu import (
    GPU_MAX_K,
    DeviceIndex,
    DeviceVectors,
    OnDevice,
    gpu_index_bytes,
    gpu_unusable_reason,
    place,
    plan,
    quantizer_bytes,
    vector_bytes,
)
from spanseek.core.loading import search_placement
from spanseek.core.params import SearchFilter, SearchParams
from spanseek.core.phrase_index import IndexFormatError, PhraseIndex, faiss_search_parameters
from spanseek.core.search import Searcher
from spanseek.indexer.build import BuildOptions, reindex

GIB = 2**30
D = 32


def _clustered(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, D)).astype(np.float32)
    return (centres[rng.integers(0, 40, n)] + 0.3 * rng.standard_normal((n, D))).astype(np.float32)


def _index(factory: str, x: np.ndarray):
    index = faiss.index_factory(D, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    return index


# --- planning ------------------------------------------------------------------------------------------------


def test_plan_puts_the_index_first_then_the_vectors_in_what_is_left():
    assert plan(2 * GIB, GIB // 100, 3 * GIB, 10 * GIB) == plan(2 * GIB, None, 3 * GIB, 10 * GIB)
    both = plan(2 * GIB, GIB // 100, 3 * GIB, 10 * GIB)  # 8 GiB budget: 2 + 3 fit
    assert (both.index, both.vectors, both.notes) == ("index", True, ())
    no_vectors = plan(2 * GIB, GIB // 100, 7 * GIB, 10 * GIB)  # 2 + 7 > 8
    assert (no_vectors.index, no_vectors.vectors) == ("index", False)
    assert "fine vectors (7.00 GiB) do not fit in the 6.00 GiB left" in no_vectors.notes[0]
    quantizer = plan(20 * GIB, GIB, 3 * GIB, 10 * GIB)  # the index is too big: its quantiser goes
    assert (quantizer.index, quantizer.vectors) == ("quantizer", True)
    assert "token index (20.00 GiB) does not fit in 8.00 GiB" in quantizer.notes[0]
    fast_scan = plan(None, GIB, 3 * GIB, 10 * GIB)  # faiss cannot clone it: no note, the quantiser goes
    assert (fast_scan.index, fast_scan.vectors, fast_scan.notes) == ("quantizer", True, ())
    nothing = plan(20 * GIB, 9 * GIB, 20 * GIB, 10 * GIB)
    assert (nothing.index, nothing.vectors, len(nothing.notes)) == ("cpu", False, 3)
    flat_too_big = plan(20 * GIB, None, GIB, 10 * GIB)  # a flat index has no quantiser to fall back to
    assert (flat_too_big.index, flat_too_big.vectors) == ("cpu", True)


def test_sizes_of_what_a_gpu_would_hold():
    x = _clustered(5000)
    assert gpu_index_bytes(_index("Flat", x)) == 5000 * D * 4
    id_map = faiss.index_factory(D, "IDMap,Flat", faiss.METRIC_INNER_PRODUCT)
    id_map.add_with_ids(x[:100], np.arange(100) * 3)
    assert gpu_index_bytes(id_map) == 100 * D * 4  # the ids stay on the CPU
    sq8 = _index("IVF16,SQ8", x)
    assert gpu_index_bytes(sq8) == 5000 * (D + 8) + 16 * D * 4
    assert quantizer_bytes(sq8) == 16 * D * 4
    # trained briefly: the rotation's rounds (14 s here) and the factory's polysemous training (25 s), which orders
    # the codes, change no size
    opq = faiss.index_factory(D, "OPQ8,IVF16,PQ8", faiss.METRIC_INNER_PRODUCT)
    faiss.downcast_index(faiss.extract_index_ivf(opq)).do_polysemous_training = False
    rotation = faiss.downcast_VectorTransform(opq.chain.at(0))
    rotation.niter = rotation.niter_pq_0 = rotation.niter_pq = 1
    opq.train(x)
    opq.add(x)
    assert gpu_index_bytes(opq) == 5000 * (8 + 8) + 16 * D * 4  # OPQ stays on the CPU
    assert gpu_index_bytes(_index("IVF16,PQ8x4fs", x)) is None  # fast-scan: faiss has no GPU version
    assert gpu_index_bytes(_index("IVF16,PQ8x4", x)) is None  # GPU IVF-PQ takes 8-bit codes only
    assert quantizer_bytes(_index("Flat", x)) is None
    store = FineStore("fp16", x.astype(np.float16))
    assert vector_bytes(store) == 5001 * D * 2
    keep = np.arange(5000) % 3 == 0
    filtered = FineStore("fp16", x[keep].astype(np.float16), row_map=RowMap.from_mask(keep))
    assert vector_bytes(filtered) == (int(keep.sum()) + 1) * D * 2 + 4 * 5000


def test_row_map_rows_equal_lookups():
    rng = np.random.default_rng(3)
    keep = rng.random(70_001) < 0.3  # not a multiple of 8 or of the rank block
    rows = RowMap.from_mask(keep).rows(missing=-7)
    row, has = RowMap.from_mask(keep).lookup(np.arange(len(keep)))
    assert (has == keep).all()
    assert (rows[keep] == row[keep]).all() and (rows[~keep] == -7).all()
    assert (rows[keep] == np.arange(keep.sum())).all()


# --- the fine vectors on a device ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind, filtered", [("fp16", False), ("fp16", True), ("sq8", False), ("sq4", True)])
def test_device_vectors_score_as_the_store_reads(kind, filtered, monkeypatch):
    import spanseek.core.gpu as gpu

    monkeypatch.setattr(gpu, "CHUNK_ROWS", 1000)  # several chunks
    x = _clustered(4000, seed=1)
    keep = np.random.default_rng(2).random(len(x)) < 0.4 if filtered else np.ones(len(x), bool)
    row_map = RowMap.from_mask(keep) if filtered else None
    if kind == "fp16":
        store = FineStore("fp16", x[keep].astype(np.float16), row_map=row_map)
    else:
        quantizer = train_quantizer(kind, x[keep])
        store = FineStore(kind, quantizer.sa_encode(x[keep]), quantizer, row_map=row_map)
    ids = np.random.default_rng(4).integers(0, len(x), 900)
    q = np.random.default_rng(5).standard_normal((D, 2)).astype(np.float32)
    want = np.asarray(store[ids], dtype=np.float32) @ q
    got = DeviceVectors(store, "cpu").scores(ids, q)
    exact = store.quantizer is None  # fp16 rows are read as they are; decoded rows are rounded to fp16 once
    np.testing.assert_allclose(got, want, rtol=1e-5 if exact else 2e-3, atol=1e-4 if exact else 2e-2)
    if filtered:
        assert (got[~keep[ids]] == 0).all()


def test_device_vectors_of_a_rotated_store_score_as_its_rotated_cpu_path():
    """A pca192 store scores in its rotated space on the CPU (``FineStore.dot``); on a device its rows are decoded
    back to the original space once and rounded to fp16: the same products up to that rounding."""
    d = 256  # pca192 needs d > 192
    rng = np.random.default_rng(6)
    scale = np.linspace(2.0, 0.1, d).astype(np.float32)  # a spectrum for the principal axes to sort
    x = (rng.standard_normal((3000, d)).astype(np.float32) * scale) @ np.linalg.qr(rng.standard_normal((d, d)))[0]
    x = x.astype(np.float32)
    keep = rng.random(len(x)) < 0.5
    quantizer = RotatedPQ.fit(x[keep], 192)
    store = FineStore("pca192", quantizer.sa_encode(x[keep]), quantizer, row_map=RowMap.from_mask(keep))
    ids = rng.integers(0, len(x), 700)
    q = rng.standard_normal((d, 3)).astype(np.float32)
    want = store.dot(ids, q)
    got = DeviceVectors(store, "cpu").scores(ids, q)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=3e-2)
    assert (got[~keep[ids]] == 0).all() and np.abs(want[keep[ids]]).mean() > 1.0  # real products, not zeros


# --- the coarse quantiser apart, lists scanned on the CPU ----------------------------------------------------


@pytest.mark.parametrize("factory", ["IVF32,Flat", "IVF32,SQ8", "OPQ8,IVF32,PQ8x4fs", "IVF32_HNSW8,SQ8"])
def test_quantizer_path_returns_the_cpu_index_results(factory, monkeypatch):
    import spanseek.core.gpu as gpu

    x = _clustered(6000)
    index = _index(factory, x)
    q = _clustered(50, seed=9)
    device = DeviceIndex(index, "quantizer", None, default_nprobe=4)
    for nprobe in (None, 1, 8):
        want = index.search(q, 20, params=faiss_search_parameters(index, nprobe or 4))[1]
        got = device.search(q, 20, nprobe)
        if "HNSW" in factory:  # the flat copy is exact; HNSW over 32 centroids nearly always is
            assert np.mean([len(np.intersect1d(a, b)) / 20 for a, b in zip(got, want, strict=True)]) > 0.95
        else:
            assert (got == want).all()
    # a selector is applied while scanning the lists: only allowed ids, the same ones the CPU index returns
    allowed = np.arange(len(x)) % 4 == 0
    bitmap = np.packbits(allowed, bitorder="little")
    selector = faiss.IDSelectorBitmap(len(x), faiss.swig_ptr(bitmap))
    got = device.search(q, 10, 8, selector)
    assert allowed[got[got >= 0]].all()
    if "HNSW" not in factory:
        assert (got == index.search(q, 10, params=faiss_search_parameters(index, 8, selector))[1]).all()
    monkeypatch.setattr(gpu, "GPU_MAX_K", 4)  # more lists than faiss selects on a GPU: the CPU index serves it
    assert device.search(q, 10, 8) is None and device.search(q, 10, 4) is not None


def test_quantizer_path_needs_an_ivf_index_it_can_scan():
    with pytest.raises(ValueError, match="only an IVF index"):
        DeviceIndex(_index("Flat", _clustered(100)), "quantizer", None, None)
    x = _clustered(2000)
    id_map = faiss.IndexIDMap2(faiss.index_factory(D, "IVF8,Flat", faiss.METRIC_INNER_PRODUCT))
    id_map.train(x)
    id_map.add_with_ids(x, np.arange(len(x)) * 7)
    with pytest.raises(ValueError, match="IndexIDMap2 are not scanned directly"):
        DeviceIndex(id_map, "quantizer", None, None)


def test_nprobe_beyond_the_lists_means_every_list():
    x = _clustered(3000)
    index = _index("IVF16,Flat", x)
    q = _clustered(20, seed=4)
    got = DeviceIndex(index, "quantizer", None, 4).search(q, 10, GPU_MAX_K + 1)  # but there are only 16 lists
    assert got is not None and (got == index.search(q, 10, params=faiss_search_parameters(index, 16))[1]).all()


# --- a Searcher with parts on a device -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fast_scan_index(tmp_path_factory, tiny_index):
    out = tmp_path_factory.mktemp("gpu") / "fs"
    reindex(tiny_index, out, BuildOptions(factory="IVF8,PQ16x4fs", progress=False, gpu=False))
    return out


TEXTS = ["who built the bridge?", "when was the tower built?", "what did Ada build in 1901?"]


def _hits(searcher: Searcher, q_start, q_end, params: SearchParams, texts=None):
    return [[(h.start, h.end, h.passage_id, round(h.score, 3)) for h in hits]
            for hits in searcher.search_vectors(q_start, q_end, params, None, texts)]


@pytest.mark.parametrize("which", ["tiny_index", "fast_scan_index"])
def test_searcher_with_device_parts_answers_as_the_cpu_searcher(request, which, tiny_searcher):
    index = PhraseIndex(request.getfixturevalue(which))
    cpu = Searcher(index)
    index_part = DeviceIndex(index.faiss, "quantizer", None, index.default_nprobe) if which != "tiny_index" else None
    moved = Searcher(index, on_device=OnDevice("cpu", index_part, DeviceVectors(index.vectors, "cpu")))
    assert moved.on_device.describe() == {"device": "cpu", "index": "cpu" if index_part is None else "quantizer",
                                          "vectors": "cpu", "notes": []}
    q_start, q_end = tiny_searcher.encoder.encode(TEXTS)
    doc = index.docs[1]["id"]
    for params in (SearchParams(unit="phrase", top_k=5, mode="dense"),
                   SearchParams(unit="passage", top_k=3, mode="dense"),
                   SearchParams(unit="doc", top_k=2, mode="dense", filter=SearchFilter(doc_ids=(doc,))),
                   SearchParams(unit="phrase", top_k=3, mode="hybrid", nprobe=2)):
        assert _hits(moved, q_start, q_end, params, TEXTS) == _hits(cpu, q_start, q_end, params, TEXTS), params


def test_search_device_cpu_searches_on_the_cpu_and_a_missing_gpu_is_refused(tiny_index, caplog):
    index = PhraseIndex(tiny_index)
    with caplog.at_level(logging.WARNING):
        assert search_placement(index, "cpu", "cpu") is None
        assert search_placement(index, "auto", "cpu") is None
    assert not caplog.records
    with pytest.raises(ValueError, match="search device must be auto, cpu, cuda or cuda:N, got 'gpu'"):
        search_placement(index, "gpu", "cpu")
    from pydantic import ValidationError

    from spanseek.service.settings import Settings

    with pytest.raises(ValidationError, match="search_device"):
        Settings(index="/i", search_device="gpu0")
    import torch

    # a GPU this machine lacks is an error naming the setting and the GPUs it has, as device="cuda" is for the
    # encoder (it warned and searched on the CPU)
    for ask in (search_placement, lambda index, device, _: place(index, device)):
        with pytest.raises(ValueError, match=r"search_device 'cuda:99': (this machine has \d+ CUDA GPU|no CUDA GPU)"):
            ask(index, "cuda:99", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"search_device 'cuda': no CUDA GPU is usable here \(torch .*\); use "
                                             "cpu or auto"):
            search_placement(index, "cuda", "cpu")


# --- on a GPU ------------------------------------------------------------------------------------------------


def _gpu_reason() -> str | None:
    import torch

    return "torch sees no CUDA GPU" if not torch.cuda.is_available() else gpu_unusable_reason()


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_reason() is not None, reason="no usable CUDA GPU for faiss")
@pytest.mark.parametrize("factory", ["Flat", "IVF8,SQ8", "IVF8,PQ16", "IVF8,PQ16x4fs"])
def test_gpu_search_answers_as_cpu_search(factory, tiny_index, tiny_searcher, tmp_path):
    if factory != "Flat":
        reindex(tiny_index, tmp_path / "i", BuildOptions(factory=factory, progress=False, gpu=False))
    index = PhraseIndex(tiny_index if factory == "Flat" else tmp_path / "i")
    on = place(index, "cuda")
    assert on is not None and on.vectors is not None
    assert on.index is not None and on.index.place == ("quantizer" if "fs" in factory else "index")
    cpu, gpu = Searcher(index), Searcher(index, on_device=on)
    texts = [f"who built the {w} in {y}?" for w in ("bridge", "tower", "hall", "road") for y in (1901, 1950)]
    q_start, q_end = tiny_searcher.encoder.encode(texts)
    for params in (SearchParams(unit="phrase", top_k=5, mode="dense"), SearchParams(unit="passage", top_k=3),
                   SearchParams(unit="doc", top_k=2, filter=SearchFilter(doc_ids=(index.docs[0]["id"],)))):
        want, got = _hits(cpu, q_start, q_end, params), _hits(gpu, q_start, q_end, params)
        top1 = np.mean([a[:1] == b[:1] for a, b in zip(want, got, strict=True)])
        assert top1 >= 0.99, (params, want, got)


def test_a_reload_releases_the_served_searchers_device_parts(tiny_index, tiny_model_dir, tiny_searcher, monkeypatch):
    """The new index gets the GPU memory: the served searcher's parts are released once the new index has passed
    its checks, and it goes on answering (from the CPU) with the same hits."""
    from spanseek.core.loading import reopen_searcher
    from spanseek.core.model import resolve_model

    index = PhraseIndex(tiny_index)
    served = Searcher(index, tiny_searcher.encoder, on_device=OnDevice("cpu", None, DeviceVectors(index.vectors, "cpu")))
    q_start, q_end = tiny_searcher.encoder.encode(TEXTS)
    params = SearchParams(unit="phrase", top_k=5, mode="dense")
    before = _hits(served, q_start, q_end, params)
    with monkeypatch.context() as m, pytest.raises(IndexFormatError, match="built with a different model"):
        m.setattr(tiny_searcher.encoder.model, "source", resolve_model("default"))  # an encoder of another model
        reopen_searcher(tiny_index, "default", tiny_searcher.encoder, "cpu", served)
    assert served.on_device is not None and served.on_device.vectors is not None  # a failed check keeps the parts
    new = reopen_searcher(tiny_index, tiny_model_dir, tiny_searcher.encoder, "cpu", served)
    assert served.on_device.vectors is None and served.on_device.describe()["vectors"] == "cpu"
    assert _hits(served, q_start, q_end, params) == before == _hits(new, q_start, q_end, params)
