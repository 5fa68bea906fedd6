"""CLI for corpus conversion, index building, search and evaluation (registered into `spanseek`)."""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

from spanseek.core.filters import FilterError
from spanseek.core.lexical import ANALYZER, ANALYZERS
from spanseek.core.options import add_options, from_args
from spanseek.core.params import SearchFilter, SearchParams
from spanseek.indexer.options import (
    DEFAULT_READ_MEMORY,
    DEFAULT_READ_TIMEOUT_S,
    FOLLOW_LINKS_HELP,
    PASSAGE_FIELDS_HELP,
    BuildOptions,
    EncodeOptions,
)

MODEL_HELP = ("model directory, or a bundled model: default (MiniLM-L6), base (MPNet-base, spanseek[base]) or "
              "default-2026-11 (the previous default)")


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (nprobe, k, sample sizes: 0 or less would fail deep in faiss)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _from_squad(args: argparse.Namespace) -> int:
    from spanseek.core.io import from_squad

    n = from_squad(args.input, args.out)
    print(f"wrote {n} document{'s' * (n != 1)} to {args.out}", file=sys.stderr)
    return 0


def _from_files(args: argparse.Namespace) -> int:
    from spanseek.indexer.chunking import (
        ChunkOptions,
        ChunkOptionsError,
        backbone_token_counter,
        word_token_counter,
    )
    from spanseek.indexer.ingest import IngestOptions, from_files, parse_meta
    from spanseek.indexer.read_process import ReadProcess, check_memory_cap, check_time_limit, read_capped

    extra = parse_meta(args.meta)
    check_memory_cap(args.read_memory_bytes, "--read-memory-bytes")
    check_time_limit(args.read_timeout_s, "--read-timeout-s")
    config = None
    if args.tokenizer == "model":
        from spanseek.core.config import EncoderConfig
        from spanseek.core.model import CONFIG_NAME, given_model, resolve_model

        # the served model's counts: the service's file reader counts an upload's tokens with the same counter
        given_model(args.model, "--model")
        config = EncoderConfig.load(resolve_model(args.model) / CONFIG_NAME)
    try:
        chunk = ChunkOptions.of(args.max_tokens, args.overlap, args.min_tokens)
    except ChunkOptionsError as e:  # named as the flag
        raise ValueError(e.named("--" + e.field.replace("_", "-"))) from None
    opts = IngestOptions(
        chunk=chunk,
        id_field=args.id_field, extra_meta=extra, strict=args.strict, follow_links=args.follow_links,
    )
    if args.read_memory_bytes or args.read_timeout_s:  # in a process of their own, capped (as the service reads uploads)
        with ReadProcess(config, args.read_memory_bytes, read_capped, args.read_timeout_s) as reader:
            report = from_files(args.paths, args.out, word_token_counter, opts, not args.quiet, reader.read)
    else:
        count = word_token_counter if config is None else backbone_token_counter(config)
        report = from_files(args.paths, args.out, count, opts, progress=not args.quiet)
    n = len(report.skipped)
    skipped = f"; skipped {n} file{'s' if n != 1 else ''} (see the warnings)" if n else ""
    docs, passages = report.documents, report.passages
    print(f"wrote {docs} document{'s' * (docs != 1)}, {passages} passage{'s' * (passages != 1)} to {args.out}{skipped}",
          file=sys.stderr)
    return 0


def summary(manifest, index_dir: str, seconds: float | None = None) -> dict:
    """What a build or an add prints: the index's counts, kind and model, its size on disk (``disk_bytes``) and, for a
    compressed index, the recall against exact search the build measured (its manifest.json has the rest: files and
    their checksums, the encoder config, the faiss parameters). ``documents`` are the live ones (deleted documents
    stay in the files, masked, until ``index compact``: ``deleted_documents``); ``seconds``: an add's own time, in
    place of the build's."""
    import numpy as np

    from spanseek.core.phrase_index import DELETED
    from spanseek.indexer.lifecycle import disk_bytes

    m = manifest.to_dict()
    deleted_file = Path(index_dir) / DELETED
    deleted = len(np.load(deleted_file)) if deleted_file.is_file() else 0
    keys = ("documents", "passages", "tokens", "indexed_tokens", "factory", "fine_store", "model_ref")
    out = {"index": str(index_dir), **{k: m[k] for k in keys if k in m}}
    out["documents"] = m["documents"] - deleted
    out = {**out, "deleted_documents": deleted} if deleted else out
    out["disk_bytes"] = disk_bytes(Path(index_dir))
    recall = m["faiss_params"].get("recall") or {}
    if "recall@1" in recall:  # (an exact index records none: its search is the exact one)
        out["recall"] = {k: v for k, v in recall.items() if k.startswith("recall@")}
    timing = {"seconds": round(seconds, 2)} if seconds is not None else {"build_seconds": m.get("build_seconds")}
    return {**out, **timing, "lexical": m.get("lexical") is not None, "manifest": str(Path(index_dir) / "manifest.json")}


