"""Tests for the packaged regression data sets and the problems built on them."""

import hashlib
import re
from importlib import resources

import numpy as np
import pytest

from service.problems import dataset_problem, load_dataset

# Known facts about the original UCI / StatLib data (not derived from our loader).
SHAPES = {"abalone": (4177, 10), "cadata": (20640, 8)}
CADATA_FEATURES = (
    "MedInc",
    "HouseAge",
    "AveRooms",
    "AveBedrms",
    "Population",
    "AveOccup",
    "Latitude",
    "Longitude",
)
ABALONE_MEASUREMENTS = (
    "length",
    "diameter",
    "height",
    "whole_weight",
    "shucked_weight",
    "viscera_weight",
    "shell_weight",
)


@pytest.fixture(scope="module", params=["abalone", "cadata"])
def name(request) -> str:
    return request.param


def test_shapes_and_feature_names(name) -> None:
    X, y, names = load_dataset(name)
    assert X.shape == SHAPES[name] and y.shape == (SHAPES[name][0],)
    assert len(names) == X.shape[1]
    assert X.dtype == np.float64 and y.dtype == np.float64
    expected = CADATA_FEATURES if name == "cadata" else ABALONE_MEASUREMENTS
    assert set(expected) <= set(names)
    p = dataset_problem(name)
    assert p.candidates.shape == SHAPES[name]
    assert p.name == name and p.noise_sd == 0.01


def test_abalone_one_hot_sex_and_ring_range() -> None:
    X, y, names = load_dataset("abalone")
    onehot = X[:, [names.index(c) for c in ("sex_F", "sex_I", "sex_M")]]
    assert set(np.unique(onehot)) == {0.0, 1.0}
    np.testing.assert_array_equal(onehot.sum(axis=1), 1.0)
    np.testing.assert_array_equal(onehot.sum(axis=0), [1307, 1342, 1528])  # UCI: F, I, M
    assert y.min() == 1 and y.max() == 29 and np.all(y == np.round(y))
    assert X[0, names.index("length")] == 0.455  # first UCI record: M,0.455,0.365,...,15
    assert y[0] == 15


def test_cadata_ranges() -> None:
    X, y, names = load_dataset("cadata")
    assert y.min() == pytest.approx(0.14999) and y.max() == pytest.approx(5.00001)
    lat, lon = X[:, names.index("Latitude")], X[:, names.index("Longitude")]
    assert 32 < lat.min() and lat.max() < 42 and -125 < lon.min() and lon.max() < -114
    assert X[0, names.index("MedInc")] == 8.3252 and y[0] == 4.526


def test_values_rescaled_to_unit_interval(name) -> None:
    p = dataset_problem(name)
    _, y, _ = load_dataset(name)
    assert not np.isnan(p.values).any() and not np.isnan(p.candidates).any()
    assert p.values.min() == 0.0 and p.values.max() == 1.0 and p.best_value == 1.0
    assert np.all((p.values >= 0) & (p.values <= 1))
    # Order-preserving affine map of the target.
    np.testing.assert_allclose(p.values, (y - y.min()) / (y.max() - y.min()))
    assert p.values[p.best_index] == 1.0 and y[p.best_index] == y.max()


def test_standardized_columns(name) -> None:
    p = dataset_problem(name, standardize=True)
    np.testing.assert_allclose(p.candidates.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(p.candidates.std(axis=0), 1.0, rtol=1e-9)


def test_raw_features_when_not_standardized(name) -> None:
    X, _, _ = load_dataset(name)
    p = dataset_problem(name, standardize=False, noise_sd=0.0)
    np.testing.assert_array_equal(p.candidates, X)
    assert p.noise_sd == 0.0


def test_load_dataset_returns_independent_copies() -> None:
    X1, y1, _ = load_dataset("abalone")
    X1[0, 0] = -1e9
    y1[:] = 0.0
    X2, y2, _ = load_dataset("abalone")
    assert X2[0, 0] != -1e9 and y2.max() == 29


def test_observe_noise_scale_with_seeded_rng() -> None:
    p = dataset_problem("abalone", noise_sd=0.05)
    arm = 123
    obs = p.observe(np.full(40_000, arm), np.random.default_rng(2024))
    resid = obs - p.values[arm]
    assert abs(resid.mean()) < 4 * 0.05 / np.sqrt(obs.size)
    assert resid.std() == pytest.approx(0.05, rel=0.03)
    a = p.observe(np.arange(10), np.random.default_rng(5))
    b = p.observe(np.arange(10), np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, p.observe(np.arange(10), np.random.default_rng(6)))


def test_regret_non_decreasing_and_zero_for_best(name) -> None:
    p = dataset_problem(name)
    rng = np.random.default_rng(0)
    selected = rng.integers(0, p.n_arms, size=300)
    r = p.regret(selected)
    assert r.shape == (300,)
    assert np.all(np.diff(r) >= 0) and r[0] >= 0
    np.testing.assert_allclose(r[-1], np.sum(1.0 - p.values[selected]))
    np.testing.assert_array_equal(p.regret(np.full(50, p.best_index)), 0.0)
    ties = np.flatnonzero(p.values == 1.0)
    np.testing.assert_array_equal(p.regret(ties), 0.0)


def test_unknown_dataset_raises() -> None:
    with pytest.raises(ValueError, match="unknown data set"):
        load_dataset("iris")
    with pytest.raises(ValueError, match="unknown data set"):
        dataset_problem("boston")


def test_files_match_provenance_hashes() -> None:
    data = resources.files("service.problems").joinpath("data")
    text = data.joinpath("PROVENANCE.md").read_text(encoding="utf-8")
    rows = re.findall(r"\| `(\w+\.csv\.gz)` \| (\d+) \| (\d+) \| `([0-9a-f]{64})` \|", text)
    assert {r[0] for r in rows} == {"abalone.csv.gz", "cadata.csv.gz"}
    for fname, size, nrows, sha in rows:
        blob = data.joinpath(fname).read_bytes()
        assert len(blob) == int(size)
        assert hashlib.sha256(blob).hexdigest() == sha
        assert int(nrows) == SHAPES[fname.split(".")[0]][0]
