"""Question files: SQuAD-format JSON, and open-domain lists of questions and answers (JSON Lines, CSV, TSV).

    spanseek eval --questions nq-open.jsonl --index INDEX_DIR
    spanseek search --index INDEX_DIR --questions questions.tsv

``read_questions`` reads every format; the format comes from the name (``question_format``), ``.gz`` stripped:

- ``.json``: SQuAD format (``core.io.load_squad``), or JSON Lines when its first line is a whole object with a
  ``question``;
- ``.jsonl`` / ``.ndjson``: one object a line, ``{"question": str, "answers": [str, ...]}`` (``answer`` as in
  NQ-open, a list or one string, in its place), optional ``id`` (a string or a whole number), ``title`` and
  ``doc_id`` (the gold document, by its title or its corpus id);
- ``.csv`` / ``.tsv``: a header naming the columns (``question``, and ``answers`` or ``answer``, ``id``, ``title``,
  ``doc_id``; others are not read), or no header when the second field of the first row is a list of answers, as in
  DPR's ``*.qa.csv`` (question, answers). An answers cell is a JSON or Python list of strings, or one answer
  written plainly (``[citation needed]`` too: a cell in brackets is a list only when it parses as one, and one that
  starts as a list of strings, ``["`` or ``['``, but does not parse is refused). A ``.csv`` whose first line has a
  tab is read as tab-separated (DPR's are);
- ``.txt``: one question a line (``spanseek search`` only: it has no answers);
- any other name: sniffed (a JSON object, JSON Lines, a tab on the first line, a ``question`` column) or plain text.

Sniffing reads the first line that is not blank whole (up to 1 MiB: a longer one is no line of questions).
``jsonl_questions`` reads JSON Lines from elsewhere (``spanseek search`` reads stdin as them when its first line is
a question object, ``is_question_line``).

JSON Lines and CSV/TSV questions carry no passage: they serve open-domain evaluation and search, not reading
comprehension or training, which read each question's passage. A question without an id takes ``line-N`` (its
line). Errors name the file and line (and the column of a CSV/TSV field): a line that is not JSON, a missing or
blank question, answers that are not a list of strings, a header without a question column, an id used twice.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from spanseek.core.io import (
    CorpusError,
    Question,
    has_text,
    load_squad,
    loads_json,
    read_head,
    read_lines,
    squad_questions,
)

QuestionFormat = Literal["squad", "jsonl", "csv", "tsv", "text"]
OPEN_FORMATS: tuple[QuestionFormat, ...] = ("jsonl", "csv", "tsv")  # questions and answers, no passage
FORMAT_NAMES = {"squad": "SQuAD-format JSON", "jsonl": "JSON Lines", "csv": "CSV", "tsv": "TSV", "text": "plain text"}
_SUFFIXES: dict[str, QuestionFormat] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".tsv": "tsv", ".txt": "text"}
COLUMNS = ("question", "answers", "answer", "id", "title", "doc_id")  # the CSV/TSV columns read
FIRST_LINE_LIMIT = 1 << 20  # bytes of a first line read to sniff it: a line of questions is far shorter
_LIST_START = re.compile(r"\[\s*(['\"\]]|$)")  # how a list of strings (or an empty list) starts


@dataclass(frozen=True)
class QuestionFile:
    """The questions of a file, its format, and where each question is (its line, for messages)."""

    path: Path
    format: QuestionFormat
    questions: list[Question]
    lines: list[int]  # each question's line in the file (0 for SQuAD: its place is data[i]...)
    has_answers: list[bool]  # whether each question came with answers (SQuAD v2 gives an empty list for none)
    articles: list[dict[str, Any]] = field(default_factory=list)  # a SQuAD file's ``data`` list (its passages)

    @property
    def open_domain(self) -> bool:
        """Whether the questions come without their passages (JSON Lines, CSV, TSV, plain text)."""
        return self.format != "squad"

    def without_answers(self) -> int | None:
        """The line of the first question given without answers (None: every one has some)."""
        return next((line for line, has in zip(self.lines, self.has_answers, strict=True) if not has), None)


def question_format(path: str | Path) -> QuestionFormat:
    """The format of a question file, from its suffix (``.gz`` stripped), sniffing the first line of a ``.json``
    (SQuAD, or JSON Lines when the first line is an object with a ``question``), a ``.csv`` (comma or tab) and a
    file of any other suffix."""
    path = Path(path)
    suffix = Path(path.name.removesuffix(".gz")).suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    first = first_line(path)
    if suffix == ".csv":
        return "tsv" if "\t" in first else "csv"  # DPR's .qa.csv: question<TAB>answers, commas in both
    if first.lstrip().startswith("{"):
        # a line of questions; any other object (or a SQuAD file laid out on many lines) is meant as SQuAD, whose
        # reader says what is wrong with it
        return "jsonl" if is_question_line(first) else "squad"
    if suffix == ".json":
        return "squad"  # load_squad says what it is instead (a list, CSV, an empty file)
    if "\t" in first:
        return "tsv"
    if "question" in (f.strip().lower() for f in first.split(",")):
        return "csv"
    return "text"


def first_line(path: str | Path, limit: int = FIRST_LINE_LIMIT) -> str:
    """The first line of a file that is not blank, whole up to ``limit`` bytes (a longer one is cut there: no line
    of questions is that long, and a SQuAD file on one line is read by its own reader); "" for a file of blank lines.
    Read in growing pieces, so a short first line costs one small read."""
    size = 8192
    while True:
        head = read_head(path, size)
        lines = head.split("\n")
        at = next((i for i, line in enumerate(lines) if line.strip()), None)
        ended = len(head.encode("utf-8")) < size - 8  # the file is shorter (its text less a BOM and a cut character)
        if at is not None and (at < len(lines) - 1 or ended or size >= limit):
            return lines[at].removesuffix("\r")
        if at is None and ended:
            return ""
        if size >= limit:
            return ""  # a limit's worth of blank lines
        size = min(size * 8, limit)


def is_question_line(line: str) -> bool:
    """Whether a line is one of JSON Lines questions: a JSON object with a ``question`` key."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and "question" in obj