def _build(args: argparse.Namespace) -> int:
    from spanseek.core.model import given_model
    from spanseek.indexer.build import build_index

    opts = from_args(BuildOptions, args, progress=not args.quiet)
    corpus = _corpus_file(args.corpus)
    given_model(args.model, "--model")
    # (build_index refuses --filter-threshold without a filter head)
    m = build_index(corpus, args.model, args.out, opts)
    print(json.dumps(summary(m, args.out), indent=2))
    return 0


def _add(args: argparse.Namespace) -> int:
    """`index add`, and `index upsert` (which replaces the documents whose id the index holds)."""
    from spanseek.core.model import given_model
    from spanseek.indexer.add import upsert_documents
    from spanseek.indexer.build import check_ray

    encode = from_args(EncodeOptions, args, progress=not args.quiet)
    opts = BuildOptions(**{f.name: getattr(encode, f.name) for f in dataclasses.fields(EncodeOptions)})
    replace = args.index_command == "upsert"
    t0 = time.perf_counter()
    given_model(args.model, "--model")
    corpus = _corpus_file(args.corpus)
    check_ray(opts)  # the options, then the index they change
    index = _index_dir(args.index, "--index")
    m, changes = upsert_documents(index, corpus, model=args.model, opts=opts, replace=replace,
                                  live_dir=_live_dir(args.live_dir)[0])
    done = (f"added {changes.added}, replaced {changes.replaced}, unchanged {changes.unchanged} documents" if replace
            else f"added {changes.added} document{'s' * (changes.added != 1)}")
    print(done, file=sys.stderr)
    print(json.dumps(summary(m, index, time.perf_counter() - t0), indent=2))  # (the directory an alias names)
    return 0


def _delete(args: argparse.Namespace) -> int:
    from spanseek.indexer.lifecycle import NO_IDS, delete_documents, read_ids

    if args.ids is None and args.ids_file is None:  # the flags, then the index they name
        raise ValueError(NO_IDS)
    ids = read_ids(args.ids, args.ids_file)
    print(json.dumps(delete_documents(_index_dir(args.index, "--index"), ids, _live_dir(args.live_dir)[0]), indent=2))
    return 0


