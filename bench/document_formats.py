"""The held-out SQuAD articles as PDF, Word and Markdown files, through `spanseek corpus from-files`, indexed and
evaluated against the SQuAD paragraphs themselves: what reading real documents costs in accuracy.

    nice -n 19 .venv/bin/python bench/document_formats.py --out runs/formats [--formats squad pdf docx md] [--limit 800]
        [--squad squad-v1.1-train.json.gz --articles held-out|all --model default]

Each article becomes one file: its title as a heading, then its paragraphs (PDF: fpdf2, DejaVu Sans 11 pt on A4,
justified, the title also in the document's info; Word: python-docx, the title as a "Heading 1" and the document's
title property; Markdown: a ``#`` title). Every version is indexed with the default model and an exact (Flat) index
and evaluated on the same sample of the held-out questions. Prints one JSON line per version (phrase EM@1, passage
acc@5, ...) and writes ``OUT/results.json``. Steps whose output exists are not run again. Each step is a `spanseek`
command run in this process (``spanseek.cli.main``, as the installed command runs it), which imports torch and the
readers once rather than once a step.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from spanseek.cli import main as spanseek_main
from spanseek.core.holdout import Holdout
from spanseek.core.io import load_squad, write_json_atomic

SQUAD = "/work/shared/data/squad-v1.1-train.json.gz"
FONT = Path("/usr/share/fonts/truetype/dejavu")


def write_pdf(article: dict, path: Path) -> None:
    from fpdf import FPDF

    logging.getLogger("fontTools").setLevel(logging.ERROR)
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(True, margin=20)
    pdf.set_title(article["title"])
    pdf.add_font("DejaVu", "", str(FONT / "DejaVuSans.ttf"))
    pdf.add_font("DejaVu", "B", str(FONT / "DejaVuSans-Bold.ttf"))
    pdf.add_page()
    pdf.set_font("DejaVu", "B", 16)
    pdf.multi_cell(0, 9, article["title"])
    pdf.ln(3)
    pdf.set_font("DejaVu", "", 11)
    for paragraph in article["paragraphs"]:
        pdf.multi_cell(0, 5.5, paragraph["context"], align="J")
        pdf.ln(4)
    pdf.output(str(path))


def write_docx(article: dict, path: Path) -> None:
    import docx

    document = docx.Document()
    document.core_properties.title = article["title"]
    document.add_heading(article["title"], 1)
    for paragraph in article["paragraphs"]:
        document.add_paragraph(paragraph["context"])
    document.save(str(path))


def write_md(article: dict, path: Path) -> None:
    text = "\n\n".join([f"# {article['title']}", *(p["context"] for p in article["paragraphs"])])
    path.write_text(text + "\n", encoding="utf-8")


WRITERS = {"pdf": write_pdf, "docx": write_docx, "md": write_md}


def run(*argv: str) -> None:
    """`spanseek ARGV`, in this process; a failed command ends the benchmark with its exit status (its one line
    of error is on stderr already)."""
    print("+ spanseek", " ".join(argv), file=sys.stderr, flush=True)
    status = spanseek_main(list(argv))
    if status != 0:
        command = " ".join(word for word in argv[:2] if not word.startswith("-"))
        sys.exit(f"spanseek {command} exited with status {status}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/formats"))
    ap.add_argument("--formats", nargs="+", default=["squad", "pdf", "docx"], choices=["squad", *WRITERS])
    ap.add_argument("--limit", type=int, default=800, help="questions sampled (the same sample for every version)")
    ap.add_argument("--squad", default=SQUAD, help="SQuAD-format file of the articles")
    ap.add_argument("--articles", choices=["held-out", "all"], default="held-out",
                    help="the file's held-out articles (core.io.Holdout) or all of them")
    ap.add_argument("--model", default="default", help="the model that indexes and searches")
    args = ap.parse_args()
    os.nice(19)  # the steps run at the lowest priority, as they did as `nice -n 19` processes of their own
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = load_squad(args.squad)
    held = Holdout().split(data)[1] if args.articles == "held-out" else data
    questions = out / "held-out.json"
    if not questions.exists():
        write_json_atomic(questions, {"version": "holdout", "data": held})
    results = {}
    for fmt in args.formats:
        corpus, index, metrics = out / f"{fmt}.jsonl", out / f"{fmt}-index", out / f"{fmt}-metrics.json"
        if not corpus.exists():
            if fmt == "squad":
                run("corpus", "from-squad", str(questions), "--out", str(corpus))
            else:
                files = out / fmt
                files.mkdir(exist_ok=True)
                for i, article in enumerate(held):
                    WRITERS[fmt](article, files / f"{i:02d}.{fmt}")
                run("corpus", "from-files", str(files), "--out", str(corpus))
        if not (index / "manifest.json").exists():
            run("index", "build", "--corpus", str(corpus), "--model", args.model, "--out", str(index),
                "--factory", "Flat", "--quiet")
        if not metrics.exists():
            run("eval", "--questions", str(questions), "--index", str(index), "--model", args.model,
                "--limit", str(args.limit), "--out", str(metrics), "--quiet")
        m = json.loads(metrics.read_text())
        passages = sum(1 for _ in open(index / "passages.jsonl", encoding="utf-8"))
        results[fmt] = {"passages": passages, "phrase_em@1": m["phrase"]["em@1"], "passage_acc@1": m["passage"]["acc@1"],
                        "passage_acc@5": m["passage"]["acc@5"], "passage_acc@20": m["passage"]["acc@20"],
                        "doc_acc@1": m["doc"]["acc@1"], "n_questions": m["n_questions"]}
        print(json.dumps({"format": fmt, **results[fmt]}), flush=True)
    write_json_atomic(out / "results.json", results)


if __name__ == "__main__":
    main()
