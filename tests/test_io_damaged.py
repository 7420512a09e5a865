"""Damaged and foreign ``.npz`` files: every loader answers with one clear ``ValueError``.

Each kind of damage is built on its own from a real saved file (or from
scratch), and the message must name the file and the problem.  The same
damage given to an operator loader and to a checkpoint loader gets the same
diagnosis (one shared reader).
"""

import io
import json
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from ddops import Decomposition, Decomposition1D, GlobalLowRankOperator, SchwarzOperator
from ddops.io import load_operator, read_npz, save_operator
from ddops.learning.data import FourierRHS
from ddops.learning.training import Trainer, TrainingConfig


def arrays_of(path):
    """The arrays of a (valid) ``.npz`` written by ddops, read independently with numpy."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def with_meta(arrays, **changes):
    """A copy of ``arrays`` whose JSON metadata has ``changes`` (``None`` deletes a key)."""
    meta = json.loads(str(arrays["meta"]))
    for key, value in changes.items():
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    return {**arrays, "meta": np.array(json.dumps(meta))}


def npy_bytes(array):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array), allow_pickle=True)
    return buf.getvalue()


@pytest.fixture
def operator_file(tmp_path):
    op = SchwarzOperator(Decomposition1D(24, 3), seed=1)
    return save_operator(op, tmp_path / "op.npz")


def small_trainer(checkpoint=None):
    op = SchwarzOperator(Decomposition1D(24, 3), seed=1)
    cfg = TrainingConfig(steps=6, batch_size=4, progress=False, checkpoint_every=3)
    return Trainer(op, FourierRHS(24, modes=4), cfg, train_seed=2, checkpoint=checkpoint)


@pytest.fixture
def checkpoint_file(tmp_path):
    path = tmp_path / "run.npz"
    small_trainer(path).run()
    return path


def load_checkpoint(path):
    small_trainer().load_checkpoint(path)


# -- damage that does not depend on the kind of file: both loaders, the same diagnosis ----
def truncate(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep(len(data))])


DAMAGE = {
    "empty": (lambda p: p.write_bytes(b""), "is empty"),
    "random-bytes": (lambda p: p.write_bytes(np.random.default_rng(0).bytes(3000)),
                     "not an .npz file"),
    "text": (lambda p: p.write_text("model = 3\n"), "not an .npz file"),
    "npy-not-npz": (lambda p: np.save(p.open("wb"), np.ones(3)), "single .npy array"),
    "truncated-half": (lambda p: truncate(p, lambda n: n // 2), "is truncated"),
    "truncated-last-byte": (lambda p: truncate(p, lambda n: n - 1), "is truncated"),
    "truncated-head": (lambda p: truncate(p, lambda n: 10), "is truncated"),
}


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("loader", ["operator", "checkpoint"])
def test_damaged_file_is_named_with_its_problem(request, loader, kind):
    path = request.getfixturevalue(f"{loader}_file")
    damage, problem = DAMAGE[kind]
    damage(path)
    load = load_operator if loader == "operator" else load_checkpoint
    with pytest.raises(ValueError, match=problem) as info:
        load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_the_same_damage_gets_the_same_diagnosis(tmp_path):
    """The shared reader: apart from what the file should be, the messages are equal."""
    rng = np.random.default_rng(1)
    cases = {
        "pickled": {"meta": np.array(["{}"], dtype=object), "theta": np.ones(3)},
        "no-theta": {"meta": np.array("{}")},
        "bad-json": {"meta": np.array("{not json"), "theta": np.ones(3)},
        "json-list": {"meta": np.array("[1, 2]"), "theta": np.ones(3)},
        "random": rng.bytes(500),
    }
    for key, content in cases.items():
        path = tmp_path / f"{key}.npz"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            np.savez(path, **content)
        messages = []
        for load, what in ((load_operator, "operator file"), (load_checkpoint, "checkpoint")):
            with pytest.raises(ValueError) as info:
                load(path)
            message = str(info.value)
            assert message.startswith(f"{what} {str(path)!r}"), message
            messages.append(message.replace(what, "<file>"))
        assert messages[0] == messages[1], key


def test_pickled_object_array_is_refused_by_every_loader(tmp_path, operator_file,
                                                         checkpoint_file):
    """A ddops file whose metadata or parameters were replaced by pickled objects."""
    for path, load in ((operator_file, load_operator), (checkpoint_file, load_checkpoint)):
        arrays = arrays_of(path)
        for key in ("meta", "theta"):
            bad = tmp_path / f"pickled_{key}_{path.name}"
            np.savez(bad, **{**arrays, key: np.array([{"x": 1}, None], dtype=object)})
            with pytest.raises(ValueError, match=f"array '{key}' holds pickled") as info:
                load(bad)
            assert str(bad) in str(info.value)


def test_corrupt_bytes_inside_the_archive(operator_file, checkpoint_file):
    """A flipped byte in the parameter data fails the zip checksum."""
    for path, load in ((operator_file, load_operator), (checkpoint_file, load_checkpoint)):
        theta = arrays_of(path)["theta"]
        data = bytearray(path.read_bytes())
        at = bytes(data).find(theta.tobytes())
        assert at > 0
        data[at + 3] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(ValueError, match="is damaged.*CRC") as info:
            load(path)
        assert str(path) in str(info.value)


def test_array_member_shorter_than_its_header(tmp_path, operator_file):
    """An archive whose ``theta.npy`` declares more data than it holds."""
    arrays = arrays_of(operator_file)
    raw = npy_bytes(arrays["theta"])
    bad = tmp_path / "short.npz"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("meta.npy", npy_bytes(arrays["meta"]))
        zf.writestr("theta.npy", raw[:-16])
    with pytest.raises(ValueError, match="array 'theta' is truncated"):
        load_operator(bad)


def test_array_member_longer_than_its_header(tmp_path, operator_file):
    arrays = arrays_of(operator_file)
    bad = tmp_path / "long.npz"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("meta.npy", npy_bytes(arrays["meta"]))
        zf.writestr("theta.npy", npy_bytes(arrays["theta"]) + b"\0" * 8)
    with pytest.raises(ValueError, match="array 'theta' has more data than its header"):
        load_operator(bad)


def test_foreign_zip_member(tmp_path):
    bad = tmp_path / "foreign.npz"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("readme.txt", "hello")
    with pytest.raises(ValueError, match="'readme.txt' is not a .npy array"):
        load_operator(bad)


def test_missing_and_directory_paths(tmp_path):
    with pytest.raises(ValueError, match="missing.npz' does not exist"):
        load_operator(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="checkpoint .* does not exist"):
        load_checkpoint(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="is a directory"):
        load_operator(tmp_path)


def test_read_npz_returns_meta_and_arrays(operator_file):
    meta, arrays = read_npz(operator_file, "operator file", required=("theta",),
                            meta_keys=("class",))
    independent = arrays_of(operator_file)
    assert meta == json.loads(str(independent.pop("meta")))
    assert arrays.keys() == independent.keys()
    for key in arrays:
        np.testing.assert_array_equal(arrays[key], independent[key])
        assert arrays[key].dtype == independent[key].dtype
    with pytest.raises(ValueError, match="metadata lacks the key 'nothing'"):
        read_npz(operator_file, "operator file", meta_keys=("nothing",))


# -- operator files: contents that do not fit the metadata --------------------------------
@pytest.mark.parametrize("key", ["seed", "init", "dtype", "class", "format", "local_rank",
                                 "coarse_basis", "decomposition"])
def test_missing_metadata_key_is_named(tmp_path, operator_file, key):
    bad = tmp_path / "bad.npz"
    np.savez(bad, **with_meta(arrays_of(operator_file), **{key: None}))
    with pytest.raises(ValueError, match=f"metadata lacks the key '{key}'") as info:
        load_operator(bad)
    assert str(bad) in str(info.value)


def test_missing_decomposition_key_is_named(tmp_path, operator_file):
    arrays = arrays_of(operator_file)
    dm = json.loads(str(arrays["meta"]))["decomposition"]
    del dm["overlap"]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **with_meta(arrays, decomposition=dm))
    with pytest.raises(ValueError, match="decomposition metadata lacks the key 'overlap'"):
        load_operator(bad)


@pytest.mark.parametrize("theta,problem", [
    (lambda t: t.astype(np.complex128), "complex"),
    (lambda t: np.where(np.arange(t.size) == 3, np.nan, t), "NaN or inf"),
    (lambda t: np.where(np.arange(t.size) == 0, -np.inf, t), "NaN or inf"),
    (lambda t: t.astype(np.int64), "floating point"),
    (lambda t: t[:-1], r"shape \(\d+,\), expected"),
    (lambda t: t.reshape(1, -1), "shape"),
])
def test_bad_parameters(tmp_path, operator_file, theta, problem):
    arrays = arrays_of(operator_file)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{**arrays, "theta": theta(arrays["theta"])})
    with pytest.raises(ValueError, match=problem) as info:
        load_operator(bad)
    assert str(bad) in str(info.value)


@pytest.mark.parametrize("meta,problem", [
    (dict(local_rank=-2), "does not describe a valid operator.*local_rank"),
    (dict(local_rank="four"), "does not describe a valid operator.*local_rank"),
    (dict(format=7), "unsupported format 7"),
    (dict(**{"class": "Transformer"}), "unknown operator class 'Transformer'"),
    (dict(base="maybe"), "unknown base term kind 'maybe'"),
    (dict(decomposition="1d"), "decomposition metadata must be a JSON object"),
])
def test_metadata_that_describes_no_operator(tmp_path, operator_file, meta, problem):
    bad = tmp_path / "bad.npz"
    np.savez(bad, **with_meta(arrays_of(operator_file), **meta))
    with pytest.raises(ValueError, match=problem):
        load_operator(bad)


def test_general_decomposition_arrays_must_match(tmp_path):
    op = SchwarzOperator(Decomposition([[0, 1, 2, 3], [3, 4, 5]], 6),
                         coarse_basis=sp.csr_matrix(np.arange(12.0).reshape(6, 2) % 5))
    arrays = arrays_of(save_operator(op, tmp_path / "g.npz"))
    cases = {
        "offsets": ({"dec_offsets": np.array([0, 5, 3])}, "dec_offsets"),
        "offsets-end": ({"dec_offsets": np.array([0, 4, 9])}, "dec_offsets"),
        "missing": ({"dec_indices": None}, "array 'dec_indices' is missing"),
        "coordinates": ({"dec_coordinates": np.ones(4)}, "coordinates"),
        "phi-shape": ({"phi_shape": np.array([6, 2, 1])}, "phi_shape"),
        "phi-indptr": ({"phi_indptr": arrays["phi_indptr"][:-1]}, "coarse basis"),
        "phi-data": ({"phi_data": arrays["phi_data"].astype(np.complex128)}, "coarse basis"),
        "phi-missing": ({"phi_data": None}, "array 'phi_data' is missing"),
    }
    for case, (change, problem) in cases.items():
        bad = tmp_path / f"{case}.npz"
        content = {**arrays, **change}
        np.savez(bad, **{k: v for k, v in content.items() if v is not None})
        with pytest.raises(ValueError, match=problem) as info:
            load_operator(bad)
        assert str(bad) in str(info.value), case


def test_matrix_base_arrays_must_match(tmp_path):
    op = SchwarzOperator(Decomposition1D(40, 4), tied=True, base=sp.identity(39) * 2.0)
    arrays = arrays_of(save_operator(op, tmp_path / "b.npz"))
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{**arrays, "base_indptr": arrays["base_indptr"][:-3]})
    with pytest.raises(ValueError, match="base term"):
        load_operator(bad)


def test_global_operator_missing_rank(tmp_path):
    path = save_operator(GlobalLowRankOperator(10, 2), tmp_path / "g.npz")
    bad = tmp_path / "bad.npz"
    np.savez(bad, **with_meta(arrays_of(path), rank=None))
    with pytest.raises(ValueError, match="metadata lacks the key 'rank'"):
        load_operator(bad)


# -- checkpoints: contents that do not fit the metadata ------------------------------------
@pytest.mark.parametrize("key", ["step", "rng", "seconds"])
def test_checkpoint_missing_metadata_key(tmp_path, checkpoint_file, key):
    bad = tmp_path / "bad.npz"
    np.savez(bad, **with_meta(arrays_of(checkpoint_file), **{key: None}))
    with pytest.raises(ValueError, match=f"metadata lacks the key '{key}'") as info:
        load_checkpoint(bad)
    assert str(bad) in str(info.value)


@pytest.mark.parametrize("change,problem", [
    ({"hist_train": None}, "array 'hist_train' is missing"),
    ({"hist_train": np.ones(5)}, "history holds 6 steps, 5 losses"),
    ({"hist_val": np.ones(2)}, "1 validation steps and 2 validation losses"),
    ({"hist_lr": np.ones((6, 1))}, "hist_lr' must be one-dimensional"),
    ({"hist_train": np.full(6, np.nan)}, "NaN or inf"),
    ({"theta": "complex"}, "complex"),
    ({"theta": "nan"}, "NaN or inf"),
    ({"opt_exp_avg_0": np.ones(3)}, "optimiser or scheduler state is unusable"),
    ({"opt_lr": None}, "optimiser or scheduler state is unusable.*'lr'"),
    ({"sched_best": np.array(np.nan)}, "optimiser or scheduler state is unusable"),
    ({"meta": {"step": 4}}, "history holds 6 steps.*metadata 4 steps"),
    ({"meta": {"step": -1}}, "'step' must be an integer"),
    ({"meta": {"rng": {"bit_generator": "MT19937"}}}, "random stream state is unusable"),
    ({"meta": {"seconds": [1, 2]}}, "'seconds' must map"),
])
def test_checkpoint_contents_must_match(tmp_path, checkpoint_file, change, problem):
    arrays = arrays_of(checkpoint_file)
    for key, value in change.items():
        if key == "meta":
            arrays = with_meta(arrays, **value)
        elif value is None:
            del arrays[key]
        elif isinstance(value, str) and value == "complex":
            arrays[key] = arrays[key].astype(np.complex128)
        elif isinstance(value, str) and value == "nan":
            arrays[key] = arrays[key] * np.nan
        else:
            arrays[key] = value
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    trainer = small_trainer()
    before = (trainer.op.theta.copy(), trainer.optimizer.state_dict(),
              trainer.scheduler.state_dict(), trainer.rng.bit_generator.state, trainer.step)
    with pytest.raises(ValueError, match=problem) as info:
        trainer.load_checkpoint(bad)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)
    # nothing was changed by the refused file
    np.testing.assert_array_equal(trainer.op.theta, before[0])
    after = trainer.optimizer.state_dict()
    assert after.keys() == before[1].keys()
    for key in after:
        np.testing.assert_array_equal(after[key], before[1][key])
    assert trainer.scheduler.state_dict() == before[2]
    assert trainer.rng.bit_generator.state == before[3] and trainer.step == before[4]