def _compact(args: argparse.Namespace) -> int:
    from spanseek.indexer.lifecycle import compact_index

    print(json.dumps(compact_index(_index_dir(args.index, "--index"), BuildOptions(progress=not args.quiet),
                                   _live_dir(args.live_dir)[0]), indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    from spanseek.indexer.lifecycle import export_documents

    print(json.dumps(export_documents(_index_dir(args.index, "--index"), args.out), indent=2))
    return 0


LIVE_DIR_ENV = "SPANSEEK_LIVE_DIR"  # the live directory `spanseek serve --writes` reads (service.settings: live_dir)


def _live_dir(flag: str | None) -> tuple[str | None, str | None]:
    """The live directory a server with writes in this environment keeps, as `spanseek serve` reads it: ``--live-dir``,
    else its ``live_dir`` setting's environment variable (``_served_env``: ``SPANSEEK_LIVE_DIR`` in any case of
    letters; blank: unset, as the server takes it), else None (the index path + ``.live``); and the name of the
    variable it came from (None: not the environment)."""
    if flag is not None:
        return flag, None
    found = _served_env("live_dir")
    if found is None or not found[1].strip():
        return None, None
    return found[1], found[0]


def _served_env(field: str) -> tuple[str, str] | None:
    """(variable, value) of the environment for the `spanseek serve` setting ``field``, or None: by the rule of the
    server's settings (pydantic-settings over ``service.settings.Settings``: the ``SPANSEEK_`` prefix, names compared
    in lower case, the last of several spellings winning; tests/indexer/test_cli_options.py holds the two equal), so
    an index command and the server never read two settings. The rule, not the settings class: loading that costs an
    index command about a second of imports, and the indexer imports nothing of the service. The variable is named as
    the environment spells it."""
    spellings = [name for name in os.environ if name.lower() == f"spanseek_{field}"]
    return (spellings[-1], os.environ[spellings[-1]]) if spellings else None


def _live_dir_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--live-dir", default=None, help="the live directory of a server with writes over the index "
                   f"(default: {LIVE_DIR_ENV}, as `spanseek serve` reads it, else the index path + '.live'; {what})")


def _snapshot(args: argparse.Namespace) -> int:
    from spanseek.indexer.live import LiveStoreError
    from spanseek.indexer.snapshot import snapshot_index

    live_dir, variable = _live_dir(args.live_dir)
    try:
        done = snapshot_index(_index_dir(args.index, "--index"), args.out, live_dir)
    except LiveStoreError as e:  # (a live directory made over another index): where its path came from
        if variable is not None and str(live_dir) in str(e):
            raise LiveStoreError(f"{variable}={live_dir}: {e}") from None
        raise
    print(json.dumps(done, indent=2))
    return 0


def _index_dir(path: str, flag: str | None = None) -> str:
    """The index directory that ``--index`` names: the path itself, or the directory an alias's pointer file names
    (`index switch --pointer`), as `spanseek serve` reads an alias (a symlink alias the system follows). With
    ``flag``, a path that is no index (missing, a file that is no pointer file: a corpus given as the index, a folder
    without a manifest) is refused here, the error naming the flag (``--index work/idx: not an index directory``);
    without, it is left as given, for opening it to say what it is."""
    target = path
    if Path(path).is_file():
        from spanseek.core.alias import AliasError, resolve_alias

        try:
            target = str(resolve_alias(path).target)
        except (AliasError, OSError):
            pass
    if flag is not None:
        from spanseek.core.phrase_index import given_index

        given_index(target, flag)  # (says what the path is: missing, a file, a folder of something else)
    return target


def _corpus_file(path: str) -> str:
    """``--corpus``, refused when it names an index directory: its documents are not a corpus until exported (the
    advice for a folder, to convert its files with `corpus from-files`, does not fit an index); any other path that is
    no JSONL corpus (a folder, a Markdown or SQuAD file) is refused naming the flag, with the command that makes one."""
    from spanseek.core.io import given_path
    from spanseek.core.phrase_index import MANIFEST
    from spanseek.indexer.ingest import corpus_problem

    if (Path(given_path(path, "--corpus")) / MANIFEST).is_file():
        raise ValueError(f"--corpus {path} is an index directory, not a JSONL corpus; `spanseek index export --index "
                         f"{path} --out CORPUS.jsonl` writes its documents as one")
    if (problem := corpus_problem(path)) is not None:
        raise ValueError(f"--corpus {problem}")
    return path


def _index_operand(p: argparse.ArgumentParser) -> None:
    """The index directory of a command that names nothing else: given as an operand (``index verify DIR``) or, as the
    commands that take a corpus too name it, ``--index DIR``."""
    p.add_argument("index_dir", nargs="?", metavar="INDEX", help="index directory (or --index INDEX)")
    p.add_argument("--index", default=None, help=argparse.SUPPRESS)


def _index_of(args: argparse.Namespace, checked: bool = True) -> str:
    """The index given as ``INDEX`` or ``--index``: the operand stands for the flag, so the command does the same with
    either; ``checked``: a path that is no index directory is refused here, named as ``--index PATH`` however it was
    given (``_index_dir``; an operand was left to the command, which named it otherwise)."""
    if (args.index_dir is None) == (args.index is None):
        raise ValueError("give the index directory once: `INDEX` or `--index INDEX`" if args.index is None else
                         f"the index is given twice ({args.index_dir!r} and --index {args.index!r}): give it once")
    return _index_dir(str(args.index_dir or args.index), "--index" if checked else None)


def _verified_live_dir(flag: str | None, index: str) -> str | None:
    """The live directory `index verify` checks: ``--live-dir``; else ``SPANSEEK_LIVE_DIR`` where the index verified
    is the one `spanseek serve` in this environment serves (``SPANSEEK_INDEX``); else None, the index path + ``.live``:
    a backup's own, not the live directory of the server the environment runs (in its container, say)."""
    live_dir, variable = _live_dir(flag)
    if variable is None:
        return live_dir
    served = _served_env("index")
    return live_dir if served is not None and Path(_index_dir(served[1])).resolve() == Path(index).resolve() else None


def _verify(args: argparse.Namespace) -> int:
    from spanseek.core.io import given_path
    from spanseek.indexer.verify import verify_index

    index = _index_of(args, checked=False)
    if args.live_dir is not None:  # one named that is not there (a typo) is refused, not verified as no live directory
        given_path(args.live_dir, "--live-dir")
    # one report, the index given as INDEX or --index (the operand stands for the flag): a path that is no index is
    # named as `--index PATH` either way
    report = verify_index(index, sample=args.sample, k=args.k, nprobe=args.nprobe,
                          live_dir=_verified_live_dir(args.live_dir, index), flag="--index")
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _switch(args: argparse.Namespace) -> int:
    from spanseek.core.alias import switch_alias
    from spanseek.core.phrase_index import check_index

    manifest = check_index(args.target, contents=not args.no_verify)  # never point an alias at a damaged index
    resolved = switch_alias(args.alias, args.target, pointer=args.pointer or None)
    print(json.dumps({"alias": str(resolved.path), "kind": resolved.kind, "target": str(resolved.target),
                      "manifest_checksum": manifest.to_dict()["checksum"]}))
    return 0


# `spanseek eval` sets the unit, top_k and answer merging per metric; these apply to all of its searches
EVAL_SEARCH_FLAGS = ("mode", "fusion", "lexical_weight", "nprobe", "vector_source", "max_answer_tokens", "read",
                     "read_passages")


def _not_json(name: str) -> float:
    """``json.loads``'s ``parse_constant``: NaN, Infinity and -Infinity are not JSON (Python's reader takes them)."""
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def _filter(args: argparse.Namespace) -> SearchFilter | None:
    """`spanseek search`'s --doc-ids / --title-prefix / --where / --filter flags as a SearchFilter (None without
    any); a malformed --filter raises FilterError (a ValueError) saying what is wrong."""
    meta = {}
    for item in args.where:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--where takes KEY=VALUE, got {item!r}")
        try:  # numbers, true/false/null as JSON; anything else (or a quoted JSON string) is a string: NaN and
            meta[key] = json.loads(value, parse_constant=_not_json)  # Infinity too, which JSON has not
        except json.JSONDecodeError:
            meta[key] = value
        except ValueError:  # int() refusing a literal over Python's limit
            raise ValueError(f"--where {key}: a number of more than {sys.get_int_max_str_digits()} digits, too long "
                             "to compare; quote it to match it as text") from None
    doc_ids = [i.strip() for i in args.doc_ids.split(",") if i.strip()] if args.doc_ids is not None else None
    given = _filter_json(args.filter) if args.filter is not None else None
    if doc_ids is None and args.title_prefix is None and not meta:
        return given
    flags = SearchFilter(doc_ids=tuple(doc_ids) if doc_ids is not None else None, title_prefix=args.title_prefix,
                         meta=tuple(meta.items()) or None)
    return flags if given is None else SearchFilter(must=(flags, given))


def _filter_json(text: str) -> SearchFilter:
    """--filter's JSON (or @FILE's, UTF-8) as a SearchFilter."""
    from spanseek.core.io import CorpusError, loads_json, read_lines

    where = "--filter"
    if text.startswith("@"):
        where = f"--filter file {text[1:]}"
        try:
            text = "".join(line for _, line in read_lines(text[1:]))
        except CorpusError as e:  # names the file and line
            raise FilterError(f"--filter: {e}") from None
    try:
        obj = loads_json(text, where, whole_file=True)
    except CorpusError as e:  # its line and column, an integer too long to read, nesting too deep
        raise FilterError(str(e)) from None
    try:
        return SearchFilter.from_json(obj)
    except FilterError as e:
        raise FilterError(f"{where}: {e}", e.field) from None


def _search(args: argparse.Namespace) -> int:
    from spanseek.core.io import given_path
    from spanseek.core.loading import open_searcher
    from spanseek.core.model import given_model

    params = from_args(SearchParams, args, filter=_filter(args))  # bad values fail here
    _given_reader(args.reader, params.read)
    ids: list[str] = []
    if args.questions_file is not None:
        if args.questions:
            raise ValueError(f"questions given both as arguments and in --questions {args.questions_file}; give one")
        ids, questions = _file_questions(given_path(args.questions_file, "--questions", file=True))
        if not questions:
            raise ValueError(f"--questions {args.questions_file}: the file holds no questions")
    elif args.questions:
        questions = _argv_questions(args.questions)
    else:
        ids, questions = _stdin_questions()  # before loading
    if not questions:  # (a forgotten question, or an empty file): said now, not after loading the model for none
        raise ValueError("no questions to search: give them as arguments, one a line on stdin, or in --questions FILE")
    index = _index_dir(args.index, "--index")
    given_model(args.model, "--model")
    # One precision however many questions are asked, the service's default (auto: from the device's features, no
    # start-up timing; on a CPU the encoder and the reader then run on ONNX Runtime in fp32 where it is installed), so
    # a question gets the same hits and scores alone as among others
    searcher = open_searcher(index, args.model, device=args.device, search_device=args.search_device,
                             reader=args.reader if params.read else None, precision="auto", reader_precision="auto")
    searcher.check_mode(params)
    for n, (q, hits) in enumerate(zip(questions, searcher.search(questions, params), strict=True)):  # a blank one gets no hits
        record = {"id": ids[n]} if ids else {}
        print(json.dumps({**record, "query": q, "unit": args.unit, "hits": [h.to_dict() for h in hits],
                          "no_answer": getattr(hits, "no_answer", False)}, ensure_ascii=False))
    return 0


def _file_questions(path: str) -> tuple[list[str], list[str]]:
    """The ids and texts of a question file's questions (``core.questions``: SQuAD, JSON Lines, CSV, TSV, or one a
    line); a question the file gives no id has ``line-N``, its line."""
    from spanseek.core.questions import read_questions

    qf = read_questions(path)
    return [q.id for q in qf.questions], [q.question for q in qf.questions]


def _argv_questions(questions: list[str]) -> list[str]:
    """The questions given as arguments; bytes that are not UTF-8 (kept by Python as lone surrogates) are refused."""
    for n, q in enumerate(questions, 1):
        try:
            q.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"question {n} ({q!r}) is not UTF-8 text") from None
    return questions


