"""What a faiss factory string asks for, parsed once, and the inner parts of a built faiss index.

``parse_factory("OPQ32,IVF1024,PQ32x4fs")`` gives a ``FactorySpec`` (nlist, OPQ/PQ sub-spaces, bits, scalar
quantiser, a PCA's output dimension, whether it is IVF / a graph / wrapped in an IDMap). The indexer (``spanseek
index build``) validates and sizes training with it, the manifest exposes it (``Manifest.spec``) and the searcher
reads it, so no code tests substrings of a factory string. ``ivf_of``, ``unwrapped`` and ``unmapped`` reach inside a
built index (an IVF behind an OPQ pre-transform, the index behind an id map) the one way all callers share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MIN_POINTS_PER_CENTROID = 39  # faiss warns below this many training vectors per k-means centroid


class FactoryError(ValueError):
    """A factory string faiss cannot build, or a corpus too small to train it."""


def faiss_reason(error: BaseException) -> str:
    """What a faiss exception (or any other) says, in one line: its last line, without the C++ function and source
    line faiss puts before it (``Error in std::unique_ptr<faiss::Index> faiss::...index_factory_sub(...) at
    /project/faiss/index_factory.cpp:1228: could not parse index string Bogus`` -> ``could not parse index string
    Bogus``; ``Error: 'index_ivf' failed: ...`` likewise). Used for factory errors (indexer) and damaged index
    files (core.phrase_index)."""
    last = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    return re.sub(r"^(?:Error(?: in .*? at \S+:\d+|: '[^']*' failed): )+", "", last)


@dataclass(frozen=True)
class FactorySpec:
    """What a factory string asks for (the parts that decide training needs, code size and id handling)."""

    factory: str
    nlist: int | None = None  # IVF coarse centroids
    opq_m: int | None = None  # OPQ sub-spaces
    opq_dim: int | None = None  # OPQ output dimension (OPQ{M}_{D})
    pca_dim: int | None = None  # PCA pre-transform output dimension (PCA{D}, PCAR{D}, PCAW{D}, PCAWR{D})
    pq_m: int | None = None  # PQ sub-quantisers
    pq_nbits: int = 8
    fast_scan: bool = False
    sq: str | None = None  # SQ8, SQ4, SQfp16 ...
    graph: bool = False  # a graph index (HNSW, NSG; not an IVF's graph quantiser): no standalone codes
    id_map: bool = False  # IDMap / IDMap2 prefix: explicit ids

    @property
    def is_ivf(self) -> bool:
        """Whether the index has inverted lists (an nprobe to set)."""
        return self.nlist is not None

    @property
    def needs_training(self) -> bool:
        return (self.nlist is not None or self.pq_m is not None or self.opq_m is not None or self.sq is not None
                or self.pca_dim is not None)

    @property
    def stores_ids(self) -> bool:
        """Whether the index keeps explicit ids (IVF, IDMap); other indexes number vectors 0..n-1 themselves."""
        return self.is_ivf or self.id_map

    @property
    def is_exact(self) -> bool:
        """Whether a search of it is the exact inner-product search over the vectors it was given: a plain Flat,
        behind an IDMap or not (an allow-list: a graph or another part faiss knows and this parser does not is not)."""
        return re.fullmatch(r"(IDMap2?,)?Flat|Flat,IDMap2?", self.factory.replace(" ", "")) is not None

    @property
    def has_codes(self) -> bool:
        """Whether an index of this factory gets a codes store: it compresses its vectors (an IVF, SQ, PQ, OPQ or PCA
        index, whatever its coarse quantiser) into codes of its own, not a Flat's plain vectors or a graph's nodes
        (``HNSW32,SQ8``, ``NSG32``), which faiss cannot encode one by one. An id map encodes through the index it
        wraps (``unmapped``)."""
        return self.needs_training and not self.graph

    @property
    def min_train(self) -> int:
        """Fewest training vectors for every k-means in this index to see 39 points per centroid, and for a PCA
        to have as many vectors as output dimensions (faiss refuses fewer)."""
        ks = [1]
        if self.nlist:
            ks.append(self.nlist)
        if self.pq_m:
            ks.append(2**self.pq_nbits)
        if self.opq_m:  # OPQ trains a PQ with the final codes' bits (8 without a PQ)
            ks.append(2 ** (self.pq_nbits if self.pq_m else 8))
        return max(MIN_POINTS_PER_CENTROID * max(ks) if len(ks) > 1 else 1, self.pca_dim or 1)

    def check_dim(self, dim: int) -> None:
        """Raise FactoryError when a pre-transform cannot be applied to vectors of dimension ``dim`` (faiss would
        only fail when training)."""
        if self.pca_dim is not None and self.pca_dim > dim:
            raise FactoryError(f"factory {self.factory!r}: PCA{self.pca_dim} cannot reduce vectors of dimension {dim} "
                               f"to {self.pca_dim}; use PCA{dim} or fewer dimensions")


_ID_MAP = re.compile(r"IDMap2?,(.+)|(.+),IDMap2?")  # faiss takes the wrapper as a prefix or a suffix
_REFINE = re.compile(r"(.+),(?:RFlat|Refine\(.+\))")  # a refinement around the index (validate_factory refuses it)
_TRANSFORM = re.compile(r"PCAW?R?\d+|OPQ\d+(?:_\d+)?|L2[nN]orm|RR\d*|HR\d*|ITQ\d*|Pad\d+")
_OPQ = re.compile(r"OPQ(\d+)(?:_(\d+))?")
_PCA = re.compile(r"PCAW?R?(\d+)")
_GRAPH = re.compile(r"(?:HNSW|NSG)\d*(?:[,_](.*))?")  # the vectors sit in the graph's nodes: no standalone codes
# an IVF's coarse quantiser: flat, an HNSW or NSG graph, or any index in parentheses (``IVF4096(PQ8x4fs)``)
_IVF = re.compile(r"IVF(\d+)([kM]?)(?:_HNSW\d*|_NSG\d+|\(.*\))?")
_PQ = re.compile(r"PQ(\d+)(?:x(\d+))?(?:(fsr?)(?:_\d+)?|np)?")
_SQ = re.compile(r"SQ(?:fp16|bf16|8_direct_signed|8_direct|\d+)")
_NLIST_UNITS = {"": 1, "k": 1024, "M": 1024 * 1024}


def _split_first(description: str) -> tuple[str, str]:
    """``description`` cut at its first comma outside parentheses (a coarse quantiser's own factory string may hold
    commas: ``IVF64(IVF8,Flat),SQ8`` -> ``IVF64(IVF8,Flat)``, ``SQ8``); the rest is ``""`` without one."""
    depth = 0
    for i, c in enumerate(description):
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            return description[:i], description[i + 1 :]
    return description, ""


def parse_factory(factory: str) -> FactorySpec:
    """Read nlist, OPQ/PQ sub-spaces, PQ bits, the scalar quantiser, a graph and an id map from a factory string, in
    the order faiss's ``index_factory`` reads it: an ``IDMap``/``IDMap2`` wrapper (prefix or suffix), pre-transforms
    (``OPQ16_64,``, ``PCA64,`` ...), then the index: a graph (``HNSW32``, ``HNSW32,SQ8``, ``NSG32``), an IVF whose
    first part names its coarse quantiser (``IVF1024``, ``IVF64k``, ``IVF1024_HNSW32``, ``IVF1024(PQ8)``) and whose
    rest its codes, or the codes alone (``Flat``, ``SQ8``, ``PQ16x4fs``). Parts it does not know are left to faiss."""
    if not factory or factory.strip() != factory:
        raise FactoryError(f"invalid factory string {factory!r}")
    fields: dict[str, Any] = {}
    description = factory
    if m := _ID_MAP.fullmatch(description):
        fields["id_map"] = True
        description = m.group(1) or m.group(2)
    if m := _REFINE.fullmatch(description):
        description = m.group(1)
    head, rest = _split_first(description)
    while rest and _TRANSFORM.fullmatch(head):
        if m := _OPQ.fullmatch(head):
            fields["opq_m"], fields["opq_dim"] = int(m.group(1)), int(m.group(2)) if m.group(2) else None
        elif m := _PCA.fullmatch(head):
            fields["pca_dim"] = int(m.group(1))
        description = rest
        head, rest = _split_first(description)
    codes = description
    if m := _GRAPH.fullmatch(description):
        fields["graph"] = True
        codes = m.group(1) or ""
    elif m := _IVF.fullmatch(head):
        fields["nlist"] = int(m.group(1)) * _NLIST_UNITS[m.group(2)]
        codes = rest
    if m := _PQ.fullmatch(codes):
        fields["pq_m"] = int(m.group(1))
        fields["pq_nbits"] = int(m.group(2)) if m.group(2) else 8
        fields["fast_scan"] = m.group(3) is not None
    elif _SQ.fullmatch(codes):
        fields["sq"] = codes
    if fields.get("nlist") == 0 or fields.get("pq_m") == 0 or fields.get("opq_m") == 0 or fields.get("pca_dim") == 0:
        raise FactoryError(f"factory {factory!r}: nlist, M and the PCA dimension must be positive")
    return FactorySpec(factory=factory, **fields)


def unwrapped(index: Any) -> Any:
    """The index behind a pre-transform (OPQ, PCA, ...) wrapper, downcast to its concrete type."""
    import faiss

    return faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index


def unmapped(index: Any) -> Any:
    """``index`` behind its id map (``IDMap,...``: the index holding the vectors and codes), downcast; ``index`` itself
    (downcast) without one. An id map stores and encodes nothing itself (its ``sa_encode`` raises): codes are written,
    decoded and copied through this."""
    import faiss

    index = faiss.downcast_index(index)
    return faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2) else index


def ivf_of(index: Any) -> Any | None:
    """The IVF part of a faiss index (behind any pre-transform or id map), downcast; None without inverted lists.
    An object with ``ivf_index`` (``core.segment.SegmentedFaiss``) answers for that index."""
    import faiss

    index = getattr(index, "ivf_index", index)

    try:
        return faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:  # faiss: "could not extract IVF index"
        return None
