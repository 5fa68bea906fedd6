"""E-mail messages (.eml) made here with the standard library's ``email`` package, through ``indexer.mail`` and
``corpus from-files``: the subject as the title, senders, recipients and date as metadata, the text part (or the HTML
part) as the body, attachments named and not read; files that are no message, or whose body cannot be read, named
with what is wrong.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_mail.py
"""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer.extracted import Unreadable
from spanseek.indexer.ingest import from_files
from spanseek.indexer.mail import extract_eml

TEXT = "Dear Hugo,\n\nthe ferry to Lerwick now leaves at 17:30\nfrom pier 3.\n\nRegards,\nAnn\n"
HTML = ("<html><body><h1>Timetable</h1><p>The ferry to Lerwick now leaves at 17:30 from pier 3.</p>"
        "<table><tr><th>Ship</th><th>Departs</th></tr><tr><td>Hrossey</td><td>17:30</td></tr></table></body></html>")


def write_eml(path: Path, text: str | None = TEXT, html: str | None = None, attach: bool = False,
              charset: str = "utf-8") -> Path:
    message = EmailMessage()
    message["From"] = "Ann Gala <ann@example.org>"
    message["To"] = "Hugo Berg <hugo@example.org>, =?utf-8?q?Mairi_Fl=C3=A9tt?= <mairi@example.org>"
    message["Subject"] = "=?utf-8?q?Ferry_times_for_Caf=C3=A9_staff?="
    message["Date"] = "Tue, 05 Mar 2024 14:30:00 +0100"
    if text is not None:
        message.set_content(text, charset=charset, cte="quoted-printable")
    if html is not None:
        if text is None:
            message.set_content(html, subtype="html")
        else:
            message.add_alternative(html, subtype="html")
    if attach:
        message.add_attachment(b"%PDF-1.4 ...", maintype="application", subtype="pdf", filename="timetable.pdf")
        message.add_attachment(b"\x89PNG", maintype="image", subtype="png")
    path.write_bytes(bytes(message))
    return path


def test_a_message_reads_its_text_part_with_its_subject_senders_date_and_attachments_named(tmp_path):
    ext = extract_eml(write_eml(tmp_path / "m.eml", html=HTML, attach=True))
    assert ext.title == "Ferry times for Caf\u00e9 staff"
    assert ext.paragraphs == ["Dear Hugo,", "the ferry to Lerwick now leaves at 17:30 from pier 3.", "Regards, Ann"]
    assert ext.meta == {"from": "Ann Gala <ann@example.org>",
                        "to": "Hugo Berg <hugo@example.org>, Mairi Fl\u00e9tt <mairi@example.org>",
                        "date": "2024-03-05T14:30:00+01:00", "attachments": ["timetable.pdf", "(unnamed image/png)"]}


def test_a_message_with_only_html_reads_it_as_an_html_file(tmp_path):
    ext = extract_eml(write_eml(tmp_path / "h.eml", text=None, html=HTML))
    assert "The ferry to Lerwick now leaves at 17:30 from pier 3." in ext.paragraphs
    assert "Ship: Hrossey; Departs: 17:30" in ext.paragraphs and ext.title == "Ferry times for Caf\u00e9 staff"


def test_a_body_in_another_character_set_is_decoded(tmp_path):
    path = write_eml(tmp_path / "l.eml", text="Caf\u00e9 au lait at the pier.\n", charset="iso-8859-1")
    assert b"Caf=E9" in path.read_bytes()
    assert extract_eml(path).paragraphs == ["Caf\u00e9 au lait at the pier."]


def test_files_that_are_no_message_or_cannot_be_read_are_named(tmp_path):
    def why(path: Path) -> str:
        with pytest.raises(Unreadable) as e:
            extract_eml(path)
        return str(e.value)

    (tmp_path / "empty.eml").write_bytes(b"")
    assert why(tmp_path / "empty.eml") == "an empty file (0 bytes), not an e-mail message (.eml) file"
    (tmp_path / "notes.eml").write_text("Just some notes.\n\nNo headers here.\n", encoding="utf-8")
    assert why(tmp_path / "notes.eml").startswith("not an e-mail message (.eml) file: it begins with none of the headers")
    (tmp_path / "odd.eml").write_bytes(b"From: a@b\nSubject: x\nContent-Type: text/plain; charset=klingon\n\nqapla\n")
    assert why(tmp_path / "odd.eml") == (
        "not a readable e-mail message (.eml) file: its text/plain body declares the character set 'klingon', which "
        "is no character encoding this reader knows")
    only = EmailMessage()
    only["From"] = "a@example.org"
    only.add_attachment(b"\x89PNG", maintype="image", subtype="png", filename="x.png")
    (tmp_path / "only.eml").write_bytes(bytes(only))
    assert why(tmp_path / "only.eml") == ("not a readable e-mail message (.eml) file: it has no text or HTML part to "
                                          "read (its parts: image/png)")


