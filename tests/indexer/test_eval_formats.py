"""Open-domain question files in `spanseek eval`, `spanseek search --questions` and `spanseek train`: the same
questions written as SQuAD JSON, JSON Lines, CSV and TSV evaluate to the same metrics on one index (the oracle is
the SQuAD run); a gold document given by doc_id is matched by id; what open-domain questions cannot do (reading
comprehension, training, eval without answers or without an index) is refused naming the file and why.

    .venv/bin/python -m pytest -q tests/indexer/test_eval_formats.py
"""

from __future__ import annotations

import csv
import json

import pytest

from spanseek.cli import main
from spanseek.core.io import from_squad, squad_questions
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.evaluate import run_eval
from tests.conftest import make_squad

KW = {"progress": False, "precision": "fp32"}
TIMINGS = ("seconds", "questions_per_second")


@pytest.fixture(scope="module")
def squad_index(tmp_path_factory, tiny_model_dir):
    """A SQuAD-format question file, the same questions as JSON Lines, CSV and TSV, and the index of its articles
    (document i = article i)."""
    d = tmp_path_factory.mktemp("formats")
    squad = make_squad(n_articles=3, n_paras=2)
    (d / "q.json").write_text(json.dumps(squad), encoding="utf-8")
    from_squad(d / "q.json", d / "corpus.jsonl")
    build_index(d / "corpus.jsonl", tiny_model_dir, d / "index", BuildOptions(progress=False, precision="fp32"))
    qs = squad_questions(squad["data"])
    with open(d / "q.jsonl", "w", encoding="utf-8") as f:
        for q in qs:
            f.write(json.dumps({"id": q.id, "question": q.question, "answers": list(q.answers), "title": q.title}) + "\n")
    for name, sep in (("q.csv", ","), ("q.tsv", "\t")):
        with open(d / name, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, delimiter=sep)
            writer.writerow(["id", "question", "answers", "title"])
            writer.writerows([q.id, q.question, json.dumps(list(q.answers)), q.title] for q in qs)
    with open(d / "dpr.qa.csv", "w", encoding="utf-8") as f:  # DPR's form: no header, no id, no title
        f.writelines(f"{q.question}\t{list(q.answers)!r}\n" for q in qs)
    return d


def _eval(d, name: str, **kw) -> dict:
    m = run_eval(d / name, None, index=d / "index", per_question=True,
                 **KW, **kw)
    for key in TIMINGS + ("model",):
        m.pop(key)
    return m


@pytest.mark.parametrize("name", ["q.jsonl", "q.csv", "q.tsv"])
def test_the_same_questions_in_any_format_evaluate_the_same(squad_index, name):
    oracle = _eval(squad_index, "q.json")
    assert oracle["n_questions"] > 10 and "doc" in oracle
    assert _eval(squad_index, name) == oracle
    sampled = _eval(squad_index, "q.json", limit=7)
    assert _eval(squad_index, name, limit=7) == sampled  # --limit samples the same questions


def test_dpr_rows_without_titles_evaluate_the_same_phrases_and_passages_and_no_documents(squad_index):
    oracle, dpr = _eval(squad_index, "q.json"), _eval(squad_index, "dpr.qa.csv")
    assert "doc" not in dpr  # no question names its document: nothing to measure
    for key in ("n_questions", "phrase", "passage"):
        assert dpr[key] == oracle[key]
    assert dpr["per_question"]["phrase.em@1"] == oracle["per_question"]["phrase.em@1"]


