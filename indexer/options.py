"""The options of the index commands, each declared once: a dataclass field with its default and help text.

    spanseek index build --help        # every BuildOptions field is a flag (core.options)
    spanseek index add --help          # the EncodeOptions fields

This module imports no torch or faiss, so the command line starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spanseek.core.lexical import ANALYZER, ANALYZERS, AnalyzerName
from spanseek.core.options import option


@dataclass(frozen=True, kw_only=True)
class EncodeOptions:
    """Encoding the corpus (every index command that encodes passages)."""

    shard_passages: int = option(2000, "passages per resumable shard")
    max_batch_tokens: int = option(8192, "tokens per encoder forward pass")
    precision: Literal["auto", "fp32", "bf16"] = option("auto", "encoder precision: auto = bf16 where the device "
                                                        "supports it, else fp32")
    device: str = option("auto", "encoder device: auto, cpu, cuda, cuda:N")
    ray: str | None = option(None, "encode on a Ray cluster (extra `ray`) at this address (ray://host:10001, auto), "
                             "or 'local' to start a local one", metavar="ADDRESS")
    progress: bool = option(True, "show progress bars", cli=False)  # the commands' --quiet

    def __post_init__(self) -> None:
        if self.shard_passages < 1 or self.max_batch_tokens < 1:
            raise ValueError(f"--shard-passages and --max-batch-tokens must be >= 1, got {self.shard_passages} and "
                             f"{self.max_batch_tokens}")
        if self.ray == "local":  # Ray starts a local cluster when given no address
            object.__setattr__(self, "ray", "")


@dataclass(frozen=True, kw_only=True)
class BuildOptions(EncodeOptions):
    """Building the index (`spanseek index build`): faiss factory, stores, defaults recorded in the manifest.

    ``filter_threshold`` needs a model with a filter head; ``vector_source`` and ``nprobe`` are the searcher's
    defaults recorded in the manifest; ``recall_sample`` the queries of the recall that `index verify` re-measures;
    ``store`` the fine store's precision (``core.fine_store``); ``keep_codes`` whether a compressed index also keeps
    ``codes.npy``, a second copy of its codes that only the ``codes`` neighbour source reads; ``analyzer`` the lexical
    part's (``core.lexical.ANALYZERS``)."""

    factory: str = option("Flat", "faiss factory string (inner product), e.g. Flat, IVF256,SQ8, "
                          "OPQ32,IVF256,PQ32x4fs, or 'auto' (chosen from the token count; docs/compressed-index.md)")
    max_train: int = option(262_144, "upper bound on the faiss training sample")
    nprobe: int | None = option(None, "IVF lists probed by default (stored in the index; default: ~3% of the lists, "
                                "at least 8; at most nlist, and only for an IVF factory)")
    vector_source: Literal["fine", "codes"] = option("fine", "default neighbour vectors for span completion: the "
                                                     "fine store or decoded codes")
    store: str | None = option(None, "fine store precision: fp16 / sq8 / sq4 = 768 / 384 / 192 B per token at d 384, "
                               "pq192 / pq128 / pq96 = that many B, pca192 (default: by corpus size with --factory auto, else fp16)")
    keep_codes: bool | None = option(None, "also keep codes.npy, the compressed codes in token order (default: only "
                                     "with --vector-source codes; a Flat index has no codes)")
    on_disk: bool = option(False, "IVF inverted lists in index.ivfdata, memory-mapped, merged from blocks (RAM "
                           "bounded by the training sample and one block); with --factory auto, a corpus too small "
                           "for IVF is a Flat index in RAM")
    gpu: bool | None = option(None, "train and fill faiss on a GPU (default: when faiss has one)")
    filter_threshold: float | None = option(None, "index only tokens whose start or end filter probability is >= "
                                            "this (needs a model with a filter head)")
    recall_sample: int = option(200, "own vectors used as queries for the recall recorded in the manifest (0: skip)")
    analyzer: AnalyzerName = option(ANALYZER, "how passages and questions are split into BM25 terms (docs/indexing.md; "
                                    "`index add-lexical --analyzer` changes a built index's)")

    def __post_init__(self) -> None:
        super().__post_init__()
        # checked here, not after encoding: these are read only at the faiss stage, after the whole corpus is
        # encoded, where a bad value fails (a negative recall sample), is ignored or quietly changes the index
        if self.nprobe is not None:
            _check_count("nprobe", self.nprobe, 1)
        _check_count("max_train", self.max_train, 1)
        _check_count("recall_sample", self.recall_sample, 0, " (0: skip the recall)")
        if self.analyzer not in ANALYZERS:  # refused before the corpus is encoded, not at the BM25 stage after it
            raise ValueError(f"analyzer {self.analyzer!r} is not a lexical analyzer; known: {', '.join(ANALYZERS)}")
        if self.vector_source == "codes" and self.keep_codes is False:
            raise ValueError("keep_codes off leaves out the codes store (codes.npy) that vector_source 'codes' reads")
        threshold = self.filter_threshold
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int | float)
                                      or not 0.0 <= threshold <= 1.0):  # NaN too: a probability, or no token is kept
            raise ValueError(f"filter_threshold must be a probability between 0 and 1, got {threshold!r}")


