"""Flags generated from option dataclasses (core.options): a long flag shortened to a beginning no other flag of the
help shares is that flag, its choice read after it; the flags a choice is spelled as are never offered or matched.

    .venv/bin/python -m pytest -q tests/core/test_options.py
"""

from __future__ import annotations

import pytest

from spanseek.cli import build_parser, main

SEARCH = ["search", "--index", "x"]


@pytest.mark.parametrize(("argv", "field", "value", "questions"), [
    (["--collapse-dup", "near", "who?"], "collapse_duplicates", "near", ["who?"]),
    (["--collapse-dup=near", "who?"], "collapse_duplicates", "near", ["who?"]),
    (["--collapse-d", "exact", "who?"], "collapse_duplicates", "exact", ["who?"]),
    (["--collapse", "false", "who?"], "collapse_duplicates", False, ["who?"]),
    (["--collapse-dup", "who?"], "collapse_duplicates", True, ["who?"]),
    (["--collapse-dup", "--", "near"], "collapse_duplicates", True, ["near"]),
    (["--no-coll", "who?"], "collapse_duplicates", False, ["who?"]),
    (["--top", "3", "who?"], "top_k", 3, ["who?"]),
    (["--top=3", "who?"], "top_k", 3, ["who?"]),
    (["--ve", "codes", "who?"], "vector_source", "codes", ["who?"]),  # spanseek's own --verbose begins so too
    (["--", "--top", "3"], "top_k", 10, ["--top", "3"]),
    (["--top what is it?"], "top_k", 10, ["--top what is it?"]),  # a word with a space is a question, as in argparse
])
def test_a_flag_shortened_to_a_beginning_of_its_own_is_that_flag(argv, field, value, questions):
    args = build_parser().parse_args([*SEARCH, *argv])
    assert (getattr(args, field), args.questions) == (value, questions)


def test_spanseek_s_own_flag_shortened_is_read_before_the_command():
    args = build_parser().parse_args(["--verb", *SEARCH, "--top", "2", "who?"])
    assert (args.verbose, args.top_k, args.questions) == (True, 2, ["who?"])


@pytest.mark.parametrize(("argv", "error"), [
    (["--re", "who?"], "ambiguous option: --re could match --read, --read-passages, --read-below, --reader"),
    (["--no-", "who?"], "ambiguous option: --no- could match --no-merge-answers, --no-collapse-duplicates, "
                        "--no-allow-overlap, --no-read"),
    (["--collapse-duplicates-ne", "who?"],
     "unrecognized arguments: --collapse-duplicates-ne; did you mean --collapse-duplicates?"),
    (["--collapse-duplicates-nera", "who?"],
     "unrecognized arguments: --collapse-duplicates-nera; did you mean --collapse-duplicates?"),
])
def test_a_refused_flag_is_named_among_the_help_s_flags_only(capsys, argv, error):
    """The flags a choice is spelled as (``--collapse-duplicates-near``) are neither matched by a beginning nor named
    in an error: the user never typed them and the help does not list them."""
    with pytest.raises(SystemExit) as e:
        main([*SEARCH, *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.endswith(f"spanseek search: error: {error}\n"), err
    assert "--collapse-duplicates-" not in err.replace(argv[0], "")  # (the flag given, in the error)


def test_a_command_s_hidden_operand_flag_may_be_shortened():
    """``index verify --index DIR`` (the help names it beside the operand) is no choice's spelling: it shortens."""
    args = build_parser().parse_args(["index", "verify", "--ind", "some-index"])
    assert args.index == "some-index"


def test_a_value_a_config_refuses_is_named_by_its_flag(capsys):
    """``spanseek eval --max-answer-tokens 0`` said "max_answer_tokens must be an integer >= 1", the name of a field
    inside the program; the check a config makes of its field now names the flag given."""
    assert main([*SEARCH, "--max-answer-tokens", "0", "who?"]) == 2
    assert "error: --max-answer-tokens must be an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["eval", "--questions", "q.json", "--index", "nowhere", "--max-answer-tokens", "0"]) == 2
    assert "error: --max-answer-tokens must be an integer >= 1, got 0" in capsys.readouterr().err
