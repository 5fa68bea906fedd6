"""Checkpoint averaging (LoRA updates averaged through their products, refactored to rank r by SVD), dtype
conversion and LoRA widening."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from spanseek.core.model import WEIGHTS_NAME, ModelError, PhraseModel, load_model
from spanseek.trainer.average import average_checkpoints, average_state, widen_lora


def _random_lora_model(config, seed: int) -> PhraseModel:
    """A LoRA model whose B factors are random (peft starts them at zero, which makes every update zero)."""
    torch.manual_seed(seed)
    model = PhraseModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name or name.startswith(("start_head", "end_head")):
                p.normal_(0, 0.1)
    return model


def _updates(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each adapted layer's B·A, keyed by its lora_A name."""
    return {k: state[k.replace("lora_A", "lora_B")].double() @ state[k].double() for k in state if "lora_A" in k}


def test_average_of_a_reparametrised_copy_keeps_the_update_exactly(tmp_path, tiny_config):
    # B·M, M⁻¹·A is the same update with other factors: the average must be that update, which averaging the
    # factors one by one would not give.
    a = _random_lora_model(tiny_config, seed=1)
    a_dir = a.save(tmp_path / "a")
    state = load_file(str(a_dir / WEIGHTS_NAME))
    r = tiny_config.lora.r
    g = torch.Generator().manual_seed(3)
    m = torch.randn(r, r, generator=g, dtype=torch.float64) + 3 * torch.eye(r, dtype=torch.float64)
    other = dict(state)
    for k in state:
        if "lora_A" in k:
            kb = k.replace("lora_A", "lora_B")
            other[kb] = (state[kb].double() @ m).float()
            other[k] = (torch.linalg.inv(m) @ state[k].double()).float()
    avg, truncation = average_state([state, other], [0.5, 0.5], rank=r)
    assert truncation < 1e-5
    for k, update in _updates(state).items():
        torch.testing.assert_close(_updates(avg)[k], update, rtol=1e-4, atol=1e-6)
    naive = {k: (state[k] + other[k]) / 2 for k in state}
    assert max((_updates(naive)[k] - u).abs().max().item() for k, u in _updates(state).items()) > 1e-3


def test_average_is_the_best_rank_r_approximation_of_the_mean_update(tmp_path, tiny_config):
    states = [_random_lora_model(tiny_config, seed=s).saved_state() for s in (1, 2)]
    r = tiny_config.lora.r
    avg, truncation = average_state(states, [0.25, 0.75], rank=r)
    worst = 0.0
    for k, got in _updates(avg).items():
        mean = 0.25 * _updates(states[0])[k] + 0.75 * _updates(states[1])[k]
        sv = torch.linalg.svdvals(mean)  # Eckart–Young: the best rank-r error is the norm of the rest
        best = (sv[r:].square().sum() / sv.square().sum()).sqrt().item()
        err = ((got - mean).norm() / mean.norm()).item()
        assert err == pytest.approx(best, rel=1e-4, abs=1e-7)
        worst = max(worst, err)
    assert truncation == pytest.approx(worst, rel=1e-4)
    assert truncation > 0  # two random rank-r updates have rank 2r: something is dropped, and reported
    head = "start_head.weight"
    torch.testing.assert_close(avg[head], 0.25 * states[0][head] + 0.75 * states[1][head])


def test_averaging_a_model_with_itself_gives_the_same_model(tmp_path, tiny_config):
    src = _random_lora_model(tiny_config, seed=4).save(tmp_path / "src")
    report = average_checkpoints([str(src), str(src)], tmp_path / "avg")
    assert report.weights == [0.5, 0.5] and report.truncation < 1e-5
    _assert_same_outputs(load_model(tmp_path / "avg"), load_model(src), rtol=1e-4, atol=1e-5)


def _assert_same_outputs(got: PhraseModel, want: PhraseModel, rtol: float, atol: float) -> None:
    ids = torch.randint(1000, 2000, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        torch.testing.assert_close(got.encode_passages(ids, mask), want.encode_passages(ids, mask),
                                   rtol=rtol, atol=atol)
        for x, y in zip(got.encode_questions(ids, mask), want.encode_questions(ids, mask), strict=True):
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol)


def test_one_checkpoint_converts_to_float16_at_half_the_size(tmp_path, tiny_config):
    src = _random_lora_model(tiny_config, seed=5).save(tmp_path / "src")
    average_checkpoints([str(src)], tmp_path / "half", dtype=torch.float16)
    state = load_file(str(tmp_path / "half" / WEIGHTS_NAME))
    assert {t.dtype for t in state.values()} == {torch.float16}
    assert set(state) == set(load_file(str(src / WEIGHTS_NAME)))
    size = lambda d: (d / WEIGHTS_NAME).stat().st_size  # noqa: E731
    assert size(tmp_path / "half") < 0.55 * size(src)
    half = load_model(tmp_path / "half")
    assert next(half.parameters()).dtype == torch.float32  # loading casts back
    _assert_same_outputs(half, load_model(src), rtol=1e-2, atol=1e-2)


def test_a_converted_model_whose_token_vectors_differ_says_its_indexes_need_a_rebuild(tmp_path, tiny_config, caplog):
    """`train average --dtype float16` of a model wrote a model that every index built with the original refuses,
    saying nothing of it until a search was refused: the report (and a warning) now say to rebuild those indexes.
    A float32 copy gives the same token vectors: nothing to say."""
    src = _random_lora_model(tiny_config, seed=5).save(tmp_path / "src")
    half = average_checkpoints([str(src)], tmp_path / "half", dtype=torch.float16)
    assert half.to_dict()["indexes"] == (f"indexes built with {src} do not serve {tmp_path / 'half'} (its token "
                                         f"vectors differ): rebuild them with `spanseek index build --model "
                                         f"{tmp_path / 'half'}`, or keep searching them with {src}")
    assert half.indexes in caplog.text
    copy = average_checkpoints([str(src)], tmp_path / "copy")
    assert copy.indexes is None and "indexes" not in copy.to_dict()