def jsonl_questions(name: str | Path, lines: Iterable[tuple[int, str]]) -> QuestionFile:
    """The questions of JSON Lines given as (line number, text), checked as a file's (``read_questions``); ``name``
    is where they came from, for messages (``stdin``)."""
    return _checked(Path(name), "jsonl", _jsonl_records(Path(name), lines))


def read_questions(path: str | Path) -> QuestionFile:
    """The questions of a question file in any of the module's formats, checked (CorpusError naming the file and
    line at the first fault)."""
    path = Path(path)
    fmt = question_format(path)
    if fmt == "squad":
        data = load_squad(path)
        questions = squad_questions(data)
        context = None  # the last one checked: a paragraph's questions come together and share it
        seen: dict[str, str] = {}
        for q in questions:  # what is searched, printed (the id) or read (the context, the answers)
            where = f"{path}: question {q.id!r}"
            place = f"data[{q.doc_index}].paragraphs[{q.para_index}]"
            _check_new_id(seen, q.id, f"a question of {place}", f"{path}: {place}")
            if not has_text(q.question):
                raise CorpusError(f"{where}: the question must be text (blank)")
            _check_unicode(q.question, where)
            for name, text in (("id", q.id), ("title", q.title)):
                _check_unicode(text, f"{where}: {name!r}")
            if q.context is not context:
                _check_unicode(q.context, f"{where}: 'context'")
                context = q.context
            for i, answer in enumerate(q.answers):
                if not has_text(answer):
                    raise CorpusError(f"{where}: answer {i + 1} is blank; write it or leave it out")
                _check_unicode(answer, f"{where}: answer {i + 1}")
        return QuestionFile(path, fmt, questions, [0] * len(questions), [True] * len(questions), data)
    if fmt == "text":
        rows: Iterable[tuple[int, _Record]] = (
            (n, _record(path, n, {"question": line.strip()})) for n, line in read_lines(path) if line.strip())
    elif fmt == "jsonl":
        rows = _jsonl_records(path, read_lines(path))
    else:
        rows = _table_records(path, "\t" if fmt == "tsv" else ",")
    return _checked(path, fmt, rows)


