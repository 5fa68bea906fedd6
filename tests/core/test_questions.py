"""Question files in every format (core.questions): the same questions read from SQuAD JSON, JSON Lines, CSV, TSV
and DPR's headerless .qa.csv are the same; the format comes from the name, sniffed where it is ambiguous; each
fault is named with its file and line (and the column of a CSV/TSV field).

    .venv/bin/python -m pytest -q tests/core/test_questions.py
"""

from __future__ import annotations

import csv
import gzip
import json

import pytest

from spanseek.core.io import CorpusError
from spanseek.core.questions import question_format, read_questions
from tests.conftest import make_squad

ROWS = [  # id, question, answers, title: commas, quotes and a tab-free multi-answer list
    ("q1", "Who wrote it, then?", ["Alba", 'the "elder" Alba'], "Article 0"),
    ("q2", "When did O'Neil build it?", ["1850"], "Article 1"),
]


def _jsonl(rows=ROWS) -> str:
    return "".join(json.dumps({"id": i, "question": q, "answers": a, "title": t}) + "\n" for i, q, a, t in rows)


def _table(sep: str, rows=ROWS) -> str:
    lines = []
    writer = csv.writer(_Lines(lines), delimiter=sep, lineterminator="\n")
    writer.writerow(["id", "question", "answers", "title"])
    for i, q, a, t in rows:
        writer.writerow([i, q, json.dumps(a), t])
    return "".join(lines)


class _Lines:
    def __init__(self, out: list[str]):
        self.write = out.append


def _read(tmp_path, name: str, text: str):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return read_questions(path)


def _fields(qf):
    return [(q.id, q.question, q.answers, q.title) for q in qf.questions]


@pytest.mark.parametrize(("name", "text", "fmt"), [
    ("q.jsonl", _jsonl(), "jsonl"),
    ("q.jsonl.gz", _jsonl(), "jsonl"),
    ("q.json", _jsonl(), "jsonl"),  # JSON Lines named .json: its first line is a whole object with a question
    ("q.csv", _table(","), "csv"),
    ("q.tsv", _table("\t"), "tsv"),
    ("q.csv", _table("\t"), "tsv"),  # a .csv that is tab-separated, as DPR's are
    ("questions", _table("\t"), "tsv"),  # no suffix: sniffed
])
def test_every_format_reads_the_same_questions(tmp_path, name, text, fmt):
    qf = _read(tmp_path, name, text)
    assert qf.format == fmt and qf.open_domain
    assert _fields(qf) == [(i, q, tuple(a), t) for i, q, a, t in ROWS]
    assert qf.lines == [1, 2] if fmt == "jsonl" else qf.lines == [2, 3]


def test_squad_json_is_still_read_with_its_passages(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps(make_squad(n_articles=2)), encoding="utf-8")
    qf = read_questions(path)
    assert qf.format == "squad" and not qf.open_domain and qf.articles
    assert all(q.context and q.answer_starts for q in qf.questions)


def test_dpr_qa_csv_headerless_with_python_lists(tmp_path):
    # DPR's nq-test.qa.csv: question<TAB>a Python list of answers, no header, no id
    text = "who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']\nwhen was it, really?\t[\"1901\", 'in 1901']\n"
    qf = _read(tmp_path, "nq-test.qa.csv", text)
    assert qf.format == "tsv"
    assert _fields(qf) == [("line-1", "who got the first nobel prize in physics", ("Wilhelm Conrad Röntgen",), ""),
                           ("line-2", "when was it, really?", ("1901", "in 1901"), "")]


def test_nq_open_answer_key_doc_id_and_a_plain_answer_cell(tmp_path):
    qf = _read(tmp_path, "nq.jsonl", '{"question": "where?", "answer": ["Paris"], "doc_id": 7}\n'
                                     '{"question": "who?", "answer": "Alba"}\n')
    assert [(q.answers, q.doc_id) for q in qf.questions] == [(("Paris",), "7"), (("Alba",), None)]
    qf = _read(tmp_path, "q.csv", "question,answer\nwhere?,Paris\nwho?,\n")
    assert [q.answers for q in qf.questions] == [("Paris",), ()]
    assert qf.without_answers() == 3