def test_widening_lora_keeps_the_outputs_and_trains_the_new_ranks(tmp_path, tiny_config):
    src = _random_lora_model(tiny_config, seed=6).save(tmp_path / "src")
    r = tiny_config.lora.r
    wide = widen_lora(src, 2 * r, seed=1)
    assert (wide.config.lora.r, wide.config.lora.alpha) == (2 * r, 2 * tiny_config.lora.alpha)  # same alpha / r
    state = wide.saved_state()
    b_new = [t[:, r:] for k, t in state.items() if "lora_B" in k]
    a_new = [t[r:] for k, t in state.items() if "lora_A" in k]
    assert all((b == 0).all() for b in b_new) and all(a.abs().sum() > 0 for a in a_new)
    wide.merge_adapters()
    _assert_same_outputs(wide.eval(), load_model(src), rtol=1e-5, atol=1e-5)

    # the new directions get gradients from the first step (through B, whose init is zero)
    trainable = widen_lora(src, 2 * r, seed=1)
    ids = torch.randint(1000, 2000, (2, 12))
    trainable.encode_passages(ids, torch.ones_like(ids)).square().sum().backward()
    grads = [p.grad[:, r:] for n, p in trainable.named_parameters() if "lora_B" in n and "phrase_encoder" in n]
    assert all(g.abs().sum() > 0 for g in grads)


def test_widening_is_refused_with_the_reason(tmp_path, tiny_config):
    src = _random_lora_model(tiny_config, seed=6).save(tmp_path / "src")
    r = tiny_config.lora.r
    with pytest.raises(ModelError, match=f"its LoRA rank is {r}"):
        widen_lora(src, r)
    full = PhraseModel(dataclasses.replace(tiny_config, weights="full")).save(tmp_path / "full")
    with pytest.raises(ModelError, match="only LoRA adapters"):
        widen_lora(full, 2 * r)
    (src / WEIGHTS_NAME).unlink()
    with pytest.raises(ModelError, match="nothing to widen"):
        widen_lora(src, 2 * r)


def test_bad_requests_are_refused_with_the_reason(tmp_path, tiny_config):
    a = _random_lora_model(tiny_config, seed=1).save(tmp_path / "a")
    b = PhraseModel(dataclasses.replace(tiny_config, max_answer_tokens=9)).save(tmp_path / "b")
    with pytest.raises(ModelError, match="max_answer_tokens"):
        average_checkpoints([str(a), str(b)], tmp_path / "out")
    with pytest.raises(ModelError, match="no checkpoints"):
        average_checkpoints([], tmp_path / "out")
    with pytest.raises(ModelError, match="^--weights: 3 weights for 2 checkpoints; give one per checkpoint$"):
        average_checkpoints([str(a), str(a)], tmp_path / "out", weights=[1, 1, 1])  # by the flag that was wrong
    with pytest.raises(ModelError, match="^--weights must be non-negative"):
        average_checkpoints([str(a), str(a)], tmp_path / "out", weights=[1, -1])
    with pytest.raises(ModelError, match="not a spanseek model"):
        average_checkpoints([str(a), str(tmp_path / "missing")], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_readers_average_weight_by_weight_into_a_reader(tmp_path, tiny_backbone):
    from spanseek.core.config import ReaderConfig
    from spanseek.core.reader import READER_WEIGHTS_NAME, ReaderModel, load_reader_model

    config = ReaderConfig(backbone=str(tiny_backbone), max_len=64, stride=16, max_query_len=16, max_answer_tokens=8)
    dirs = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        dirs.append(str(ReaderModel(config).save(tmp_path / f"r{seed}")))
    report = average_checkpoints(dirs, tmp_path / "avg", weights=[3, 1])
    assert report.weights == [0.75, 0.25]
    a, b, avg = (load_file(str(tmp_path / d / READER_WEIGHTS_NAME)) for d in ("r1", "r2", "avg"))
    assert set(avg) == set(a) and all(t.dtype == torch.float16 for t in avg.values())
    for name in a:
        want = (0.75 * a[name].double() + 0.25 * b[name].double()).half()
        assert torch.equal(avg[name], want), name
    assert load_reader_model(tmp_path / "avg").config == config  # a reader that loads
    other = ReaderModel(dataclasses.replace(config, max_answer_tokens=4)).save(tmp_path / "other")
    with pytest.raises(ModelError, match=r"reader config differs .*max_answer_tokens: 8 in .*, 4 in "):
        average_checkpoints([dirs[0], str(other)], tmp_path / "bad")


def test_a_reader_among_phrase_models_is_refused_naming_both(tmp_path, tiny_config, tiny_reader):
    model = _random_lora_model(tiny_config, seed=1).save(tmp_path / "m")
    for refs in ([str(model), str(tiny_reader)], [str(tiny_reader), str(model)]):
        with pytest.raises(ModelError, match=f"^{tiny_reader}: a reader.*{model}.* a phrase model"):
            average_checkpoints(refs, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_config_mismatch_names_both_values(tmp_path, tiny_config):
    a = _random_lora_model(tiny_config, seed=1).save(tmp_path / "a")
    narrow = dataclasses.replace(tiny_config, lora=dataclasses.replace(tiny_config.lora, r=4))
    b = PhraseModel(narrow).save(tmp_path / "b")
    with pytest.raises(ModelError, match=r"lora\.r: 16 in .*/a, 4 in .*/b"):
        average_checkpoints([str(a), str(b)], tmp_path / "out")
