"""YAML front matter of a Markdown file (between ``---`` lines at its top): its mapping, read strictly, and its title.

Front matter becomes a document's metadata in a JSON corpus, so what JSON cannot hold, or what could not be read
safely, is an ``IngestError`` naming the file and line (``front_matter``): aliases, a key given twice, numbers that
are not finite, a ``title`` that is a list or mapping. Keys, dates, numbers used as a title and numbers in forms JSON
has not (``01234``, ``1:30``) stay as written.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Iterator
from typing import Any

from spanseek.indexer.extracted import IngestError

log = logging.getLogger(__name__)

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_UNCLOSED = re.compile(r"\A---[ \t]*\n[\w-]+[ \t]*:[ \t\n]")  # an opening fence, a key line, and no closing fence
_FIRST_LINE = 2  # the line of a file that front matter starts on (after the opening ---)
# an integer as YAML 1.2 and JSON write one; YAML 1.1 (PyYAML) also reads 010 as octal 8, 0x1F, 1_000 and 1:30 (base
# 60: 90), which front matter means as a code with its zeros, a time, text: those stay as written
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")


class _Refused(Exception):
    """Front matter a JSON corpus cannot hold, or that could not be read safely; the message follows "front matter"."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.line = mark.line + _FIRST_LINE


def _shown(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:37]}..."


@functools.cache
def _front_matter_loader() -> type:
    """PyYAML's SafeLoader made strict for front matter (it raises ``_Refused``). Aliases are refused: a few hundred
    bytes of nested aliases expand to gigabytes, and one can hold itself, which JSON cannot (front matter has no
    need of them; Ruby's safe_load refuses them too). Keys are kept as written (``2024-01-01:`` and ``yes:`` are the
    keys "2024-01-01" and "yes") and each may be given once; dates and ``!!binary`` values stay as written, a ``!!set``
    is a list; numbers JSON cannot store (``.nan``, ``.inf``, ``1.0e+400``) are refused rather than changed, and
    numbers YAML 1.1 writes in forms JSON has not (``010``, its octal 8; ``0x1F``; ``1_000``; ``1:30``, base 60) stay
    as written."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise _Refused(event.start_mark, f"uses the YAML alias *{event.anchor}; aliases are not allowed in "
                               "front matter (they can expand without bound or hold themselves): write the value out")
            return super().compose_node(parent, index)

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep)
            except ValueError as e:  # an integer of over 4,300 digits, and the like
                why = str(e).split(":")[0]  # not Python's advice on set_int_max_str_digits
                raise _Refused(node.start_mark, f"holds a value that cannot be read ({_shown(node.value)}: "
                               f"{why}); quote it to keep it as text") from None

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[str, Any]:
            mapping: dict[str, Any] = {}
            lines: dict[str, int] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    raise _Refused(key_node.start_mark, "has a key that is a list, a mapping or a merge (<<); "
                                   "a key must be text or a number")
                if key_node.value in lines:
                    raise _Refused(key_node.start_mark, f"gives the key {key_node.value!r} twice (first on line "
                                   f"{lines[key_node.value]})")
                lines[key_node.value] = key_node.start_mark.line + _FIRST_LINE
                mapping[key_node.value] = self.construct_object(value_node, deep=deep)
            return mapping

        def construct_decimal_int(self, node: Any) -> int | str:
            return self.construct_yaml_int(node) if _DECIMAL.fullmatch(node.value) else node.value

        def construct_finite_float(self, node: Any) -> float | str:
            if ":" in node.value or "_" in node.value:  # base 60 (1:30.5) or grouped digits: as written
                return node.value
            value = self.construct_yaml_float(node)
            if not math.isfinite(value):
                raise _Refused(node.start_mark, f"holds {_shown(node.value)}, a number that is not finite, which a "
                               f"JSON corpus cannot store (index build would refuse it); quote it to keep it as text")
            return value

        def construct_as_written(self, node: Any) -> str:
            return node.value if node.tag.endswith(":timestamp") else "".join(node.value.split())

        def construct_set_as_list(self, node: Any) -> Iterator[list[Any]]:
            members: list[Any] = []
            yield members
            members.extend(self.construct_mapping(node))

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_decimal_int)
    Loader.add_constructor("tag:yaml.org,2002:float", Loader.construct_finite_float)
    Loader.add_constructor("tag:yaml.org,2002:timestamp", Loader.construct_as_written)
    Loader.add_constructor("tag:yaml.org,2002:binary", Loader.construct_as_written)  # its base64 text
    Loader.add_constructor("tag:yaml.org,2002:set", Loader.construct_set_as_list)  # JSON has no sets
    return Loader


def front_matter(source: str, where: str) -> tuple[dict[str, Any], str | None, str, dict[str, str]]:
    """Split YAML front matter (between ``---`` lines at the top) from a Markdown document: (its mapping, its
    ``title`` as written, the body, the values YAML reads as numbers or booleans as written: ``id: 1.10`` is the
    number 1.1 in the mapping and "1.10" here). IngestError naming the file and line for front matter that is not
    valid YAML or that a JSON corpus cannot hold (``_front_matter_loader``), or a ``title`` that is a list or
    mapping."""
    m = _FRONT_MATTER.match(source)
    if not m:
        if _UNCLOSED.match(source):
            log.warning("%s: the front matter opened on line 1 has no closing --- line, so it is read as Markdown "
                        "text", where)
        return {}, None, source, {}
    try:
        import yaml
    except ImportError:
        raise IngestError(f"{where}: reading front matter needs PyYAML (pip install 'spanseek[index]')") from None
    loader = _front_matter_loader()(m.group(1))
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else {}
    except _Refused as e:
        raise IngestError(f"{where}:{e.line}: front matter {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{where}:{mark.line + _FIRST_LINE}" if mark is not None else where
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise IngestError(f"{at}: front matter is not valid YAML ({problem})") from None
    except RecursionError:
        raise IngestError(f"{where}: front matter is nested too deeply to read") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise IngestError(f"{where}: front matter must be a YAML mapping (key: value lines), got {type(data).__name__}")
    pairs = root.value if data else []
    written = {k.value: v.value for k, v in pairs if isinstance(v, yaml.ScalarNode)
               and isinstance(data[k.value], (bool, int, float))}
    pair = next(((k, v) for k, v in pairs if k.value == "title"), None)
    if pair is None or data["title"] is None:  # title: ~ is no title
        return data, None, source[m.end() :], written
    key, title = pair
    if not isinstance(title, yaml.ScalarNode):
        raise IngestError(f"{where}:{key.start_mark.line + _FIRST_LINE}: front matter 'title' must be text, got "
                          f"{'a list' if isinstance(data['title'], list) else 'a mapping'}; write the title on one "
                          "line (title: My page)")
    # a number or a date is the title as written: title: 1.10 is "1.10", not 1.1
    return data, " ".join(title.value.split()) or None, source[m.end() :], written