def _stdin_questions() -> tuple[list[str], list[str]]:
    """The ids and texts of the questions on stdin, decoded as UTF-8 (a leading byte order mark dropped): JSON Lines
    when the first line that is not blank is a JSON object with a ``question`` (``core.questions``; ids as
    ``--questions`` gives them), else one question a line, blank lines skipped, with no ids.

    Read as bytes whatever the locale, so a line that is not UTF-8 is refused naming it instead of reaching the
    tokenizer; every line is read before any is answered.
    """
    from spanseek.core.questions import is_question_line, jsonl_questions

    if sys.stdin is not None and sys.stdin.isatty():  # a terminal: the command would wait without a word
        print("reading questions from stdin, one a line; end them with Ctrl-D (they are answered then)",
              file=sys.stderr)
    stream = getattr(sys.stdin, "buffer", None)  # a text stream without one (tests): its lines as bytes again
    lines = stream if stream is not None else (line.encode("utf-8", "surrogateescape") for line in sys.stdin)
    text = []
    for n, raw in enumerate(lines, 1):
        if n == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"stdin line {n} is not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                             "give questions as UTF-8") from None
        if line.strip():
            text.append((n, line))
    if text and is_question_line(text[0][1]):  # a question that merely starts with "{" stays a question
        qf = jsonl_questions("stdin", text)
        return [q.id for q in qf.questions], [q.question for q in qf.questions]
    return [], [line.strip() for _, line in text]