def test_plain_text_is_one_question_a_line(tmp_path):
    qf = _read(tmp_path, "q.txt", "who wrote it, then?\n\n{not json}\n")
    assert qf.format == "text" and [q.question for q in qf.questions] == ["who wrote it, then?", "{not json}"]
    assert qf.without_answers() == 1


def test_a_squad_file_on_one_line_and_an_unknown_suffix_are_sniffed(tmp_path):
    (tmp_path / "q.data").write_text(json.dumps(make_squad(n_articles=1)), encoding="utf-8")
    (tmp_path / "q2").write_text("question,answers\nwho?,Alba\n", encoding="utf-8")
    (tmp_path / "q3").write_text("who?\n", encoding="utf-8")
    assert [question_format(tmp_path / n) for n in ("q.data", "q2", "q3")] == ["squad", "csv", "text"]


def _squad(question: str = "is it old?", qid: str = "a", title: str = "t", context: str = "Rome is old.",
           answer: str = "old", ids: tuple[str, ...] = ()) -> str:
    """A SQuAD file of one question, then a paragraph with a question for each of ``ids``."""
    qa = {"id": qid, "question": question, "answers": [{"text": answer, "answer_start": 8}]}
    more = [{"context": "Oslo is cold.", "qas": [{"id": i, "question": "is it cold?", "answers": [{"text": "cold"}]}
                                                for i in ids]}] if ids else []
    return json.dumps({"data": [{"title": title, "paragraphs": [{"context": context, "qas": [qa]}, *more]}]})


