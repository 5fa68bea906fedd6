"""The fixed split of a SQuAD-format training file into training and held-out articles (``Holdout``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Holdout:
    """The fixed train/held-out split of SQuAD train: article ``i`` is held out when ``i % every == offset``.

    Held-out articles are used for validation and the demo corpus and never for training. The defaults here are
    the project's split (every 20th article from the 8th); every job that splits a file takes them from here.
    """

    every: int = 20
    offset: int = 7

    def __post_init__(self) -> None:
        if not 0 <= self.offset < self.every:
            raise ValueError(f"the held-out split needs 0 <= offset < every, got every={self.every}, "
                             f"offset={self.offset}")

    def held(self, article: int) -> bool:
        """Whether the article at this index of the file is held out."""
        return article % self.every == self.offset

    def split(self, data: list[dict[str, Any]]) -> tuple[list, list]:
        """(training articles, held-out articles) of a SQuAD-format file's ``data``, each in file order."""
        train = [a for i, a in enumerate(data) if not self.held(i)]
        held = [a for i, a in enumerate(data) if self.held(i)]
        return train, held


def split_articles(
    data: list[dict[str, Any]], every: int = Holdout.every, offset: int = Holdout.offset
) -> tuple[list, list]:
    """(training articles, held-out articles) under the fixed split (``Holdout``)."""
    return Holdout(every, offset).split(data)
