"""Malformed SQuAD question files (core.io.load_squad): one CorpusError naming the file and the place
(``data[0].paragraphs[0].qas[0]``), never a KeyError or TypeError; valid v1.1 and v2 files load as before.

    .venv/bin/python -m pytest -q tests/core/test_squad_errors.py
"""

from __future__ import annotations

import copy
import json
import sys

import pytest

from spanseek.core.io import CorpusError, load_squad, squad_documents, squad_questions

CONTEXT = ("The iPod is a line of portable media players designed by Apple Inc. The first line was released on "
           "October 23, 2001.")
GOOD = {"data": [{"title": "IPod", "paragraphs": [
    {"context": CONTEXT, "qas": [{"id": "q0", "question": "Who designed the iPod?",
                                  "answers": [{"text": "Apple Inc.", "answer_start": 57}]}]},
    {"context": CONTEXT, "qas": [{"id": "q1", "question": "When was the first iPod released?",
                                  "answers": [{"text": "October 23, 2001", "answer_start": 99}]}]},
]}]}
PARA = "data[0].paragraphs[1]"
QA = f"{PARA}.qas[0]"


def _squad(tmp_path, change=None):
    """GOOD written to q.json after ``change(data)`` edits (a deep copy of) it."""
    obj = copy.deepcopy(GOOD)
    if change:
        change(obj["data"])
    path = tmp_path / "q.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def _para(data):
    return data[0]["paragraphs"][1]


def _qa(data):
    return _para(data)["qas"][0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda d: _qa(d).pop("question"), f'{QA}: "question" must be a string (missing)',
                     id="no-question"),
        pytest.param(lambda d: _qa(d).update(question=5), f'{QA}: "question" must be a string (got a number)',
                     id="question-int"),
        pytest.param(lambda d: _qa(d)["answers"][0].pop("text"),
                     f'{QA}.answers[0]: "text" must be a string (missing)', id="no-answer-text"),
        pytest.param(lambda d: _qa(d)["answers"][0].update(answer_start="x"),
                     f'{QA}.answers[0]: "answer_start" must be a whole number (got a string)', id="answer-start-str"),
        pytest.param(lambda d: _qa(d)["answers"].append("Apple"),
                     f"{QA}.answers[1]: must be an object (got a string)", id="answer-str"),
        pytest.param(lambda d: _qa(d)["answers"].insert(0, None), f"{QA}.answers[0]: must be an object (got null)",
                     id="answer-null"),
        pytest.param(lambda d: _qa(d).update(answers="October"), f'{QA}: "answers" must be a list (got a string)',
                     id="answers-str"),
        pytest.param(lambda d: _qa(d).update(id=["q1"]), f'{QA}: "id" must be a string (got a list)', id="id-list"),
        pytest.param(lambda d: _para(d)["qas"].append(None), f"{PARA}.qas[1]: must be an object (got null)",
                     id="qa-null"),
        pytest.param(lambda d: _para(d).update(qas={"a": 1}), f'{PARA}: "qas" must be a list (got an object)',
                     id="qas-dict"),
        pytest.param(lambda d: _para(d).update(context=42), f'{PARA}: "context" must be a string (got a number)',
                     id="context-int"),
        pytest.param(lambda d: d[0]["paragraphs"].append("just text"),
                     "data[0].paragraphs[2]: must be an object (got a string)", id="paragraph-str"),
        pytest.param(lambda d: d[0].update(title=42), 'data[0]: "title" must be a string (got a number)',
                     id="title-int"),
        pytest.param(lambda d: d[0].pop("paragraphs"), 'data[0]: "paragraphs" must be a list (missing)',
                     id="no-paragraphs"),
        pytest.param(lambda d: d.append([]), "data[1]: must be an object (got a list)", id="article-list"),
    ],
)
def test_malformed_squad_names_the_file_and_place(tmp_path, change, message):
    path = _squad(tmp_path, change)
    with pytest.raises(CorpusError) as e:
        load_squad(path)
    assert str(e.value) == f"{path}: {message}"


def test_valid_v1_and_v2_files_load_as_before(tmp_path):
    def v2(data):
        data[0]["paragraphs"][0]["qas"].append({"id": "imp", "question": "Who sued?", "answers": [],
                                                "is_impossible": True,
                                                "plausible_answers": [{"text": "Apple", "answer_start": 57}]})
        _qa(data).pop("id")  # optional, as are "answers", "qas", "context" and "title"
        data.append({"paragraphs": [{"context": "No questions here."}, {"qas": []}]})

    data = load_squad(_squad(tmp_path, v2))
    assert [d.title for d in squad_documents(data)] == ["IPod", "article-1"]
    qs = squad_questions(data)
    assert [(q.id, q.answers, q.answer_starts) for q in qs] == [
        ("q0", ("Apple Inc.",), (57,)), ("imp", (), ()), ("0-1-2", ("October 23, 2001",), (99,))]