def _eval(args: argparse.Namespace) -> int:
    from spanseek.core.io import given_path
    from spanseek.indexer.evaluate import run_eval

    params = from_args(SearchParams, args, only=EVAL_SEARCH_FLAGS)  # the options, then the files they name
    _given_reader(args.reader, params.read)
    for flag, given in (("--questions", args.questions), ("--corpus", args.corpus)):
        if args.out is not None and given is not None and _same_file(args.out, given):  # the metrics would replace it
            raise ValueError(f"--out {args.out} is the {flag} file to read; write the metrics somewhere else")
    corpus = _corpus_file(args.corpus) if args.corpus else None
    given_path(args.questions, "--questions", file=True)
    index = _index_dir(args.index, "--index") if args.index is not None else None
    # the model that built --index, as `spanseek search` takes it (None); a temporary index is built with `default`
    model = args.model if args.model is not None else ("default" if index is None else None)
    m = run_eval(args.questions, model, index=index, corpus=corpus,
                 reading_comprehension=args.reading_comprehension, limit=args.limit, out=args.out,
                 progress=not args.quiet, precision=args.precision, rc_decode=args.rc_decode, params=params,
                 reader=args.reader if args.read else None)
    print(json.dumps(m, indent=2))
    return 0


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (a link to it too)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return Path(a).resolve() == Path(b).resolve()


