"""One schema for suites and studies: an arm is checked by one validator whichever file names it, with the
same message (naming the file, the field and the fix) and the file kind's own error class."""

from __future__ import annotations

import pytest
import yaml

from stratagym.errors import ConfigError, UserError
from stratagym.eval.schema import Arm, arm_from
from stratagym.eval.suite import AlgorithmEntry, SuiteError, load_suite
from stratagym.studies.definitions import STUDY_DIR, Method, load_study


def _suite(tmp_path, arm) -> object:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"evals": ["stratagym/CueCorridor-v0"], "train": {"algorithms": [arm]}}))
    return p


def _study(tmp_path, arm) -> object:
    data = yaml.safe_load((STUDY_DIR / "context.yaml").read_text())
    data.pop("name")
    data.pop("compare_to", None)  # names the file's own methods
    data["methods"] = [arm]
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


BAD_ARMS = [
    ({"estimator": "grpoo"}, r"\[0\]: unknown estimator 'grpoo'; registered: "),
    ({"estimator": "gigpo", "estimator_kwargs": {"gama": 0.9}}, r"\[0\]: gigpo: unknown option\(s\) \['gama'\]; valid: \["),
    ({"estimator": "grpo", "options": {}}, r"\[0\]: unknown key\(s\) 'options'; valid keys: "),
    ({"label": "x"}, r"\[0\]: missing 'estimator' \(a registry name such as grpo\)"),
    ({"estimator": "grpo", "env_kwargs": [1]}, r"\[0\]: env_kwargs must be a mapping with string keys, got \[1\]"),
    ({"estimator": "grpo", "label": ""}, r"\[0\]: label must be a non-empty string"),
    (7, r"\[0\] must be an estimator name or a mapping with 'estimator'"),
]


@pytest.mark.parametrize(("arm", "expected"), BAD_ARMS)
def test_a_bad_arm_reads_the_same_in_a_suite_and_a_study(tmp_path, arm, expected):
    suite, study = _suite(tmp_path, arm), _study(tmp_path, arm)
    with pytest.raises(SuiteError, match=r"train\[0\]\.algorithms" + expected) as s_err:
        load_suite(suite)
    with pytest.raises(ConfigError, match=r"methods" + expected) as t_err:
        load_study(study)
    assert str(suite) in str(s_err.value) and str(study) in str(t_err.value)
    assert isinstance(s_err.value, UserError) and isinstance(t_err.value, UserError)
    # the part after the location is the same text in both (suites also list their ``recipe`` field)
    tail = lambda e: str(e.value).rsplit("[0]", 1)[1]  # noqa: E731
    assert tail(s_err).replace(", recipe", "") == tail(t_err)


def test_both_formats_build_the_same_arm(tmp_path):
    arm = {"label": "HGPO K=2", "estimator": "hgpo", "estimator_kwargs": {"gamma": 0.95}, "env_kwargs": {"context_k": 2}}
    [from_suite] = load_suite(_suite(tmp_path, arm)).train[0].algorithms
    [from_study] = load_study(_study(tmp_path, arm)).methods
    assert from_suite == from_study == Arm("HGPO K=2", "hgpo", {"gamma": 0.95}, {"context_k": 2})
    assert AlgorithmEntry is Method is Arm
    # a bare estimator name is an arm labelled by it, in either file
    assert load_study(_study(tmp_path, "grpo")).methods == (Arm("grpo", "grpo"),)
    assert load_suite(_suite(tmp_path, "grpo")).train[0].algorithms == (Arm("grpo", "grpo"),)


def test_recipe_overrides_are_a_suite_field_only(tmp_path):
    arm = {"estimator": "grpo", "recipe": {"optim": {"lr": 0.1}}}
    assert load_suite(_suite(tmp_path, arm)).train[0].algorithms[0].recipe == {"optim": {"lr": 0.1}}
    with pytest.raises(ConfigError, match=r"methods\[0\]: unknown key\(s\) 'recipe'"):
        load_study(_study(tmp_path, arm))
    with pytest.raises(SuiteError, match=r"recipe may not set 'env' \(the suite's envs are used\)"):
        load_suite(_suite(tmp_path, {"estimator": "grpo", "recipe": {"env": {"id": "x"}}}))
    empty = tmp_path / "empty.yaml"
    empty.write_text("evals: [stratagym/CueCorridor-v0]\ntrain: {algorithms: []}\n")
    with pytest.raises(SuiteError, match=r"train\[0\]\.algorithms must be a non-empty list"):
        load_suite(empty)


def test_arm_from_uses_the_callers_error_class():
    class MyError(UserError, ValueError):
        pass

    with pytest.raises(MyError, match="where: unknown estimator"):
        arm_from({"estimator": "nope"}, "where", error=MyError)