@pytest.mark.parametrize(("name", "text", "said"), [
    ("q.jsonl", '{"question": "a?", "answers": ["x"]}\n{"question": "b?", "answers": ["x"]\n',
     r"q.jsonl:2: invalid JSON \(.* at column \d+\)"),
    ("q.jsonl", '{"question": "a?"}\n\n["b?"]\n', r"q.jsonl:3: each line must be a JSON object"),
    ("q.jsonl", '{"answers": ["x"]}\n', r"q.jsonl:1: 'question': the question must be text \(missing\)"),
    ("q.jsonl", '{"question": " \\u200b "}\n', r"q.jsonl:1: 'question': the question must be text \(blank\)"),
    ("q.jsonl", '{"question": 3}\n', r"q.jsonl:1: 'question': the question must be text \(a number\)"),
    ("q.jsonl", '{"question": "a?", "answers": "x"}\n',
     r"q.jsonl:1: 'answers': the answers must be a list of strings \(got 'x'\)"),
    ("q.jsonl", '{"question": "a?", "answers": ["x", 1]}\n',
     r"q.jsonl:1: 'answers': the answers must be a list of strings \(got \['x', 1\]\)"),
    ("q.jsonl", '{"question": "a?", "answers": ["x", " "]}\n', r"q.jsonl:1: 'answers': answer 2 is blank"),
    ("q.jsonl", '{"question": "a?", "id": true}\n', r"q.jsonl:1: 'id': must be a string or a whole number"),
    ("q.jsonl", '{"question": "a?", "id": "x"}\n{"question": "b?"}\n{"question": "c?", "id": "x"}\n',
     r"q.jsonl:3: question id 'x' is also the id of line 1; give each question its own id"),
    ("q.csv", "id,question,answers\n1,a?,[\"x\"]\n2,\"b?\nstill b\",\"[\"\"x\"\", 2]\"\n",  # the row starts on line 3
     r"q.csv:3: column 3 \(answers\): the answers must be a list of strings \(got \['x', 2\]\)"),
    ("q.tsv", "question\tanswers\na?\t['x'\n", r"q.tsv:2: column 2 \(answers\): the answers must be a list of "
     r"strings \(got \"\['x'\", which is not a JSON or Python list\)"),
    ("q.csv", "id,question\n1,a?\n2,  \n", r"q.csv:3: column 2 \(question\): the question must be text \(blank\)"),
    ("q.csv", "query,answer\nwho?,Alba\n", r"q.csv:1: the header has no 'question' column \(its columns: 'query', "
     r"'answer'\)"),
    ("q.tsv", "id\tquestion\n1\ta?\n1\tb?\n", r"q.tsv:3: question id '1' is also the id of line 2"),
    # a quote left open: csv read the rest of the file into one cell, without a word (`search --questions` searched
    # "b?,y\nc?,z\n" as one question; eval said its line had no answers)
    ("q.csv", 'question,answer\na?,x\n"b?,y\nc?,z\n', r"q.csv:3: a quote opened in this row is never closed, so the "
     r"rest of the file reads as one cell"),
    ("q.tsv", 'question\n"a?\n', r"q.tsv:2: a quote opened in this row is never closed"),
    # ... and in a file whose rest is longer than csv's largest cell (128 KiB), csv gave up naming the line it had
    # reached (q.csv:30003: not valid CSV (field larger than field limit (131072))), not where the quote opens
    ("q.csv", 'question,answer\na?,x\n"b?,y\n' + "c?,z\n" * 30000, r"q.csv:3: a quote opened in this row is never "
     r"closed, and its cell runs on over 2\d{4} lines \(field larger than field limit"),
    # a text that is not valid Unicode (a JSON escape of a lone surrogate): the question, which no tokenizer takes
    # (`search --questions` failed with a traceback after loading the model), and the others, which no UTF-8 output
    # writes (`search` prints the id, `eval --out` ids and titles) or reading comprehension reads (a SQuAD context):
    # they failed after every question was searched, with a bare codec error naming no file, line or field
    ("q.jsonl", '{"question": "who?"}\n{"question": "bad \\ud800 one"}\n',
     r"q\.jsonl:2: 'question': character 5 \('\\ud800'\) is an unpaired surrogate, not valid Unicode text"),
    ("q.json", _squad(question="is \udc80 old?"),
     r"q\.json: question 'a': character 4 \('\\udc80'\) is an unpaired surrogate"),
    ("q.jsonl", '{"question": "who?", "id": "a\\ud800b"}\n',
     r"q\.jsonl:1: 'id': character 2 \('\\ud800'\) is an unpaired surrogate"),
    ("q.jsonl", '{"question": "who?", "title": "\\udc80"}\n', r"q\.jsonl:1: 'title': character 1 \('\\udc80'\)"),
    ("q.jsonl", '{"question": "who?", "doc_id": "d\\udfff"}\n', r"q\.jsonl:1: 'doc_id': character 2 \('\\udfff'\)"),
    ("q.jsonl", '{"question": "who?", "answers": ["x", "y\\ud800"]}\n',
     r"q\.jsonl:1: 'answers': answer 2: character 2 \('\\ud800'\)"),
    ("q.jsonl", '{"question": "who?", "answer": "\\ud800"}\n', r"q\.jsonl:1: 'answer': answer 1: character 1"),
    ("q.json", _squad(qid="a\ud800"), r"q\.json: question 'a\\ud800': 'id': character 2 \('\\ud800'\)"),
    ("q.json", _squad(title="R\udc80me"), r"q\.json: question 'a': 'title': character 2 \('\\udc80'\)"),
    ("q.json", _squad(context="Rome \ud800 is old."), r"q\.json: question 'a': 'context': character 6"),
    ("q.json", _squad(answer="o\udfffld"), r"q\.json: question 'a': answer 1: character 2 \('\\udfff'\)"),
    # a SQuAD file's question ids, blank questions and blank answers, refused as in the other formats: eval scored
    # two questions of one id (each printed and paired by it) and a blank question, and took "" for an answer that
    # any prediction normalising to nothing ("the") matched
    ("q.json", _squad(ids=("b", "a")), r"q\.json: data\[0\]\.paragraphs\[1\]: question id 'a' is also the id of a "
     r"question of data\[0\]\.paragraphs\[0\]; give each question its own id"),
    ("q.json", _squad(question=" \u200b "), r"q\.json: question 'a': the question must be text \(blank\)"),
    ("q.json", _squad(answer=" "), r"q\.json: question 'a': answer 1 is blank; write it or leave it out"),
])
def test_a_fault_is_named_with_its_file_line_and_column(tmp_path, name, text, said):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CorpusError, match=f"^{str(tmp_path).replace('.', '[.]')}/{said}"):
        read_questions(path)


