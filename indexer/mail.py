"""E-mail messages (.eml: RFC 5322, as mail programs save a message) -> a document, for ``indexer.ingest``.

    spanseek corpus from-files message.eml MAIL/ --out corpus.jsonl

The subject is the title (encoded words decoded: "=?utf-8?q?Caf=C3=A9?=" reads "Café"). The metadata has ``from``,
``to`` and ``cc`` as the message gives them (names and addresses, decoded), ``date`` in ISO 8601
(``2024-03-05T14:30:00+01:00``; as written where it is no date), and ``attachments``, the names of the files attached;
a list of recipients or attachments longer than ``MAX_LISTED_BYTES`` names those that fit and how many more there are.
The body is the message's text part, read as a text file is (paragraphs at blank lines), or, where it has only an
HTML part, that part read as an HTML file is (``markup.extract_html``: its main content, its tables' rows, its
sections); the transfer encoding (base64, quoted-printable) and the character set the part declares are undone.
Attachments are not read: their names are listed in ``attachments``, and a file attached that should be searchable
is saved and read as a file of its own. A file with no header a message has (From, To, Subject, Date), an empty
one, one whose body declares a character set no codec knows, and one with no text or HTML part (only attachments,
or an encrypted body) are ``Unreadable``, saying which.
"""

from __future__ import annotations

from email import policy
from email.header import decode_header, make_header
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, cast

from spanseek.indexer.extracted import MAX_INFLATED, Extracted, Unreadable
from spanseek.indexer.markup import extract_html, extract_text

KIND = "e-mail message (.eml) file"
# the most bytes (UTF-8) of each of from, to, cc and the attachments' names kept in the metadata, which comes back with
# every hit and may be 16 KiB in all (``core.io.MAX_META_BYTES``): a message to hundreds of recipients, which made
# from-files stop with an error, names as many as fit and how many more there are ("(480 more)")
MAX_LISTED_BYTES = 2_000
# the headers every message has one of at least: a file without any is no message
_MESSAGE_HEADERS = ("from", "to", "subject", "date", "message-id")


def _header(message: EmailMessage, name: str) -> str:
    """A header's value, decoded, on one line; "" where it is missing. A value the parser cannot make sense of (an
    address list it cannot parse) reads as written."""
    try:
        value = message.get(name)
    except Exception:  # (the header parser raises errors of many types on a malformed value: "To: Hugo <" IndexError)
        value = _written(message, name)  # (not get_all, which parses it again, as get does)
    return " ".join(str(value or "").split())


def _written(message: EmailMessage, name: str) -> str:
    """A header's value as the file has it (the first of that name), its encoded words decoded where they can be."""
    written = next((value for key, value in message.raw_items() if key.lower() == name), "")
    written = written.encode("utf-8", "surrogateescape").decode("utf-8", "replace")  # (bytes not UTF-8: U+FFFD)
    try:
        return str(make_header(decode_header(written)))
    except (ValueError, LookupError, UnicodeError):  # (an encoded word that is damaged, or of an unknown charset)
        return written


def _within(items: list[str]) -> list[str]:
    """``items`` (recipients, attachments' names) up to ``MAX_LISTED_BYTES`` in all, then how many more there are
    ("(480 more)"); a first item longer than that cut short ("...")."""
    kept: list[str] = []
    size = 0
    for item in items:
        size += len(item.encode("utf-8", "replace")) + 2
        if size > MAX_LISTED_BYTES:
            break
        kept.append(item)
    if not kept and items:
        kept = [items[0].encode("utf-8", "replace")[:MAX_LISTED_BYTES // 2].decode("utf-8", "ignore") + "..."]
    return kept + [f"({len(items) - len(kept)} more)"] if len(kept) < len(items) else kept


def _addresses(message: EmailMessage, name: str) -> str:
    """An address header (from, to, cc) as ``_header`` gives it, its addresses ``_within`` the metadata's share."""
    value = _header(message, name)
    if len(value.encode("utf-8", "replace")) <= MAX_LISTED_BYTES:
        return value
    try:
        items = [" ".join(str(address).split()) for address in message[name].addresses]
    except Exception:  # (one the parser cannot read as addresses: ``_header``'s errors)
        items = [value]
    return ", ".join(_within(items or [value]))


def _date(written: str) -> str:
    """A Date header in ISO 8601, or as written where it is no date."""
    try:
        return parsedate_to_datetime(written).isoformat()
    except (TypeError, ValueError, IndexError, OverflowError):  # (a zone of +5047356800100: OverflowError)
        return written


def _body_text(part: EmailMessage) -> str:
    """A text part's content, its transfer encoding and character set undone; Unreadable for a character set no
    codec knows."""
    try:
        return cast(str, part.get_content())
    except LookupError:
        raise Unreadable(f"not a readable {KIND}: its {part.get_content_type()} body declares the character set "
                         f"{part.get_content_charset()!r}, which is no character encoding this reader knows") from None


def extract_eml(path: Path) -> Extracted:
    """A message's text (or HTML) body as paragraphs, its subject the title, its senders, recipients, date and
    attachments' names the metadata (the module's rules)."""
    if (size := path.stat().st_size) > MAX_INFLATED:
        raise Unreadable(f"{size:,} bytes, more than the {MAX_INFLATED >> 20:,} MiB a file's reader may hold; not read")
    data = path.read_bytes()
    if not data.strip():
        raise Unreadable(f"an empty file ({len(data)} bytes), not an {KIND}")
    message = cast(EmailMessage, BytesParser(policy=policy.default).parsebytes(data))
    if not any(name in message for name in _MESSAGE_HEADERS):
        raise Unreadable(f"not an {KIND}: it begins with none of the headers a message has (From, To, Subject, Date)")
    meta: dict[str, Any] = {name: value for name in ("from", "to", "cc") if (value := _addresses(message, name))}
    if written := _header(message, "date"):
        meta["date"] = _date(written)
    attachments = [part.get_filename() or f"(unnamed {part.get_content_type()})"
                   for part in message.iter_attachments()] if message.is_multipart() else []
    if attachments:
        meta["attachments"] = _within(attachments)
    body = message.get_body(preferencelist=("plain", "html"))
    if body is None:
        parts = sorted({part.get_content_type() for part in message.walk() if not part.is_multipart()})
        raise Unreadable(f"not a readable {KIND}: it has no text or HTML part to read (its parts: {', '.join(parts)})")
    content = _body_text(cast(EmailMessage, body))
    ext = extract_html(content, str(path)) if body.get_content_type() == "text/html" else extract_text(content)
    return Extracted(_header(message, "subject") or None, ext.paragraphs, meta, ext.paragraph_meta)
