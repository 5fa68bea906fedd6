"""Factory strings parsed as faiss's index_factory reads them, checked against the index faiss itself builds.

    .venv/bin/python -m pytest -q tests/core/test_faiss_spec.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.faiss_spec import FactoryError, ivf_of, parse_factory, unmapped

DIM = 32

SPELLINGS = [
    "Flat", "IDMap,Flat", "IDMap2,Flat", "Flat,IDMap2", "SQ8", "SQfp16", "PQ8", "PQ8x4fs", "PCA16,Flat",
    "IVF64,Flat", "IVF64,SQ8", "IVF64,PQ8", "IVF64,PQ8np", "IVF64,PQ8x4fs", "IVF64,PQ8x4fs_32", "IVF1k,SQ8",
    "IVF64_HNSW32,SQ8", "IVF64_HNSW,SQ8", "IVF64_HNSW32,Flat", "IVF64_HNSW32,PQ8x4fs", "IVF64_NSG16,SQ8",
    "IVF64(HNSW16),SQ8", "IVF64(PQ4x4fs),SQ8", "IVF64(IVF8,Flat),SQ8",
    "OPQ8,IVF64,PQ8", "OPQ8_16,IVF64_HNSW32,PQ8", "PCAR16,IVF64_HNSW32,PQ8", "L2norm,IVF64,SQ8",
    "IDMap,IVF64,SQ8", "IDMap2,IVF64_HNSW32,SQ8", "IVF64_HNSW32,SQ8,IDMap2", "IDMap2,OPQ8,IVF64_HNSW32,PQ8",
    "IDMap,SQ8", "HNSW32", "HNSW32,Flat", "HNSW32,SQ8", "HNSW32_SQ8", "HNSW16,PQ8", "NSG16,Flat", "NSG16,SQ8",
    "IDMap,HNSW32,SQ8",
]


def _faiss_codes(codec) -> bool:
    """What faiss says: the index that holds the vectors (behind any id map) encodes them one by one
    (``sa_code_size`` raises for a graph), into codes that are not a Flat's plain vectors."""
    import faiss

    try:
        codec.sa_code_size()
    except RuntimeError:  # "standalone codec not implemented for this type of index"
        return False
    return not isinstance(codec, faiss.IndexFlat)


@pytest.mark.parametrize("factory", SPELLINGS)
def test_spec_agrees_with_the_index_faiss_builds(factory):
    """nlist, codes and id handling read from the string equal those of ``faiss.index_factory``'s index: an HNSW
    or parenthesised coarse quantiser, an nlist in thousands, pre-transforms and an id map before or after all
    leave the IVF and its codes as they are; a graph index has no standalone codes."""
    import faiss

    index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
    spec = parse_factory(factory)
    ivf = ivf_of(index)
    assert spec.nlist == (None if ivf is None else ivf.nlist)
    assert spec.has_codes == _faiss_codes(unmapped(index))
    assert spec.id_map == isinstance(faiss.downcast_index(index), faiss.IndexIDMap | faiss.IndexIDMap2)
    assert spec.is_exact == isinstance(unmapped(index), faiss.IndexFlat)


@pytest.mark.parametrize("factory", ["IVF64,SQ8", "IDMap,IVF64,SQ8", "IVF64_HNSW32,SQ8,IDMap2", "IDMap2,PCA16,IVF64,SQ8",
                                     "IDMap,SQ8"])
def test_codes_go_through_an_id_map(factory, tmp_path):
    """An id map encodes nothing itself: the codes store is written and read through the index it wraps, and
    decodes to what that index's own codec gives."""
    import faiss

    from spanseek.core.phrase_index import decode_codes
    from spanseek.indexer.compress import write_codes

    x = np.random.default_rng(0).standard_normal((2500, DIM)).astype(np.float32)
    index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    codec = unmapped(index)
    size = write_codes(index, x[:100], tmp_path / "codes.npy")
    codes = np.load(tmp_path / "codes.npy")
    assert size == codec.sa_code_size() and np.array_equal(codes, codec.sa_encode(x[:100]))
    assert np.allclose(decode_codes(index, codes), codec.sa_decode(codes), atol=1e-6)


def test_the_spec_reads_sizes_past_the_coarse_quantiser():
    spec = parse_factory("IDMap2,OPQ16_64,IVF4k_HNSW32,PQ16x4fs_32")
    assert (spec.opq_m, spec.opq_dim, spec.nlist, spec.pq_m, spec.pq_nbits, spec.fast_scan, spec.id_map) == (
        16, 64, 4096, 16, 4, True, True)
    with pytest.raises(FactoryError, match="must be positive"):
        parse_factory("IVF0_HNSW32,SQ8")