def _checked(path: Path, fmt: QuestionFormat, rows: Iterable[tuple[int, _Record]]) -> QuestionFile:
    """The questions of an open-domain file's records, each with its id (``line-N`` where it has none); CorpusError
    at an id used twice."""
    questions, lines, has_answers = [], [], []
    seen: dict[str, str] = {}
    for n, rec in rows:
        qid = rec.id if rec.id is not None else f"line-{n}"
        _check_new_id(seen, qid, f"line {n}", f"{path}:{n}")
        questions.append(Question(id=qid, question=rec.question, answers=rec.answers, answer_starts=(),
                                  title=rec.title, context="", doc_index=-1, para_index=-1, doc_id=rec.doc_id))
        lines.append(n)
        has_answers.append(bool(rec.answers))
    return QuestionFile(path, fmt, questions, lines, has_answers)


def _check_new_id(seen: dict[str, str], qid: str, place: str, where: str) -> None:
    """Record that question ``qid`` is ``place`` (``line 3``, ``a question of data[0].paragraphs[2]``); CorpusError
    starting with ``where`` when an earlier question (in ``seen``) has the id: search prints, and eval reports, each
    question by its id, and a comparison of two runs pairs questions by it."""
    if qid in seen:
        raise CorpusError(f"{where}: question id {qid!r} is also the id of {seen[qid]}; give each question its "
                          "own id")
    seen[qid] = place


@dataclass(frozen=True)
class _Record:
    question: str
    answers: tuple[str, ...] = ()
    id: str | None = None
    title: str = ""
    doc_id: str | None = None


def _record(path: Path, lineno: int, fields: dict[str, Any], columns: dict[str, int] | None = None) -> _Record:
    """A question of line ``lineno`` from its fields (``columns``: each field's CSV column, for messages)."""
    def at(name: str) -> str:
        col = f" column {columns[name] + 1} ({name})" if columns is not None and name in columns else f" {name!r}"
        return f"{path}:{lineno}:{col}"

    question = fields.get("question")
    if not isinstance(question, str) or not has_text(question):
        got = "missing" if question is None else "blank" if isinstance(question, str) else f"a {_kind(question)}"
        if question is None and "paragraphs" in fields and columns is None:  # a corpus given for the questions
            raise CorpusError(f"{path}:{lineno}: a corpus document (its 'paragraphs'), not a question: give the "
                              "questions (a 'question' each, docs/questions.md); a corpus is what `spanseek index "
                              "build --corpus` reads")
        raise CorpusError(f"{at('question')}: the question must be text ({got})")
    _check_unicode(question, at("question"))
    key = "answers" if "answers" in fields else "answer"
    answers = fields.get(key)
    if answers is None or answers == "":
        answers = []
    elif isinstance(answers, str) and (key == "answer" or columns is not None):
        answers = [answers]  # one answer, as NQ-open's "answer" may be, or a plain CSV cell
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise CorpusError(f"{at(key)}: the answers must be a list of strings (got {_shown(answers)})")
    blank = next((i for i, a in enumerate(answers) if not has_text(a)), None)
    if blank is not None:
        raise CorpusError(f"{at(key)}: answer {blank + 1} is blank; write it or leave it out")
    out: dict[str, str | None] = {}
    for name in ("id", "title", "doc_id"):
        value = fields.get(name)
        if value is None or value == "":
            out[name] = None
        elif isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            out[name] = str(value)
        else:
            raise CorpusError(f"{at(name)}: must be a string{' or a whole number' * (name != 'title')} "
                              f"(got a {_kind(value)})")
        _check_unicode(out[name] or "", at(name))  # the id is printed with the hits, the title and doc_id compared
    for i, answer in enumerate(answers):
        _check_unicode(answer, f"{at(key)}: answer {i + 1}")
    return _Record(question.strip(), tuple(answers), out["id"], out["title"] or "", out["doc_id"])