def test_bytes_that_are_not_utf8_are_named_with_their_line(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_bytes(b"question\tanswers\nok?\t['x']\nbad \xff?\t['x']\n")
    with pytest.raises(CorpusError, match=r"q\.tsv:3: not UTF-8"):
        read_questions(path)


@pytest.mark.parametrize("name", ["q.json", "q.json.gz", "questions"])
@pytest.mark.parametrize("pad", [9000, 70000, 600000])
def test_json_lines_whose_first_line_is_longer_than_a_sniff_are_json_lines(tmp_path, name, pad):
    """The format was sniffed from the first 8 KB: a longer first line was cut, did not parse, and the file was read
    as SQuAD (an error about its ``data``); the first line is now read whole."""
    rows = [("q1", "Who wrote it? " + "very " * (pad // 5), ["Alba"], "Article 0"), ("q2", "When?", ["1850"], "B")]
    qf = _read(tmp_path, name, "\ufeff" + _jsonl(rows) if name == "q.json" else _jsonl(rows))
    assert qf.format == "jsonl" and _fields(qf) == [(i, q.strip(), tuple(a), t) for i, q, a, t in rows]


def test_a_first_line_past_the_sniff_limit_is_cut_and_a_squad_file_on_one_line_still_reads(tmp_path):
    from spanseek.core.questions import first_line

    path = tmp_path / "q.json"
    path.write_text("\n\n" + "x" * 50000 + "\nnext\n", encoding="utf-8")
    assert first_line(path) == "x" * 50000 and first_line(path, limit=20000) == "x" * (20000 - 2)
    (tmp_path / "e.json").write_text("\n \n", encoding="utf-8")
    assert first_line(tmp_path / "e.json") == ""
    squad = make_squad(n_articles=40)
    (tmp_path / "s.json").write_text(json.dumps(squad), encoding="utf-8")  # one line, longer than a sniff
    assert len((tmp_path / "s.json").read_bytes()) > 8192
    qf = read_questions(tmp_path / "s.json")
    assert qf.format == "squad" and len(qf.questions) == sum(
        len(p["qas"]) for a in squad["data"] for p in a["paragraphs"])


@pytest.mark.parametrize(("cell", "answers"), [
    ("[citation needed]", ("[citation needed]",)),  # brackets that are no list: one answer as written
    ("[1] Alba", ("[1] Alba",)),
    ("['Alba', \"O'Neil\"]", ("Alba", "O'Neil")),  # DPR's Python list
    ('["Alba", "the elder"]', ("Alba", "the elder")),
    ("[]", ()),
])
def test_an_answers_cell_in_brackets_is_a_list_only_when_it_reads_as_one(tmp_path, cell, answers):
    for sep, name in ((",", "q.csv"), ("\t", "q.tsv")):
        lines: list[str] = []
        csv.writer(_Lines(lines), delimiter=sep, lineterminator="\n").writerows([["question", "answers"], ["a?", cell]])
        assert _read(tmp_path, name, "".join(lines)).questions[0].answers == answers


@pytest.mark.parametrize("cell", ['["Alba", "the elder"', "['Alba'", "[ 'Alba', 3 x]"])
def test_a_broken_list_of_answers_is_still_refused(tmp_path, cell):
    path = tmp_path / "q.tsv"
    path.write_text(f"question\tanswers\na?\t{cell}\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"q\.tsv:2: column 2 \(answers\): .*which is not a JSON or Python list"):
        read_questions(path)


def test_stdin_json_lines_with_a_lone_surrogate_are_refused_naming_the_line():
    from spanseek.core.questions import jsonl_questions

    with pytest.raises(CorpusError, match=r"^stdin:2: 'question': character 1 \('\\udfff'\) is an unpaired"):
        jsonl_questions("stdin", [(1, '{"question": "who?"}'), (2, '{"question": "\\udfff?"}')])


def test_a_corpus_given_as_the_questions_is_named_as_a_corpus(tmp_path):
    """A corpus (JSON Lines of documents) given to `search --questions` or `eval --questions` was refused as a line
    whose question is missing, leaving the user to find that the file was the wrong one."""
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "a", "title": "A", "paragraphs": ["In 1450 Gala built it."]}) + "\n")
    with pytest.raises(CorpusError, match=r"corpus.jsonl:1: a corpus document \(its 'paragraphs'\), not a question: "
                                          r".* `spanseek index build --corpus` reads"):
        read_questions(path)
