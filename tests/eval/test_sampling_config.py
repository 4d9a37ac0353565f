"""The evaluation's sampling config is the judge core's SamplingConfig (eval.config.EvalSampling): its
bounds fail at load naming the field, the engine seed and the per-request seed are distinct fields, and
`judge_sampling` is a copy with the per-pass fields set."""

from __future__ import annotations

import pytest
import yaml

from judgeforge.cascade.config import CalibrateConfig, TeacherSampling
from judgeforge.config import ConfigError, dump_config, load_config
from judgeforge.eval.config import PER_PASS, EvalConfig, EvalSampling
from judgeforge.eval.judges import Unit, _prepare, judge_sampling
from judgeforge.eval.run import engine_config
from judgeforge.judge.config import SamplingConfig
from judgeforge.judge.items import GradeItem
from judgeforge.judge.prompts import rubric_preset


def test_one_sampling_config():
    assert issubclass(EvalSampling, SamplingConfig) and issubclass(TeacherSampling, SamplingConfig)
    assert EvalSampling().max_tokens == 160 and SamplingConfig().max_tokens == 512  # each its own default


@pytest.mark.parametrize("cls, extra", [(EvalConfig, []), (CalibrateConfig, ["predictions=p.jsonl"])])
@pytest.mark.parametrize("key, value", [("temperature", 2.5), ("temperature", -0.1), ("top_p", 0),
                                        ("top_p", 1.5), ("max_tokens", 0)])
def test_out_of_range_fails_at_load_naming_the_field(cls, extra, key, value):
    with pytest.raises(ConfigError, match=rf"sampling\.{key}: Input should be"):
        load_config(cls, None, [*extra, f"sampling.{key}={value}"])


def test_engine_seed_and_per_request_seed_are_distinct_fields():
    assert {"engine_seed", "seed"} <= EvalSampling.model_fields.keys()
    cfg = load_config(EvalConfig, None, ["sampling.engine_seed=7"])
    assert cfg.sampling.engine_seed == 7 and cfg.sampling.seed is None
    assert engine_config(cfg.judges[0], cfg.sampling.engine_seed).seed == 7  # the engine's seed
    assert judge_sampling(cfg.sampling, 3).seed is None  # no per-request seed from the engine seed


def test_per_request_seeds_come_from_the_engine_seed():
    class StubJudge:
        def requests(self, item):
            return [item.options]

    units = [Unit("s", "absolute", "item", str(i), GradeItem("q", "a", rubric_preset("helpfulness")), {})
             for i in range(3)]
    seeded = EvalSampling(engine_seed=7, per_request_seed=True)
    _, reqs, _ = _prepare(StubJudge(), units, seeded)
    assert [r[0].seed for r in reqs] == [7, 8, 9]


def test_the_old_seed_key_is_an_error_naming_the_new_one():
    with pytest.raises(ConfigError, match="engine_seed"):
        load_config(EvalConfig, None, ["sampling.seed=42"])


@pytest.mark.parametrize("key, value", [("n", 3), ("max_n", 8), ("max_tokens_limit", 4096),
                                        ("max_resample_rounds", 1), ("feedback", False), ("seed", 1)])
def test_per_pass_fields_are_refused_by_name(key, value):
    with pytest.raises(ConfigError, match=f"not an evaluation setting: `{key}`"):
        load_config(EvalConfig, None, [f"sampling.{key}={value}"])


def test_resolved_config_leaves_per_pass_fields_out_and_roundtrips(tmp_path):
    cfg = load_config(EvalConfig, None, ["sampling.max_tokens=4000", "sampling.per_request_seed=true"])
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(cfg))
    assert not PER_PASS.keys() & yaml.safe_load(path.read_text())["sampling"].keys()
    assert load_config(EvalConfig, path) == cfg


def test_judge_sampling_is_a_copy_with_the_per_pass_fields():
    s = EvalSampling(temperature=0.5, top_p=0.8, max_tokens=4000, score_only=True, sampled=False)
    j = judge_sampling(s, 3)
    assert isinstance(j, SamplingConfig)
    assert (j.n, j.max_n, j.max_tokens_limit, j.max_resample_rounds, j.seed, j.feedback) == (3, 3, 4000, 0, None, False)
    assert (j.temperature, j.top_p, j.max_tokens) == (0.5, 0.8, 4000)
    assert judge_sampling(EvalSampling(), 1).feedback is True