def _check_unicode(text: str, where: str) -> None:
    """CorpusError at a text of a question (the question, its answers, id, title, doc_id, a SQuAD context) holding a
    lone surrogate (a JSON escape, ``"\\ud800"``, reads as one), which no tokenizer takes and no UTF-8 output can
    write (``search`` prints the id, ``eval --out`` the ids and titles): said as the file is read, naming where, not
    after its questions are searched."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise CorpusError(f"{where}: character {e.start + 1} ({text[e.start]!a}) is an unpaired surrogate, not "
                          "valid Unicode text") from None


def _kind(value: Any) -> str:
    return {dict: "JSON object", list: "list", bool: "true/false", float: "number", int: "number"}.get(
        type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonl_records(path: Path, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, _Record]]:
    for n, line in lines:
        if not line.strip():
            continue
        obj = loads_json(line, f"{path}:{n}")
        if not isinstance(obj, dict):
            raise CorpusError(f"{path}:{n}: each line must be a JSON object {{\"question\": ..., \"answers\": [...]}} "
                              f"(got a {_kind(obj)})")
        yield n, _record(path, n, obj)


def _answers_cell(path: Path, lineno: int, col: int, name: str, cell: str) -> list[str] | str:
    """An answers cell: a JSON or Python list (DPR writes Python's), or one answer as it reads ("[citation needed]":
    a cell in brackets that does not parse and does not start as a list of strings does, ``["`` or ``['``)."""
    text = cell.strip()
    if not text.startswith("["):
        return cell
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            if not _LIST_START.match(text):
                return cell
            raise CorpusError(f"{path}:{lineno}: column {col + 1} ({name}): the answers must be a list of strings "
                              f"(got {_shown(cell)}, which is not a JSON or Python list)") from None
    return value


# a last line after the file's own: csv reads it into a cell when a quote was left open, which it does not report
_END = "\u2063end of file\u2063"


def _table_records(path: Path, sep: str):
    """The records of a CSV or TSV file: a header naming the columns, or DPR's rows of question and answers."""
    lines = ((n, line) for n, line in read_lines(path))
    line_of: list[int] = []  # each line csv reads, as the file numbers it (blank lines included)

    def text():
        for n, line in lines:
            line_of.append(n)
            yield line
        line_of.append(line_of[-1] + 1 if line_of else 1)
        yield _END + "\n"

    reader = csv.reader(text(), delimiter=sep)
    name = FORMAT_NAMES["tsv" if sep == "\t" else "csv"]
    columns: dict[str, int] | None = None
    consumed = 0  # the lines csv had read before the row: a quoted cell may span lines
    try:
        for row in reader:
            start, consumed = line_of[consumed], reader.line_num
            if row == [_END]:
                break
            if any(_END in cell for cell in row):
                raise _open_quote(path, start, "so the rest of the file reads as one cell")
            if not any(cell.strip() for cell in row):
                continue
            if columns is None:
                columns, header = _columns(path, start, row)
                if header:
                    continue
            fields: dict[str, Any] = {}
            for key, col in columns.items():
                cell = row[col] if col < len(row) else ""
                fields[key] = _answers_cell(path, start, col, key, cell) if key in ("answers", "answer") else cell
            yield start, _record(path, start, fields, columns)
    except csv.Error as e:
        if len(line_of) - consumed > 1:  # the row runs on over lines: a quote opened in it, and csv gave up on the cell
            raise _open_quote(path, line_of[consumed], f"and its cell runs on over {len(line_of) - consumed} lines "
                              f"({e})") from None
        raise CorpusError(f"{path}:{line_of[-1] if line_of else 1}: not valid {name} ({e})") from None


def _open_quote(path: Path, lineno: int, then: str) -> CorpusError:
    """The error of a quote opened on line ``lineno`` (where its row starts) that no quote closes."""
    return CorpusError(f"{path}:{lineno}: a quote opened in this row is never closed, {then}; close it (a quote "
                       'inside a quoted cell is written twice: "")')


def _columns(path: Path, lineno: int, row: list[str]) -> tuple[dict[str, int], bool]:
    """The columns of a table file (name -> column) and whether ``row`` is a header naming them; without a header,
    DPR's question and answers when the row's second field is a list."""
    names = [cell.strip().lower() for cell in row]
    if "question" in names:
        return {name: names.index(name) for name in COLUMNS if name in names}, True
    if len(row) >= 2 and row[1].strip().startswith("["):  # DPR's headerless question<TAB>answers
        return {"question": 0, "answers": 1}, False
    raise CorpusError(f"{path}:{lineno}: the header has no 'question' column (its columns: "
                      f"{', '.join(map(repr, row[:8]))}); name the columns on the first line, e.g. "
                      "question,answers (or give DPR's rows: a question and a list of answers)")
