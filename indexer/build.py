"""Build a phrase index from a JSONL corpus: encode in shards (resumable), merge, fill faiss, write the manifest.

    spanseek index build --corpus corpus.jsonl --model default --out INDEX_DIR [--factory Flat|auto|IVF1024,SQ8|...]
        [--filter-threshold T] [--gpu/--no-gpu] [--store fp16|sq8|sq4] [--on-disk] [--ray ADDRESS|local]

The corpus is read through first (``core.io.check_corpus``: a bad line or a repeated id anywhere is refused before
the model loads; what it counts sizes the progress bar; for a factory that needs training its tokens are counted,
until there are enough, so a corpus too small for it is refused before any encoding), then as a stream: the passage and document
stores are written as it goes and passages are encoded in shards of ``shard_passages``. Each finished shard is a
directory renamed into place and keyed by a hash of its passages and the model, so a killed build resumes by re-using
every shard whose passages are unchanged, also after the corpus was fixed, with another ``--shard-passages`` (the
finished shards keep their sizes, also past one a Ray build had not finished, and the new one applies after them) or with another ``--factory`` (the shards do not
depend on it: a build that stopped at the faiss stage resumes there); with ``--precision auto`` it encodes in the
precision of its first shard (``shard_precision``). ``--out`` must be new, empty or such an
unfinished build: a folder of other files, or one holding the corpus, is refused (``indexer.out_dir``) rather than
written over; a build holds its writer lock (``build_lock``), so a second build into it is refused at its start.
Document ids must be unique. The merge writes the final arrays through memory maps; then the factory is resolved (``auto``)
and validated against the number of tokens to index, faiss is trained on a sample (on GPU when faiss has one) and
filled chunk by chunk, compressed indexes get a codes store (``indexer.compress``), the passages a BM25 index
(``indexer.lexical``), the recall against exact search is measured on a sample, and the manifest (with every file's
checksum) is written last; then the shards and other scratch are removed.

With a filter head and ``filter_threshold`` T, start/end filter probabilities are computed at encode time; faiss
holds only tokens with either probability >= T, while the fine store and codes keep every token.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from spanseek.core import integrity, phrase_index
from spanseek.core.backbones import backbone_fingerprint
from spanseek.core.config import EncoderConfig
from spanseek.core.encoding import PassageEncoder, pick_device, pick_precision
from spanseek.core.faiss_spec import ivf_of
from spanseek.core.fieldindex import FieldIndex
from spanseek.core.fine_store import detect_kind, open_fine_store
from spanseek.core.io import (
    ReadStats,
    atomic_path,
    check_corpus,
    new_memmap,
    read_corpus,
    save_npy_atomic,
    unique_ids,
)
from spanseek.core.model import (
    CONFIG_NAME,
    load_model,
    load_tokenizer,
    model_fingerprint,
    phrase_fingerprint,
    resolve_model,
)
from spanseek.core.text import tokenize_passages
from spanseek.indexer import shards as shard_files
from spanseek.indexer.compress import filter_probabilities, kept_token_ids, write_codes
from spanseek.indexer.faiss_index import (
    AUTO,
    FLAT_MAX,
    FactoryError,
    FactorySpec,
    add_vectors,
    create_index,
    default_nprobe,
    nprobe_problem,
    parse_factory,
    resolve_factory,
    train_index,
    training_size,
    use_gpu,
    validate_factory,
    write_faiss,
)
from spanseek.indexer.fine_store_build import check_store_option, resolve_store, write_fine_store
from spanseek.indexer.ingest import corpus_problem
from spanseek.indexer.interrupt import Committed, stopped_cleanly
from spanseek.indexer.lexical import write_lexical
from spanseek.indexer.ondisk import (
    add_on_disk,
    blocks_key,
    check_on_disk,
    save_trained_index,
    saved_trained_index,
)
from spanseek.indexer.options import BuildOptions
from spanseek.indexer.out_dir import BuildError, build_lock, check_out_dir, refuse_finished, remove_scratch
from spanseek.indexer.ray_encode import SHARDS_PER_ROUND
from spanseek.indexer.recall import EXACT_RECALL, measure_recall

log = logging.getLogger(__name__)

SHARDS = integrity.SHARDS


def encode_corpus(corpus: Path, out: Path, phrase_model, opts: BuildOptions, fingerprint: str,
                  existing_ids: Iterable[str] = (), existing_name: str = "",
                  model_dir: Path | None = None, checked: ReadStats | None = None) -> tuple[int, ReadStats]:
    """Read ``corpus`` once: write the passage and document stores into ``out`` and encode its passages into
    shards, re-using finished shards of the same passages. Returns (shard count, read stats).

    ``checked`` is what ``check_corpus`` read of it: it sizes the progress bar (passages encoded, moving after each
    forward batch, with their rate and the time left), which otherwise has no total.

    Document ids must be unique and not among ``existing_ids`` (an index's; ``existing_name`` names it): a
    repeated id raises CorpusError naming the file and line. With ``opts.ray`` the shards are encoded on a Ray
    cluster by actors that load ``model_dir`` (``indexer.ray_encode``).
    """
    device = next(phrase_model.parameters()).device
    tokenizer = load_tokenizer(phrase_model.config)
    precision = shard_precision(out, opts.precision, device)
    encoder = PassageEncoder(phrase_model, tokenizer, precision=precision, max_batch_tokens=opts.max_batch_tokens)
    stats = ReadStats()
    k, buf, reused = 0, [], 0
    # an interrupted build's shards keep their sizes (another --shard-passages re-encoded every one); the rest take
    # ``shard_passages``
    sizes = shard_files.finished_shard_sizes(out)
    if any(size != opts.shard_passages for size in sizes):
        log.info("the first %d shards keep the sizes an interrupted build encoded them with (%s passages) so that "
                 "they are re-used; --shard-passages %d applies after them", len(sizes),
                 ", ".join(sorted({str(size) for size in sizes}, key=int)), opts.shard_passages)
    # passages encoded (the corpus is streamed: their number comes from the check's read); a shard's share moves
    # with its tokens encoded, a forward batch at a time, so a corpus of one shard does not sit at 0 until it is done
    bar = tqdm(total=checked.paragraphs if checked is not None else None, desc="encode", unit="passage",
               disable=not opts.progress)
    if opts.ray is not None and model_dir is None:
        raise BuildError("encoding on Ray needs the model's directory")
    pending: list[tuple[Path, str, list[str]]] = []  # shards for the Ray cluster

    def encode_pending() -> None:
        from spanseek.indexer.ray_encode import encode_on_ray

        encode_on_ray(pending, model_dir or Path(), precision, opts.max_batch_tokens, opts.ray)
        bar.update(sum(len(texts) for _, _, texts in pending))
        pending.clear()

    def flush() -> None:
        nonlocal k, buf, reused
        dest, key = shard_files.shard_dir(out, k), shard_files.shard_key(fingerprint, precision, buf)
        if shard_files.has_shard(dest, key):
            reused += 1
            count_done(bar, len(buf))
        elif opts.ray is not None:
            pending.append((dest, key, buf))
            if len(pending) >= SHARDS_PER_ROUND:
                encode_pending()
        else:
            start, n = bar.n, len(buf)

            def moved(fraction: float) -> None:
                bar.update(start + round(fraction * n) - bar.n)

            shard_files.encode_shard(encoder, tokenizer, buf, dest, key, progress=moved if opts.progress else None)
            bar.update(start + n - bar.n)
        k, buf = k + 1, []

    docs = unique_ids(read_corpus(corpus, stats), corpus, existing_ids, existing_name)
    with atomic_path(out / phrase_index.PASSAGES) as tp, atomic_path(out / phrase_index.DOCS) as td:
        with open(tp, "w", encoding="utf-8") as fp, open(td, "w", encoding="utf-8") as fd:
            for d, doc in enumerate(docs):
                fd.write(json.dumps(phrase_index.doc_record(doc.id, doc.title, doc.meta), ensure_ascii=False) + "\n")
                for p, text in enumerate(doc.paragraphs):
                    fp.write(json.dumps(phrase_index.passage_record(d, p, text, doc.paragraph_meta(p)), ensure_ascii=False) + "\n")
                    buf.append(text)
                    if len(buf) == (sizes[k] if k < len(sizes) else opts.shard_passages):
                        flush()
            if buf:  # an empty shard cannot be encoded
                flush()
            if stats.paragraphs == 0:  # refused before the stores are renamed into place: ``out`` stays as it was
                raise BuildError(f"corpus {corpus} has no non-empty passages")
    if pending:
        encode_pending()
    bar.close()
    if reused:
        log.info("re-used %d of %d encoded shards", reused, k)
    log.info("corpus: %d documents, %d passages (skipped %d empty documents, %d empty paragraphs)",
             stats.documents, stats.paragraphs, stats.empty_documents, stats.empty_paragraphs)
    return k, stats


def count_done(bar: tqdm, n: int) -> None:
    """Move ``bar`` past ``n`` passages that took no work (a resumed build's re-used shards) without counting them in
    its rate: a burst of them in no time made the rate thousands of passages a second and the time left nothing, and
    held the bar still until as many again were encoded (tqdm spaces its refreshes by the fastest rate seen)."""
    if bar.disable:
        return
    bar.n += n
    bar.initial += n  # (the rate averaged over the whole run leaves them out too)
    bar.last_print_n = bar.n
    bar.unpause()  # (the time since the last refresh, spent re-using them, is no encoding time either)
    bar.refresh()


def shard_precision(out: Path, asked: str, device) -> str:
    """The inference precision of a build's shards: ``asked`` (``core.encoding.pick_precision``), or, for ``auto`` in
    a build resumed in ``out``, the one its first shard was encoded in. ``auto`` times bf16 against fp32 on a CPU
    with AVX-512 and no AMX, and a probe beside a busy job picks otherwise; the shards are keyed by their precision,
    so another pick re-encoded every one."""
    held = shard_files.shard_precision(shard_files.shard_dir(out, 0))
    if asked == "auto" and held is not None:
        log.info("precision auto: %s, the precision the shards of the build resumed in %s were encoded in", held, out)
        return held
    return pick_precision(asked, device)


def write_fields(docs: Path, passages: Path, dest: Path) -> None:
    """Write the field index (``core.fieldindex``) of the document store ``docs`` and the passage store ``passages``
    to exactly ``dest``. Of each passage only its metadata is kept (a passage without any holds one shared empty
    record): ``index add`` holding every passage's text took about 1 KB a passage of 100 words, some 20 GB at 20M
    passages."""
    no_meta: dict[str, Any] = {}
    metas = [{"meta": p["meta"]} if "meta" in p else no_meta for p in phrase_index.iter_jsonl(passages)]
    FieldIndex.build(phrase_index.read_jsonl(docs), metas).save(dest)


def load_filter_scores(index_dir: Path) -> np.ndarray | None:
    """The (N, 2) filter probabilities of an index or staging directory, or None when the model has no filter."""
    path = index_dir / phrase_index.FILTER_SCORES
    return np.load(path, mmap_mode="r") if path.is_file() else None


def merged_key(out: Path) -> str:
    """The content key of the vectors a build in ``out`` merged from its shards (``shards.merged_key``); empty where
    none were merged there (a reindex links a finished index's stores)."""
    try:
        return (out / SHARDS / shard_files.MERGED_KEY).read_text()
    except OSError:
        return ""


def fill_faiss(out: Path, dim: int, opts: BuildOptions, kept: str | None = None) -> tuple[str, dict, int]:
    """Resolve and validate the factory, train, add the kept tokens, write index.faiss (+ codes.npy).

    Returns (factory, faiss_params for the manifest, tokens indexed). Raises FactoryError before any training when the
    corpus is too small for the factory, saying ``kept``: what stays in ``out`` for a rerun (a build's encoded shards
    by default).
    """
    kept = kept or f"the encoded shards in {out} are kept: rerun with another --factory to resume"
    vectors = open_fine_store(out, detect_kind(out))
    scores = load_filter_scores(out)
    if opts.filter_threshold is not None and scores is None:
        raise BuildError(f"{out} has no filter scores ({phrase_index.FILTER_SCORES}): its model has no filter head")
    ids = kept_token_ids(scores, opts.filter_threshold, len(vectors))
    factory = resolve_factory(opts.factory, dim, len(ids), opts.on_disk)
    on_disk = opts.on_disk and not (opts.factory == AUTO and parse_factory(factory).nlist is None)
    if on_disk != opts.on_disk:  # a small corpus: auto picks Flat, which has no lists to put on disk
        log.warning("--factory auto picked %s for %d tokens: its vectors are held in RAM (%.0f MB), as on-disk lists "
                    "need an IVF index (auto picks one from %d tokens)", factory, len(ids),
                    len(ids) * dim * 4 / 1e6, FLAT_MAX)
    try:
        spec = validate_factory(factory, dim, len(ids))
        spec.check_dim(dim)
    except FactoryError as e:
        raise FactoryError(f"{e} ({kept})") from None
    nprobe = opts.nprobe
    if (problem := nprobe_problem(spec, nprobe)) is not None:
        if opts.factory != AUTO:  # (a build refused it before encoding; a reindex before training)
            raise FactoryError(problem)
        nprobe = spec.nlist if spec.nlist else None  # what auto picked for the corpus: the nearest that exists
        log.warning("--factory auto picked %r for %d tokens: %s; %s", factory, len(ids), problem,
                    f"the index probes all {nprobe}" if nprobe else "--nprobe is left out")
    if on_disk:
        check_on_disk(spec)
    if (problem := codes_problem(spec, opts)) is not None:  # (auto's pick; a build refused a given factory's at its start)
        if opts.factory != AUTO or opts.vector_source == "codes":
            raise FactoryError(f"{problem} ({kept})")
        log.warning("--factory auto picked %r for %d tokens: it has no codes, so --keep-codes writes no codes.npy",
                    factory, len(ids))
    contiguous = len(ids) == len(vectors)
    gpu = use_gpu(opts.gpu)
    n_train = training_size(spec, len(ids), opts.max_train)
    key = blocks_key(factory, vectors, ids, n_train, merged_key(out)) if on_disk else ""
    index = saved_trained_index(out, key) if on_disk else None
    train_seconds = 0.0
    if index is None:
        index = create_index(spec, dim, contiguous_ids=contiguous)
        train_seconds = train_index(index, vectors, n_train, gpu=gpu, pool=None if contiguous else ids)
        if on_disk:
            save_trained_index(out, index, key)
    t1 = time.perf_counter()
    (out / phrase_index.IVFDATA).unlink(missing_ok=True)  # a killed earlier build's
    if on_disk:
        add_on_disk(index, vectors, ids, out, progress=opts.progress, gpu=gpu)
    else:
        add_vectors(index, vectors, ids, progress=opts.progress, gpu=gpu)
    add_seconds = time.perf_counter() - t1
    params = {
        "max_train": opts.max_train, "train_size": n_train, "requested_factory": opts.factory, "gpu": gpu,
        "train_seconds": round(train_seconds, 2), "add_seconds": round(add_seconds, 2),
        "vector_source": opts.vector_source, "on_disk": on_disk,
    }
    ivf = ivf_of(index)
    if ivf is not None and spec.nlist:
        nprobe = nprobe if nprobe is not None else default_nprobe(spec.nlist)
        ivf.nprobe = nprobe  # stored in index.faiss: the search-time default
        params.update(nlist=spec.nlist, nprobe=nprobe)
    keep_codes = opts.keep_codes if opts.keep_codes is not None else opts.vector_source == "codes"
    if spec.has_codes and keep_codes:
        t2 = time.perf_counter()
        params["code_size"] = write_codes(index, vectors, out / phrase_index.CODES, progress=opts.progress)
        params["codes_seconds"] = round(time.perf_counter() - t2, 2)
    else:
        (out / phrase_index.CODES).unlink(missing_ok=True)  # a killed earlier build's (reindex never links it)
    if opts.recall_sample:  # an exact index is its own oracle: measuring it took a fifth of a demo build
        params["recall"] = EXACT_RECALL if spec.is_exact else measure_recall(index, vectors, ids,
                                                                             sample=opts.recall_sample)
    write_faiss(index, out / phrase_index.FAISS_INDEX)
    return factory, params, int(index.ntotal)


def build_index(corpus: str | Path, model: str | Path, out: str | Path,
                opts: BuildOptions | None = None) -> phrase_index.Manifest:
    """Build (or resume building) an index of ``corpus`` with ``model`` in ``out``. Returns its manifest."""
    corpus, out = Path(corpus), Path(out)
    opts = opts or BuildOptions()
    problem = corpus_problem(corpus)  # a directory, a Markdown or SQuAD file...: say which command converts it
    if problem:
        raise BuildError(problem)
    model_dir = resolve_model(model)
    check_out_dir(out, corpus)
    spec = parse_factory(opts.factory) if opts.factory != "auto" else None  # syntax errors before any encoding
    if spec is not None:  # and what faiss itself refuses (an unknown part, a dimension PQ does not divide)
        check_factory_for(spec, EncoderConfig.load(model_dir / CONFIG_NAME).dim)
    if spec is not None and opts.on_disk:
        check_on_disk(spec)
    for problem in (nprobe_problem(spec, opts.nprobe), codes_problem(spec, opts)) if spec is not None else ():
        if problem is not None:
            raise FactoryError(problem)
    check_store_option(opts.store)
    check_ray(opts)
    if opts.vector_source not in phrase_index.VECTOR_SOURCES:
        raise BuildError(f"vector_source must be one of {phrase_index.VECTOR_SOURCES}, got {opts.vector_source!r}")
    with build_lock(out), stopped_cleanly(f"the build in {out}", out):
        check_out_dir(out, corpus)  # again: a build that held the lock until now may have finished the index
        return _build_locked(corpus, model, model_dir, out, opts, spec)


def codes_problem(spec: FactorySpec, opts: BuildOptions) -> str | None:
    """What is wrong with ``--vector-source codes`` or ``--keep-codes`` for ``spec``: both are about the codes store
    (``codes.npy``), which only a compressed factory has (a Flat index keeps the vectors themselves); None when it
    fits (or neither is asked for)."""
    if spec.has_codes:
        return None
    if opts.vector_source == "codes":
        return (f"--vector-source codes decodes neighbour vectors from the codes of a compressed index; "
                f"{spec.factory!r} has none (use a compressed --factory, or --vector-source fine)")
    if opts.keep_codes:
        return (f"--keep-codes keeps the codes of a compressed index (codes.npy); {spec.factory!r} stores the vectors "
                "themselves and has none (use a compressed --factory, or leave out --keep-codes)")
    return None


def check_ray(opts: BuildOptions) -> None:
    """BuildError now, not at the first shard once the model has loaded and the stores are written, for ``--ray``
    without Ray installed."""
    if opts.ray is not None and importlib.util.find_spec("ray") is None:
        raise BuildError("--ray needs the `ray` extra: pip install 'spanseek[ray]'")


def check_factory_for(spec: FactorySpec, dim: int) -> None:
    """FactoryError now, before any encoding, where the factory does not fit vectors of ``dim`` or faiss cannot make
    it (``IVF64,Garbage``): an empty index is made and dropped. The corpus size is checked once it is encoded."""
    if dim > 0:
        validate_factory(spec.factory, dim, n=sys.maxsize)
        create_index(spec, dim, contiguous_ids=True)


def check_corpus_size(corpus: Path, spec: FactorySpec, config: EncoderConfig, batch: int = 256) -> None:
    """FactoryError, before the model loads, where ``corpus`` has too few tokens to train ``spec`` (fewer than
    ``spec.min_train``): its passages are tokenised with the model's tokenizer, as encoding does, a batch at a time
    until there are enough, so a large corpus is read only as far as its first tokens. A filter threshold indexes
    fewer tokens still; what it keeps is known only once encoded (``fill_faiss`` checks it again)."""
    if not spec.needs_training:
        return
    tokenizer, n, texts = load_tokenizer(config), 0, []
    for doc in read_corpus(corpus):
        texts.extend(doc.paragraphs)
        if len(texts) >= batch:
            n += sum(len(t) for t in tokenize_passages(tokenizer, texts))
            texts = []
            if n >= spec.min_train:
                return
    n += sum(len(t) for t in tokenize_passages(tokenizer, texts))
    if n < spec.min_train:
        validate_factory(spec.factory, config.dim, n)  # (raises, naming the requirement and what would fit)


def _build_locked(corpus: Path, model: str | Path, model_dir: Path, out: Path, opts: BuildOptions,
                  spec: FactorySpec | None) -> phrase_index.Manifest:
    """``build_index`` under ``out``'s writer lock."""
    if (out / SHARDS).is_dir():
        log.info("resuming the build in %s (re-using the shards whose passages are unchanged)", out)
    t_start = time.time()
    checked = check_corpus(corpus)  # a bad line or a repeated id anywhere: refused now, not once its passages are encoded
    if spec is not None:  # a corpus too small for the factory: refused now, not once every passage is encoded
        check_corpus_size(corpus, spec, EncoderConfig.load(model_dir / CONFIG_NAME))
    phrase_model = load_model(model).to(pick_device(opts.device))
    if opts.filter_threshold is not None and phrase_model.filter_head is None:
        raise BuildError(f"--filter-threshold needs a model with a filter head; {model} has none "
                         "(train one with `spanseek train filter`)")
    if spec is not None:
        spec.check_dim(phrase_model.dim)  # the dimension too; sizes are checked once the tokens are counted
    fingerprint = model_fingerprint(model_dir)

    n_shards, stats = encode_corpus(corpus, out, phrase_model, opts, fingerprint,  # 1. stores + encoded shards
                                    model_dir=model_dir, checked=checked)
    n_tokens = merge_shards(out, n_shards, phrase_model.dim)  # 2. merge shards into the final arrays
    if n_tokens == 0:  # every passage is only characters the tokenizer drops (zero-width, control, ...)
        raise BuildError(f"corpus {corpus} has no non-empty passages: none of its {stats.paragraphs} passages has a "
                         "token the model's tokenizer keeps (only spaces, zero-width or control characters)")
    factory, faiss_params, indexed = fill_faiss(out, phrase_model.dim, opts)  # 3. faiss (+ codes)
    fine_store = resolve_store(opts.store, opts.factory, n_tokens)
    faiss_params["fine_store"] = write_fine_store(out, fine_store, opts.max_train, opts.progress,  # 4. fine store
                                                  keep=filtered_ids(out, opts.filter_threshold, n_tokens))
    lexical = write_lexical(out, analyzer=opts.analyzer)  # 5. BM25 over the passages, and the field index of the documents
    with atomic_path(out / phrase_index.FIELDS) as tmp:
        write_fields(out / phrase_index.DOCS, out / phrase_index.PASSAGES, tmp)
    remove_scratch(out)  # leftovers of killed steps would otherwise be taken for index files

    # 6. manifest last: its presence marks a finished index
    manifest = phrase_index.Manifest.create(out, {
        "encoder": phrase_model.config.to_dict(), "model_fingerprint": fingerprint, "model_ref": str(model),
        "factory": factory, "faiss_params": faiss_params, "documents": stats.documents,
        "passages": stats.paragraphs, "tokens": n_tokens, "indexed_tokens": indexed,
        "filter_threshold": opts.filter_threshold, "build_seconds": round(time.time() - t_start, 2),
        "phrase_fingerprint": phrase_fingerprint(model_dir), "lexical": lexical, "fine_store": fine_store,
        "backbone_fingerprint": backbone_fingerprint(phrase_model.config.backbone,
                                                     weights=phrase_model.config.weights == "lora"),
    })
    return finished(out, manifest)


def finished(out: Path, manifest: phrase_index.Manifest) -> phrase_index.Manifest:
    """Write ``manifest`` into ``out`` (its presence marks a finished index), then drop what only a resumed build
    needed: the encoded shards and an on-disk build's ``ivf_blocks/``. Returns the manifest.

    A stop (Ctrl-C, SIGTERM) once the manifest is in place lands after the build's commit point: the index is
    complete, so its scratch is removed all the same and the stop is a ``Committed`` one (said as complete, with
    nothing to rerun: the same command would be refused by the finished index)."""
    try:
        manifest.write(out)
        remove_scratch(out)
    except KeyboardInterrupt as e:
        if not (out / phrase_index.MANIFEST).is_file():
            raise  # (before the commit point: the same command resumes the build)
        remove_scratch(out)
        raise Committed(str(e), finished=True) from None
    return manifest


def reindex(src: str | Path, out: str | Path, opts: BuildOptions,
            filter_model: str | Path | None = None) -> phrase_index.Manifest:
    """A new index in ``out`` over the token vectors of the built index ``src`` with another faiss factory (and,
    with ``opts.store``, another fine store: fp16 converts to sq8 / sq4, not back).

    The stores are hard-linked (copied across file systems), so no passage is encoded again; only faiss is
    trained and filled (benchmarks compare factories this way). The filter scores, if any, are reused; a source
    without them gets them from ``filter_model``'s filter head (a model with the same phrase encoder) when
    ``opts.filter_threshold`` is set.
    """
    src, out = Path(src), Path(out)
    old = phrase_index.Manifest.load(src)
    refuse_finished(out)
    with build_lock(out):  # as a build's: a second reindex (or build) into ``out`` is refused at its start
        refuse_finished(out)  # again: one that held the lock until now may have finished it
        return _reindex_locked(src, out, old, opts, filter_model)


def _reindex_locked(src: Path, out: Path, old: phrase_index.Manifest, opts: BuildOptions,
                    filter_model: str | Path | None) -> phrase_index.Manifest:
    """``reindex`` under ``out``'s writer lock."""
    for rel in integrity.index_files(src, exclude=(phrase_index.MANIFEST, phrase_index.FAISS_INDEX, phrase_index.CODES, phrase_index.IVFDATA)):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).unlink(missing_ok=True)
        try:
            os.link(src / rel, out / rel)
        except OSError:
            shutil.copy2(src / rel, out / rel)
    t0 = time.time()
    check_store_option(opts.store)
    if opts.filter_threshold is not None and not (out / phrase_index.FILTER_SCORES).is_file():
        if filter_model is None:
            raise BuildError(f"{src} has no filter scores ({phrase_index.FILTER_SCORES}); give a model with a filter head "
                             "(filter_model) to compute them from its token vectors")
        write_filter_scores(out, filter_model, old)
    factory, faiss_params, indexed = fill_faiss(out, int(old.encoder["dim"]), opts, kept=(
        f"{src} is unchanged and the stores linked from it stay in {out}: rerun the reindex with another --factory"))
    fine_store = opts.store or old.fine_store
    faiss_params["fine_store"] = write_fine_store(out, fine_store, opts.max_train, opts.progress,
                                                  keep=filtered_ids(out, opts.filter_threshold, old.tokens))
    remove_scratch(out)
    manifest = phrase_index.Manifest.create(out, {
        **old.to_dict(), "factory": factory, "faiss_params": faiss_params, "indexed_tokens": indexed,
        "filter_threshold": opts.filter_threshold, "build_seconds": round(time.time() - t0, 2),
        "fine_store": fine_store,
    })
    return finished(out, manifest)


def filtered_ids(out: Path, threshold: float | None, n_tokens: int) -> np.ndarray | None:
    """The token ids a filter threshold keeps (None without one: every token keeps its fine-store row)."""
    if threshold is None:
        return None
    return kept_token_ids(load_filter_scores(out), threshold, n_tokens)


def write_filter_scores(out: Path, model: str | Path, manifest: phrase_index.Manifest) -> None:
    """``token_filter.npy`` of an index directory computed from its fp16 token vectors with ``model``'s filter
    head; the model must have the phrase encoder that built the index."""
    model_dir = resolve_model(model)
    if phrase_fingerprint(model_dir) != (manifest.phrase_fingerprint or ""):
        raise BuildError(f"{model}: its phrase encoder is not the one that built the index (phrase fingerprint "
                         f"{phrase_fingerprint(model_dir)} vs {manifest.phrase_fingerprint})")
    phrase_model = load_model(model_dir)
    if phrase_model.filter_head is None:
        raise BuildError(f"{model} has no filter head (train one with `spanseek train filter`)")
    vectors = open_fine_store(out, detect_kind(out))
    if vectors.kind != "fp16":
        raise BuildError(f"{out}: filter scores are computed from an fp16 fine store, this one is {vectors.kind}")
    with atomic_path(out / phrase_index.FILTER_SCORES) as tmp:
        mm = new_memmap(tmp, np.float16, (len(vectors), 2))
        flags = np.load(out / phrase_index.TOKEN_FLAGS, mmap_mode="r")
        for a in range(0, len(vectors), 65536):
            mm[a : a + 65536] = filter_probabilities(phrase_model, vectors[a : a + 65536], flags[a : a + 65536])
        mm.flush()
        del mm


def merge_shards(out: Path, n_shards: int, dim: int) -> int:
    """Concatenate shard arrays into the index files via memory maps (the passage and document stores were
    written while encoding)."""
    shards = [shard_files.shard_dir(out, k) for k in range(n_shards)]
    ntok = [np.load(s / "ntokens.npy") for s in shards]
    per_shard = [int(x.sum()) for x in ntok]
    n = sum(per_shard)
    passage_tokens = np.concatenate([[0], np.cumsum(np.concatenate(ntok))]).astype(np.int64)
    arrays = {
        phrase_index.VECTORS: ((n, dim), np.float16, "vectors.npy"),
        phrase_index.TOKEN_OFFSETS: ((n, 2), np.int32, "offsets.npy"),
        phrase_index.TOKEN_FLAGS: ((n,), np.uint8, "flags.npy"),
    }
    if shards and (shards[0] / "filter.npy").is_file():
        arrays[phrase_index.FILTER_SCORES] = ((n, 2), np.float16, "filter.npy")
    for name, (shape, dtype, part) in arrays.items():
        with atomic_path(out / name) as tmp:
            mm = new_memmap(tmp, dtype, shape)
            pos = 0
            for s, m in zip(shards, per_shard, strict=True):
                mm[pos : pos + m] = np.load(s / part)
                pos += m
            mm.flush()
            del mm
    save_npy_atomic(out / phrase_index.PASSAGE_TOKENS, passage_tokens)
    (out / SHARDS / shard_files.MERGED_KEY).write_text(shard_files.merged_key(out, n_shards))
    token_passage = np.repeat(np.arange(len(passage_tokens) - 1, dtype=np.int32), np.diff(passage_tokens))
    save_npy_atomic(out / phrase_index.TOKEN_PASSAGE, token_passage)
    return n
