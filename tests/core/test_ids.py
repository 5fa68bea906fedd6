"""Document ids in any Unicode spelling (core.ids): the lookup against a brute-force scan of the held ids.

    .venv/bin/python -m pytest -q tests/core/test_ids.py
"""

from __future__ import annotations

import itertools
import random
import unicodedata

import pytest

from spanseek.core.ids import held_id, held_in, joined, respellings

# one id, "việt", in each spelling of its "ệ": composed, "ẹ" + U+0302, "ê" + U+0323, decomposed, marks swapped (an
# order NFD reorders: U+0323 sorts before U+0302)
SPELLINGS = ["vi\u1ec7t", "vi\u1eb9\u0302t", "vi\u00ea\u0323t", "vie\u0323\u0302t", "vie\u0302\u0323t"]


def scanned(doc_id: str, held: list[str]) -> str:
    """The rule, by a scan of every held id: as given, composed, decomposed, else the first held id of the same
    composed spelling, else the composed spelling."""
    nfc, nfd = unicodedata.normalize("NFC", doc_id), unicodedata.normalize("NFD", doc_id)
    for spelling in (doc_id, nfc, nfd):
        if spelling in held:
            return spelling
    return next((h for h in held if unicodedata.normalize("NFC", h) == nfc), nfc)


def test_every_spelling_finds_the_id_a_scan_of_the_held_ids_finds():
    """``index delete --ids`` and the HTTP routes tried only the id as given, composed and decomposed: "việt" held
    as "ẹ" + U+0302 was not found by any other spelling."""
    rng = random.Random(0)
    for n in range(len(SPELLINGS) + 1):
        for held in itertools.combinations(SPELLINGS, n):
            held_ids = [*held, "other", "caf\u00e9"]
            rng.shuffle(held_ids)
            find = held_in(held_ids)
            for given in [*SPELLINGS, "viet", "cafe\u0301"]:
                assert find(given) == scanned(given, held_ids), (held_ids, given)


def test_the_index_holds_only_ids_not_composed_each_once():
    ids = ["a", "caf\u00e9", "cafe\u0301", "vi\u1eb9\u0302t", "vie\u0323\u0302t", "vi\u1eb9\u0302t", "\u212a"]
    assert respellings(ids) == {"caf\u00e9": ["cafe\u0301"], "vi\u1ec7t": ["vi\u1eb9\u0302t", "vie\u0323\u0302t"],
                                "K": ["\u212a"]}  # (the Kelvin sign's composed spelling is a plain "K")


def test_an_ascii_id_is_not_looked_up_unless_a_held_id_composes_to_it():
    asked: list[str] = []

    def held(doc_id: str) -> bool:
        asked.append(doc_id)
        return doc_id == "\u212a"

    assert held_id("K", held, respellings(["x"])) == "K" and asked == []
    assert held_id("K", held, respellings(["\u212a"])) == "\u212a"
    assert held_id("vi\u1ec7t", lambda _: False) == "vi\u1ec7t"  # (none held: the composed spelling, for a new one)


def test_the_respellings_of_a_base_and_a_segment_joined_are_those_of_all_their_ids():
    """A served index with writes is a base and a segment of recent documents: its respellings, joined from each
    part's (the base's made once), are those of all its ids made in one pass, key by key and in order, whatever ids
    each part holds (the same id in both, a spelling in one part only)."""
    rng = random.Random(1)
    pool = [*SPELLINGS, "caf\u00e9", "cafe\u0301", "\u212a", "K", "other"]
    for _ in range(300):
        base = rng.choices(pool, k=rng.randrange(0, 6))
        segment = rng.choices(pool, k=rng.randrange(0, 4))
        whole = respellings(base + segment)
        parts = joined(respellings(base), respellings(segment))
        assert dict(parts) == whole and len(parts) == len(whole) and set(parts) == set(whole), (base, segment)
        for given in [*pool, "viet"]:  # the lookup the routes make, against a scan of every held id
            assert held_id(given, (base + segment).__contains__, parts) == scanned(given, base + segment)
    with pytest.raises(KeyError):
        joined({"a": ["b"]}, {"c": ["d"]})["x"]