def test_from_files_reads_messages_in_a_folder_and_skips_the_unreadable(tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    write_eml(folder / "ferry.eml", attach=True)
    (folder / "broken.eml").write_bytes(b"")
    report = from_files([folder], tmp_path / "c.jsonl")
    (doc,) = list(read_corpus(tmp_path / "c.jsonl"))
    assert doc.id == "ferry.eml" and doc.title == "Ferry times for Caf\u00e9 staff"
    assert doc.meta["date"] == "2024-03-05T14:30:00+01:00" and doc.meta["attachments"][0] == "timetable.pdf"
    assert report.skipped == [(str(folder / "broken.eml"), "an empty file (0 bytes), not an e-mail message (.eml) file")]


def test_a_message_to_hundreds_of_recipients_lists_those_that_fit_and_is_read(tmp_path):
    """A message to 500 recipients (24 KB of To) or with 300 attachments made metadata over the corpus's 16 KiB, and
    from-files stopped with an error, writing none of the folder's messages."""
    folder = tmp_path / "mail"
    folder.mkdir()
    message = EmailMessage()
    message["From"] = "Ann Gala <ann@example.org>"
    message["To"] = ", ".join(f"Person Number{i} <person.number{i}@example.org>" for i in range(500))
    message["Cc"] = "Hugo <hugo@example.org>"
    message["Subject"] = "All hands"
    message.set_content("The meeting is at three.\n")
    for i in range(300):
        message.add_attachment(b"x", maintype="application", subtype="pdf", filename=f"minutes-part-{i:03d}.pdf")
    (folder / "all.eml").write_bytes(bytes(message))
    write_eml(folder / "small.eml")
    report = from_files([folder], tmp_path / "c.jsonl")
    docs = {doc.id: doc for doc in read_corpus(tmp_path / "c.jsonl")}
    assert report.documents == 2 and docs["all.eml"].paragraphs == ("The meeting is at three.",)
    meta = docs["all.eml"].meta
    to = meta["to"].split(", ")
    assert to[0] == "Person Number0 <person.number0@example.org>" and to[-1] == f"({500 - len(to) + 1} more)"
    assert len(meta["to"]) <= 2_000 and meta["cc"] == "Hugo <hugo@example.org>"
    assert meta["attachments"][0] == "minutes-part-000.pdf"
    assert meta["attachments"][-1] == f"({300 - len(meta['attachments']) + 1} more)"
    assert docs["small.eml"].meta["to"].startswith("Hugo Berg")


@pytest.mark.parametrize(("written", "read"), [
    (b"Hugo <", "Hugo <"), (b"Hugo <hugo@example.org>, Mairi =?utf-8?q?Fl=C3=A9tt?= <", "Hugo <hugo@example.org>, "
                            "Mairi Fl\u00e9tt <"), (b"Caf\xe9 <", "Caf\ufffd <")])
def test_an_address_header_the_parser_cannot_read_reads_as_written(tmp_path, written, read):
    """An address left open ("To: Hugo <") stopped the reader with an IndexError (its fallback asked the same parser),
    and a date whose zone is past any clock's with an OverflowError."""
    path = tmp_path / "m.eml"
    date = b"Tue, 05 Mar 2024 14:30:00 +5047356800100"
    path.write_bytes(b"From: ann@example.org\r\nTo: " + written + b"\r\nSubject: Ferry\r\nDate: " + date
                     + b"\r\n\r\nThe ferry leaves at 17:30.\r\n")
    ext = extract_eml(path)
    assert ext.meta == {"from": "ann@example.org", "to": read, "date": date.decode()}
    assert ext.paragraphs == ["The ferry leaves at 17:30."]
