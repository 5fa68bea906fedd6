"""The token filter, trained after the phrase encoder (Kim et al. 2022, §5).

    spanseek train filter --model RUN/last --train squad-train.json.gz --out RUN/filtered

The phrase encoder is frozen; a head on each token vector (one GELU hidden layer, ``--hidden``; 0 = linear) gives
start/end filter logits, trained with binary cross-entropy against the gold start/end tokens of training questions
and validated by AUC-PR on the held-out articles. A token that cannot start (end) a phrase gets probability 0 for
that role (``indexer.compress.filter_probabilities``). ``spanseek index build --filter-threshold T`` then indexes only tokens whose start or end
filter probability reaches T; ``threshold_for_keep_ratio`` picks T for a wanted fraction of kept tokens.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from spanseek.core.encoding import autocast, pick_device, pick_precision
from spanseek.core.io import squad_questions, write_json_atomic
from spanseek.core.model import (
    PhraseModel,
    check_model_out,
    filter_head,
    load_model,
    load_tokenizer,
    resolve_model,
)
from spanseek.core.text import FLAG_END, FLAG_START
from spanseek.indexer.compress import filter_probabilities
from spanseek.trainer.arguments import FilterConfig
from spanseek.trainer.data import collate, load_training, placed, question_windows, training_questions
from spanseek.trainer.summary import check_validation_split

log = logging.getLogger(__name__)
KEEP_RATIOS = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.75)


@torch.no_grad()
def token_features(model: PhraseModel, windows, tokenizer, batch_windows: int, device, precision: str,
                   progress: bool = True) -> dict[str, torch.Tensor]:
    """Frozen token vectors of windows with gold labels: "x" (N, d) fp16, "ys" / "ye" (N,) start / end labels,
    "flags" (N,) uint8 FLAG_START / FLAG_END.

    Only content tokens are kept (not [CLS]/[SEP]/padding).
    """
    feats, ys, ye, flags = [], [], [], []
    for a in tqdm(range(0, len(windows), batch_windows), desc="filter features", disable=not progress):
        b = collate(windows[a : a + batch_windows], tokenizer, model.config.max_query_len).to(device)
        with autocast(device, precision):
            H = model.encode_passages(b.input_ids, b.attention_mask).float()
        start = torch.zeros(b.input_ids.shape, dtype=torch.bool, device=device)
        end = torch.zeros_like(start)
        start[b.q_passage, b.gold_start] = True
        end[b.q_passage, b.gold_end] = True
        content = b.attention_mask.bool()
        content[:, 0] = False
        content &= b.input_ids != tokenizer.sep_token_id
        feats.append(H[content].half().cpu())
        ys.append(start[content].cpu())
        ye.append(end[content].cpu())
        flags.append((b.start_ok[content] * FLAG_START + b.end_ok[content] * FLAG_END).to(torch.uint8).cpu())
    return {"x": torch.cat(feats), "ys": torch.cat(ys), "ye": torch.cat(ye), "flags": torch.cat(flags)}


def index_features(index_dir: str | Path, data: list, holdout) -> tuple[dict, dict]:
    """Token vectors and gold start/end labels read from a built index instead of encoded windows.

    The index's documents must be articles of ``data`` (document id = article number, same title); every token of
    a paragraph that has questions is used, its gold starts and ends those of the answers at their ``answer_start``
    (as training places them, ``trainer.data.placed``: an answer without one, or not at its text, marks none).
    Returns (training, held-out) dicts of "x" (N, d) fp16 torch tensor, "ys" / "ye" (N,) bool tensors and "flags"
    (N,) uint8, split by ``holdout`` on the article number.
    """
    from spanseek.core.phrase_index import PhraseIndex

    gold: dict[tuple[int, int], set[tuple[int, int]]] = {}  # (article, paragraph) -> its answers' (start, end)
    for q in squad_questions(data):
        spans = gold.setdefault((q.doc_index, q.para_index), set())
        spans.update(s for s in map(placed, [q.context] * len(q.answers), q.answers, q.answer_starts) if s)
    index = PhraseIndex(index_dir, verify_checksums=False)
    parts: dict[bool, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {True: [], False: []}
    for p, passage in enumerate(index.passages):
        doc = index.docs[passage["doc"]]
        try:
            art = data[int(doc["id"])]
        except (ValueError, IndexError):
            raise ValueError(f"{index_dir}: document {doc['id']!r} is not an article number of the training "
                             "file (--from-index needs an index of its articles)") from None
        if art.get("title") != doc["title"]:
            raise ValueError(f"{index_dir}: document {doc['id']} is {doc['title']!r}, article {doc['id']} of the "
                             f"training file is {art.get('title')!r}")
        spans = gold.get((int(doc["id"]), passage["para"]))
        if spans is None:  # a paragraph without questions
            continue
        a, b = index.passage_range(p)
        offsets = np.asarray(index.token_offsets[a:b])
        ys = np.isin(offsets[:, 0], [s for s, _ in spans])
        ye = np.isin(offsets[:, 1], [e for _, e in spans])
        parts[holdout.held(int(doc["id"]))].append((np.asarray(index.vectors[a:b], np.float16), ys, ye,
                                                     np.asarray(index.token_flags[a:b], np.uint8)))

    def stack(rows):
        if not rows:
            raise ValueError(f"{index_dir}: no paragraph with questions on this side of the held-out split")
        return {"x": torch.from_numpy(np.concatenate([r[0] for r in rows])),
                "ys": torch.from_numpy(np.concatenate([r[1] for r in rows])),
                "ye": torch.from_numpy(np.concatenate([r[2] for r in rows])),
                "flags": torch.from_numpy(np.concatenate([r[3] for r in rows]))}

    return stack(parts[False]), stack(parts[True])


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(labels, scores))


def threshold_for_keep_ratio(probs: np.ndarray, keep: float) -> float:
    """The threshold T that keeps about ``keep`` of the tokens, given their max(start, end) filter probability."""
    if not 0 < keep <= 1:
        raise ValueError(f"keep ratio must be in (0, 1], got {keep}")
    return float(np.quantile(probs, 1.0 - keep))


def train_filter(cfg: FilterConfig) -> dict:
    """Train the filter head on frozen token vectors, validate by AUC-PR, save a model with the head."""
    model_dir = resolve_model(cfg.model)
    out = check_model_out(cfg.out, model_dir)  # before minutes of encoding and training
    data = load_training(cfg.train)  # a bad training file, or one with nothing to train or validate on, is named
    train_q = training_questions(cfg.train, data, lambda i: not cfg.holdout.held(i))  # before the model loads
    check_validation_split(cfg, data, cfg.val_windows, "--val-windows", None if cfg.from_index is None else
                           f"--from-index {cfg.from_index} (its held-out articles' tokens validate the filter)")
    device = pick_device(cfg.device)
    precision = pick_precision(cfg.precision, device)
    base = load_model(model_dir, for_inference=False)
    base.requires_grad_(False)
    base.config = replace(base.config, filter_head=True, filter_hidden=cfg.hidden)
    base.filter_head = filter_head(base.dim, cfg.hidden)
    base.to(device).eval()
    tokenizer = load_tokenizer(base.config)
    rng = np.random.default_rng(cfg.seed)

    def sample_windows(questions, n, kind="training"):
        wins, _ = question_windows(cfg.train, questions, tokenizer, base.config, kind=kind)
        return [wins[i] for i in rng.permutation(len(wins))[:n]]

    if cfg.from_index:  # the vectors are already computed: no encoding
        train, held = index_features(cfg.from_index, data, cfg.holdout)
    else:
        train = token_features(base, sample_windows(train_q, cfg.train_windows), tokenizer, cfg.batch_windows,
                               device, precision, cfg.progress)
        held = token_features(base, sample_windows(squad_questions(data, cfg.holdout.held), cfg.val_windows, "held-out"),
                              tokenizer, cfg.batch_windows, device, precision, cfg.progress)
    x, ys, ye = train["x"], train["ys"], train["ye"]
    vx, vys, vye = held["x"], held["ys"], held["ye"]
    y = torch.stack([ys, ye], dim=1).float()
    head = base.filter_head
    head.requires_grad_(True)
    opt = torch.optim.Adam(head.parameters(), lr=cfg.lr)
    losses = []
    for _ in tqdm(range(cfg.epochs), desc="filter epochs", disable=not cfg.progress):
        perm = torch.randperm(len(x))
        total = 0.0
        for a in range(0, len(x), cfg.batch_tokens):
            idx = perm[a : a + cfg.batch_tokens]
            loss = F.binary_cross_entropy_with_logits(head(x[idx].float().to(device)), y[idx].to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        losses.append(total / len(x))
    head.eval()

    def probs(part: dict) -> np.ndarray:  # (N, 2) as an index build computes them, in chunks (N: millions)
        return np.concatenate([filter_probabilities(base, part["x"][a : a + 65536].numpy(),
                                                    part["flags"][a : a + 65536].numpy())
                               for a in range(0, len(part["x"]), 65536)]).astype(np.float32)

    vp = probs(held)
    train_keep = probs(train).max(axis=1)
    keep_prob = vp.max(axis=1)
    summary = {
        "train_tokens": len(x),
        "val_tokens": len(vx),
        "bce_first_epoch": round(losses[0], 5),
        "bce_last_epoch": round(losses[-1], 5),
        "auc_pr_start": round(average_precision(vys.numpy(), vp[:, 0]), 4),
        "auc_pr_end": round(average_precision(vye.numpy(), vp[:, 1]), 4),
        "thresholds": {str(k): round(threshold_for_keep_ratio(keep_prob, k), 5) for k in KEEP_RATIOS},
        # the same from the training tokens: what a build's threshold should be chosen from
        "train_thresholds": {str(k): round(threshold_for_keep_ratio(train_keep, k), 5) for k in KEEP_RATIOS},
        # recall of gold start/end tokens kept at each keep ratio (what filtering may cost in accuracy)
        "gold_recall": {
            str(k): round(float(np.mean(keep_prob[(vys | vye).numpy()] >= threshold_for_keep_ratio(keep_prob, k))), 4)
            for k in KEEP_RATIOS
        },
    }
    base.save(out)
    write_json_atomic(out / "filter_summary.json", summary)
    return summary