def test_a_doc_id_is_matched_by_id_before_the_title(squad_index, tmp_path):
    qs = [json.loads(line) for line in (squad_index / "q.jsonl").read_text().splitlines()]
    index_ids = {json.loads(line)["id"]: json.loads(line)["title"]
                 for line in (squad_index / "corpus.jsonl").read_text().splitlines()}
    by_title = {t: i for i, t in index_ids.items()}
    right = tmp_path / "right.jsonl"  # the right ids under wrong titles: scored as the SQuAD run's titles are
    right.write_text("".join(json.dumps({**q, "doc_id": by_title[q["title"]], "title": "elsewhere"}) + "\n"
                             for q in qs), encoding="utf-8")
    wrong = tmp_path / "wrong.jsonl"  # ids the index does not hold under the right titles: never found
    wrong.write_text("".join(json.dumps({**q, "doc_id": "no-such-doc"}) + "\n" for q in qs), encoding="utf-8")
    oracle = _eval(squad_index, "q.json")
    assert run_eval(right, None, index=squad_index / "index", **KW)["doc"] == oracle["doc"]
    m = run_eval(wrong, None, index=squad_index / "index", **KW)
    assert m["doc"] == {"acc@1": 0.0, "acc@5": 0.0, "articles_not_in_index": len(qs)}


@pytest.mark.parametrize(("argv", "said"), [
    (["--index", "{d}/index", "--reading-comprehension"],
     "{d}/q.jsonl: --reading-comprehension answers each question from its gold passage, which a JSON Lines question "
     "file does not hold"),
    ([], "{d}/q.tsv: TSV questions hold no passages to index; give the index to search (--index DIR) or a corpus"),
    (["--index", "{d}/index"], "{d}/noanswers.csv:3: the question has no answers, and eval scores each question "
     "against its answers"),
    (["--index", "{d}/index"], "{d}/q.txt: plain text questions have no answers to score"),
])
def test_what_open_domain_questions_cannot_do_is_refused_before_a_model_loads(squad_index, capsys, argv, said):
    d = squad_index
    (d / "noanswers.csv").write_text("question,answers\nwho?,Alba\nwhen?,\n", encoding="utf-8")
    (d / "q.txt").write_text("who?\n", encoding="utf-8")
    name = said.split(":")[0].split("/")[-1]
    code = main(["eval", "--questions", str(d / name), "--model", str(d / "no-model"), "--quiet",
                 *[a.format(d=d) for a in argv]])
    err = capsys.readouterr().err
    assert code == 2 and said.format(d=d) in err, err


def test_search_reads_a_question_file_and_names_each_question(squad_index, tiny_model_dir, capsys):
    def search(*args: str) -> list[dict]:
        assert main(["search", "--index", str(squad_index / "index"), "--model", str(tiny_model_dir), "--device",
                     "cpu", "--top-k", "2", *args]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    qs = [json.loads(line) for line in (squad_index / "q.jsonl").read_text().splitlines()][:3]
    (squad_index / "three.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs), encoding="utf-8")
    (squad_index / "three.txt").write_text("".join(q["question"] + "\n" for q in qs), encoding="utf-8")
    given = search(*[q["question"] for q in qs])
    from_jsonl = search("--questions", str(squad_index / "three.jsonl"))
    assert [r.pop("id") for r in from_jsonl] == [q["id"] for q in qs]
    assert from_jsonl == given
    from_text = search("--questions", str(squad_index / "three.txt"))
    assert [r.pop("id") for r in from_text] == ["line-1", "line-2", "line-3"] and from_text == given
    assert main(["search", "--index", str(squad_index / "index"), "--questions", str(squad_index / "three.txt"),
                 "who?"]) == 2
    assert "questions given both as arguments and in --questions" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["qsft", "phrase"])
def test_training_refuses_questions_without_passages_naming_why(squad_index, tiny_model_dir, tmp_path, capsys,
                                                                command):
    out = tmp_path / "run"
    argv = ["train", command, "--train", str(squad_index / "q.jsonl"), "--out", str(out)]
    assert main(argv + (["--model", str(tiny_model_dir)] if command == "qsft" else [])) == 2
    err = capsys.readouterr().err
    assert (f"{squad_index}/q.jsonl: JSON Lines questions and answers, without their passages; training reads each "
            "question's passage (its context) and the answer's place in it") in err, err
    assert not out.exists()