def _check_count(name: str, value: object, least: int, note: str = "") -> None:
    """Refuse a count that is not an integer >= ``least`` (ValueError naming the option)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}{note}, got {value!r}")


# `corpus from-files` and `sync` walk folders alike (``indexer.ingest._files``): one help text for their flag
# the memory the process that reads files may take (``indexer.read_process``): `corpus from-files
# --read-memory-bytes` and the service's file_read_memory_bytes. A 30 MiB HTML page of 1.5M table cells took 5.9 GB
# to read, refused after 52 s at this; the reading process itself holds some 110 MB.
DEFAULT_READ_MEMORY = 2 << 30
# the seconds a file may take to read: `corpus from-files --read-timeout-s` (CPU time of the reading process,
# ``indexer.read_process.within_cpu``) and the service's file_read_timeout_s (the clock's). Markdown of table rows
# reads at ~40 us of CPU a byte: 32 MiB of them held a corpus for some 20 minutes.
DEFAULT_READ_TIMEOUT_S = 300.0
FOLLOW_LINKS_HELP = ("also read the files that links in a folder lead to outside it (by default such a link is "
                     "skipped and named: one planted in a shared folder would read its target, ~/.ssh/id_rsa)")

# What each file format gives each of its passages as its own metadata (``passage_meta``, which a ``passage`` filter
# condition reads), by format (``indexer.ingest.FORMATS``' names), with the suffixes that name it in help texts: every
# command that reads files says it (`corpus from-files --help`, `sync --help`), and docs/indexing.md's table of
# passage fields lists the same.
PASSAGE_FIELDS: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("pdf",), ("page", "page_end", "section"), "page (from 1), page_end (where its paragraph runs onto a later "
     "page) and section (the bookmark path, in a PDF with bookmarks)"),
    (("word", "opendocument", "rtf", "markdown", "html", "e-mail"), ("section",), "section (the heading path: "
     "Install > Linux; an e-mail's from its HTML part)"),
    (("powerpoint", "opendocument presentation"), ("slide", "section"), "slide (from 1) and section (the slide's "
     "title)"),
    (("epub",), ("chapter", "section"), "chapter (from 1, in reading order) and section (the heading path in it)"),
    (("excel", "opendocument spreadsheet", "csv"), ("sheet", "row"), "sheet (its name; a CSV file's is the file's "
     "name) and row (from 1, as the application numbers rows)"),
    (("text",), (), "none"),
)
_SUFFIXES = {"pdf": ".pdf", "word": ".docx", "opendocument": ".odt", "markdown": ".md", "html": ".html",
             "rtf": ".rtf", "e-mail": ".eml", "excel": ".xlsx", "opendocument spreadsheet": ".ods", "csv": ".csv",
             "powerpoint": ".pptx", "opendocument presentation": ".odp", "epub": ".epub", "text": ".txt"}
PASSAGE_FIELDS_HELP = "Passage fields (each passage's own metadata, which a `passage` filter condition reads): " + "; ".join(
    f"{'/'.join(_SUFFIXES[f] for f in formats)} {'give' if len(formats) > 1 else 'gives'} {what}"
    for formats, _, what in PASSAGE_FIELDS) + "."