def test_a_file_without_articles_is_no_corpus(tmp_path):
    from spanseek.core.io import from_squad

    empty = tmp_path / "empty.json"
    empty.write_text('{"data": []}')
    with pytest.raises(CorpusError, match="no articles"):
        from_squad(empty, tmp_path / "corpus.jsonl")
    assert not (tmp_path / "corpus.jsonl").exists()


def test_paragraphs_without_a_context_are_said(tmp_path, caplog):
    """Optional in the format (and read as empty), but a passage without text: from-squad says so, naming one."""
    from spanseek.core.io import from_squad

    path = _squad(tmp_path, lambda d: _para(d).pop("context"))
    from_squad(path, tmp_path / "corpus.jsonl")
    assert '1 paragraph without a "context" (the first: data[0].paragraphs[1])' in caplog.text


def test_a_utf8_bom_is_allowed(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    assert load_squad(path) == GOOD["data"]


def test_malformed_squad_reaches_the_command_line_as_one_line(tmp_path, capsys):
    from spanseek.cli import main

    path = _squad(tmp_path, lambda d: d[0].update(title=42))
    out = tmp_path / "c.jsonl"
    assert main(["corpus", "from-squad", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f'{path}: data[0]: "title" must be a string (got a number)' in err and "Traceback" not in err
    assert not out.exists()


def test_an_integer_too_long_to_read_names_the_file(tmp_path, capsys):
    """Python reads at most 4,300 digits of an integer: a longer one was a bare ValueError naming no file."""
    from spanseek.cli import main

    path = tmp_path / "q.json"
    path.write_text(json.dumps(GOOD).replace('"answer_start": 99', '"answer_start": 1' + "0" * 5000))
    with pytest.raises(CorpusError) as e:
        load_squad(path)
    message = (f"{path}: invalid JSON (an integer of more than {sys.get_int_max_str_digits()} digits, too long to "
               "read as a number; write it as a string)")
    assert str(e.value) == message
    assert main(["corpus", "from-squad", str(path), "--out", str(tmp_path / "c.jsonl")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# --- files that are not SQuAD JSON at all: said as what they are, with the shape that is wanted ---


def _rows():
    qa = GOOD["data"][0]["paragraphs"][0]["qas"][0]
    return [{"id": "q0", "question": qa["question"], "answer": "Apple Inc.", "context": CONTEXT},
            {"id": "q1", "question": "When?", "answer": "October 23, 2001", "context": CONTEXT}]


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        pytest.param("q.json", "", "the file is empty", id="empty"),
        pytest.param("q.json", "\n  \n", "the file is empty", id="blank"),
        pytest.param("q.jsonl", "".join(json.dumps(r) + "\n" for r in _rows()),
                     "JSON Lines (one object a line, the first with the keys 'id', 'question', 'answer', 'context'), "
                     "not SQuAD-format JSON", id="json-lines"),
        pytest.param("q.csv", 'question,answer,context\n"Who?",Apple Inc.,"The iPod, by Apple Inc."\n',
                     "comma-separated values (a first line of 3 fields), not SQuAD-format JSON", id="csv"),
        pytest.param("q.tsv", "question\tanswer\tcontext\nWho?\tApple\tThe iPod\n",
                     "tab-separated values (a first line of 3 fields), not SQuAD-format JSON", id="tsv"),
        pytest.param("q.json", json.dumps(_rows()), "a JSON list, not SQuAD format", id="json-list"),
        pytest.param("q.json", json.dumps({"questions": _rows()}),
                     "not SQuAD format (expected an object with a 'data' list)", id="no-data"),
    ],
)
def test_a_file_of_another_format_is_named_with_the_shape_wanted(tmp_path, name, text, said):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CorpusError) as e:
        load_squad(path)
    assert str(e.value).startswith(f"{path}: {said}")
    assert 'SQuAD-format question files are one JSON object: {"data": [{"title"' in str(e.value)


def test_broken_json_that_is_meant_as_squad_keeps_its_line_and_column(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps(GOOD, indent=1)[:-40], encoding="utf-8")  # cut short: the place of the error
    with pytest.raises(CorpusError, match=r"invalid JSON \(.* at line \d+, column \d+\)$"):
        load_squad(path)