def _add_lexical(args: argparse.Namespace) -> int:
    from spanseek.indexer.lexical import add_lexical

    m = add_lexical(_index_of(args), _live_dir(args.live_dir)[0], analyzer=args.analyzer)
    print(json.dumps(m.lexical, indent=2))
    return 0


def _given_reader(reader: str, read: bool) -> None:
    """``--reader``, refused naming the flag unless it is a reader directory or ``default``
    (``core.reader.resolve_reader``), before a model is loaded; one other than the default without ``--read``,
    which would go unused, is refused naming both."""
    if not read:
        if reader != "default":
            raise ValueError(f"--reader {reader} would go unused: the reader reads the top passages with --read, "
                             "which is not given (give --read, or leave --reader out)")
        return
    from spanseek.core.reader import resolve_reader

    resolve_reader(reader, "--reader")


def _reader_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reader", default="default", help="with --read: reader directory or default (the bundled one)")


def register(sub: argparse._SubParsersAction) -> None:
    corpus = sub.add_parser("corpus", help="corpus conversion").add_subparsers(dest="corpus_command", required=True)
    p = corpus.add_parser("from-squad", help="SQuAD-format JSON(.gz) -> JSONL corpus (one document per article)")
    p.add_argument("input", metavar="SQUAD_FILE", help="SQuAD-format JSON file (.json or .json.gz)")
    p.add_argument("--out", required=True, help="JSONL corpus to write (.gz to compress)")
    p.set_defaults(func=_from_squad)
    p = corpus.add_parser(
        "from-files", help=".txt/.md/.html/.pdf/.docx/.pptx/.epub/.odt/.odp/.fodt/.fodp/.rtf/.eml files, spreadsheets "
                     "(.xlsx/.ods/.fods/.csv/.tsv) and directories (recursive) -> JSONL corpus, chunked into passages",
        description="Each file is one document: id = its path relative to the directory given (or --id-field), "
                    "title = front matter title / first heading / file name, meta = source path, front matter, "
                    "HTML <meta> tags and --meta; table rows name their cells after the header row, code blocks "
                    f"keep their lines. {PASSAGE_FIELDS_HELP} "
                    "Binary, non-UTF-8 and empty files, PDFs without a text layer (scanned), damaged PDF, Word, "
                    "PowerPoint, EPUB or OpenDocument files, DRM-protected e-books and old .doc, .ppt and .xls files (save "
                    "them as .docx, .pptx, .xlsx) are skipped with a warning naming them.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    p.add_argument("--out", required=True, help="JSONL corpus to write (.gz to compress)")
    p.add_argument("--max-tokens", type=int, default=200, help="most tokens in a passage, 8 to 512 (default: %(default)s)")
    p.add_argument("--overlap", type=int, default=None,
                   help="tokens shared by consecutive windows of a long paragraph (default: a fifth of --max-tokens)")
    p.add_argument("--min-tokens", type=int, default=None,
                   help="a passage shorter than this (a heading, a list item) takes in the paragraphs after it "
                        "(tokens; default: 32, or --max-tokens where that is smaller)")
    p.add_argument("--tokenizer", default="model", choices=["model", "words"],
                   help="count tokens with the model's tokenizer (exact) or one per word (no model needed); "
                        "default: %(default)s")
    p.add_argument("--model", default="default",
                   help="the model whose tokenizer counts tokens (default: %(default)s; use the model you will index "
                        "with)")
    p.add_argument("--id-field", default=None,
                   help="take document ids from this metadata field (front matter / HTML meta) instead of the path")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="metadata added to every document (repeatable)")
    p.add_argument("--strict", action="store_true", help="fail on a file that would be skipped (binary, non-UTF-8, empty, "
                   "scanned or damaged, an old Word .doc) instead of skipping it")
    p.add_argument("--follow-links", action="store_true", help=FOLLOW_LINKS_HELP)
    p.add_argument("--read-memory-bytes", type=int, default=DEFAULT_READ_MEMORY, metavar="BYTES",
                   help="most memory the process that reads the files may take (Linux): a file that needs more is "
                        "skipped with a warning naming it, and the files after it are read (--strict: the command "
                        "fails); 0: no limit (default: %(default)s)")
    p.add_argument("--read-timeout-s", type=float, default=DEFAULT_READ_TIMEOUT_S, metavar="SECONDS",
                   help="most CPU time the reading of one file may take (a hostile file, 32 MiB of Markdown table "
                        "rows, takes some 20 minutes): a file that takes longer is skipped with a warning naming it, "
                        "and the files after it are read (--strict: the command fails); 0: no limit. With this and "
                        "--read-memory-bytes both 0 the files are read in this process (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_from_files)

    index = sub.add_parser("index", help="build and inspect phrase indexes").add_subparsers(dest="index_command", required=True)
    p = index.add_parser("build", help="encode a corpus and build its phrase index (resumes a killed build)")
    p.add_argument("--corpus", required=True,
                   help="JSONL corpus (make one with `spanseek corpus from-files` or `corpus from-squad`)")
    p.add_argument("--model", default="default", help=f"{MODEL_HELP} (default: %(default)s)")
    p.add_argument("--out", required=True, help="index directory to create")
    add_options(p, BuildOptions)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_build)

    for name, what, corpus_help in (
        ("add", "append documents to a built index without retraining (resumes a killed add)",
         "JSONL corpus of the new documents"),
        ("upsert", "replace the documents whose id the index holds, add the others",
         "JSONL corpus of the new versions (identical documents are skipped)"),
    ):
        p = index.add_parser(name, help=what)
        p.add_argument("--index", required=True, help="index directory")
        p.add_argument("--corpus", required=True, help=corpus_help)
        p.add_argument("--model", default=None, help="model (default: the one recorded in the manifest)")
        add_options(p, EncodeOptions)
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        _live_dir_flag(p, "refused while it holds a server's writes")
        p.set_defaults(func=_add)

    p = index.add_parser("delete", help="delete documents by id (masked at once; `index compact` reclaims the space)")
    p.add_argument("--index", required=True, help="index directory")
    p.add_argument("--ids", default=None, help="comma-separated document ids")
    p.add_argument("--ids-file", default=None, help="a file of document ids, one a line")
    _live_dir_flag(p, "refused while it holds a server's writes")
    p.set_defaults(func=_delete)

    p = index.add_parser("compact", help="rewrite the index without its deleted documents (nothing is re-encoded)")
    p.add_argument("--index", required=True, help="index directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _live_dir_flag(p, "refused while it holds a server's writes")
    p.set_defaults(func=_compact)

    p = index.add_parser("export", help="write the index's live documents as a corpus (JSONL) that `index build` "
                         "reads: to rebuild it with another store, factory or model")
    p.add_argument("--index", required=True, help="index directory")
    p.add_argument("--out", required=True, help="corpus file to write (JSONL; .gz to compress)")
    p.set_defaults(func=_export)

    p = index.add_parser("snapshot", help="copy an index and its live directory consistently while they serve "
                         "(hard links on the same file system): a backup, or an index to move")
    p.add_argument("--index", required=True, help="index directory")
    p.add_argument("--out", required=True, help="directory to create: the copy of the index (its live directory's "
                   "copy goes beside it, OUT.live)")
    _live_dir_flag(p, "copied where it holds a server's state.json")
    p.set_defaults(func=_snapshot)

    p = index.add_parser("add-lexical", help="add (or rebuild) the BM25 part of a built index; nothing is re-encoded")
    _index_operand(p)
    _live_dir_flag(p, "its merged base gets the part too")
    p.add_argument("--analyzer", default=ANALYZER, choices=ANALYZERS,
                   help="how passages and questions are split into BM25 terms (docs/indexing.md; default: %(default)s, "
                   "what new indexes get)")
    p.set_defaults(func=_add_lexical)

    p = index.add_parser("verify", help="check an index and report recall vs exact search and bytes/token")
    _index_operand(p)
    p.add_argument("--sample", type=_positive_int, default=1000,
                   help="own vectors used as queries (default: %(default)s)")
    p.add_argument("--k", type=_positive_int, default=10, help="recall@k against exact search (default: %(default)s)")
    p.add_argument("--nprobe", type=_positive_int, default=None, help="IVF lists probed (default: the index's)")
    p.add_argument("--live-dir", default=None, help="the live directory of a server with writes over the index, "
                   f"checked where it holds a server's state.json (default: {LIVE_DIR_ENV} where the index is the one "
                   "SPANSEEK_INDEX names, as `spanseek serve` reads them, else the index path + '.live'; one given "
                   "that does not exist is refused)")
    p.set_defaults(func=_verify)

    p = index.add_parser("switch", help="point an alias (symlink or pointer file) at an index, atomically; a "
                                        "service serving the alias swaps to it (docs/service.md)")
    p.add_argument("alias", help="the alias the service serves (created if missing)")
    p.add_argument("target", help="index directory to serve from now on (checked first)")
    p.add_argument("--pointer", action="store_true",
                   help="create a pointer file (one line naming the directory) instead of a symlink")
    p.add_argument("--no-verify", action="store_true", help="compare file sizes only, not checksums")
    p.set_defaults(func=_switch)

    p = sub.add_parser("search", help="search an index; prints one JSON line per question")
    p.add_argument("questions", nargs="*", help="questions (default: --questions FILE, else one per line on stdin)")
    p.add_argument("--questions", dest="questions_file", default=None, metavar="FILE",
                   help="read the questions from a file: JSON Lines, CSV/TSV (a question column), SQuAD-format JSON, "
                        "or one a line (.txt); optionally gzipped (docs/questions.md); each output line "
                        "carries the question's id (line-N where the file gives none)")
    p.add_argument("--index", required=True, help="index directory (or an alias of one: `index switch`)")
    p.add_argument("--model", default=None, help=f"{MODEL_HELP} (default: the one that built the index, as its "
                   "manifest records)")
    add_options(p, SearchParams)
    _reader_flag(p)
    p.add_argument("--doc-ids", default=None, help="search only these documents (comma-separated ids)")
    p.add_argument("--title-prefix", default=None, help="search only documents whose title starts with this")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="search only documents whose metadata KEY equals VALUE (JSON number/true/false/null, else a "
                        "string; repeatable: all must hold)")
    p.add_argument("--filter", default=None, metavar="JSON",
                   help="search only documents that pass this filter, the HTTP filter object (range, any, not, "
                        "must/should/must_not: docs/service.md), or @FILE holding it; with the flags above, all hold")
    p.add_argument("--device", default="auto",
                   help="question encoder: auto (a GPU where there is one), cpu, cuda, cuda:N (default: auto)")
    p.add_argument("--search-device", default="auto",
                   help="where the index is searched: auto (the encoder's device), cpu, cuda, cuda:N (default: auto)")
    p.set_defaults(func=_search, quiet_log_level=logging.WARNING)  # its answers, and what went wrong: not start-up chatter

    p = sub.add_parser("eval", help="phrase/passage/doc accuracy on questions with answers")
    p.add_argument("--questions", required=True,
                   help="SQuAD-format JSON, or questions and answers as JSON Lines (.jsonl), CSV or TSV (.csv, .tsv: "
                        "DPR's .qa.csv too), optionally gzipped; the last three need --index or --corpus")
    p.add_argument("--model", default=None, help=f"{MODEL_HELP} (default: the one that built --index; without "
                   "--index, default)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--index", default=None, help="index to search (default: a temporary index of the question "
                       "file's paragraphs)")
    where.add_argument("--corpus", default=None, help="JSONL corpus to index temporarily (instead of --index)")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                   help="encoder inference precision (default: %(default)s: bf16 where it is faster)")
    p.add_argument("--reading-comprehension", action="store_true", help="also answer within the gold passage")
    p.add_argument("--rc-decode", default="answer", choices=["answer", "span"],
                   help="answer: the most probable answer string (sums spans that read the same); span: the best "
                        "span (default: %(default)s)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="a fixed random sample of N questions (default: every question)")
    add_options(p, SearchParams, only=EVAL_SEARCH_FLAGS)
    _reader_flag(p)
    p.add_argument("--out", default=None, help="metrics JSON file to write (they are printed either way)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_eval)
