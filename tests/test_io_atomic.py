"""The saving contracts: a failed write leaves the previous file intact, byte for byte,
and no temporary file behind; a new file has the permissions of a normally created one.

Every writer is tested: ``atomic_write_text``, ``atomic_write_json``, ``atomic_savez``,
``save_operator`` and ``Trainer.save_checkpoint``.
"""

import errno
import os

import numpy as np
import pytest

import ddops.io as dio
from ddops import Decomposition1D, SchwarzOperator
from ddops.io import (
    atomic_savez,
    atomic_write_json,
    atomic_write_text,
    load_operator,
    save_operator,
)
from ddops.learning.data import FourierRHS
from ddops.learning.training import Trainer, TrainingConfig


def make_trainer(version):
    op = SchwarzOperator(Decomposition1D(24, 3), seed=1)
    op.theta[...] += version
    cfg = TrainingConfig(steps=10, batch_size=4, progress=False)
    return Trainer(op, FourierRHS(24, modes=4), cfg, train_seed=2)


def write_operator(path, version):
    op = SchwarzOperator(Decomposition1D(24, 3), seed=1)
    op.theta[...] += version
    return save_operator(op, path)


WRITERS = {
    "text": lambda p, v: atomic_write_text(p, f"version {v} é\n" * 2000),
    "json": lambda p, v: atomic_write_json(p, {"version": v, "data": list(range(2000))}),
    "savez": lambda p, v: atomic_savez(p, x=np.full(4000, float(v))),
    "operator": write_operator,
    "checkpoint": lambda p, v: make_trainer(v).save_checkpoint(p),
}
SUFFIX = {"text": ".txt", "json": ".json"}


class FailingFile:
    """A file object that accepts ``budget`` bytes, writes part of the next chunk, then fails."""

    def __init__(self, fh, budget, exc):
        self.fh, self.budget, self.exc, self.written = fh, budget, exc, 0

    def write(self, data):
        if self.written + len(data) > self.budget:
            self.fh.write(data[:max(self.budget - self.written, 0)])
            self.fh.flush()
            raise self.exc
        self.written += len(data)
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def fail_writes_after(monkeypatch, budget, exc):
    real = os.fdopen

    def fdopen(fd, *args, **kwargs):
        return FailingFile(real(fd, *args, **kwargs), budget, exc)

    monkeypatch.setattr(dio.os, "fdopen", fdopen)


def target(tmp_path, kind):
    return tmp_path / ("out" + SUFFIX.get(kind, ".npz"))


def assert_untouched(path, before):
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]  # no temporary file left


@pytest.mark.parametrize("kind", WRITERS)
@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.99])
@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"),
                                 KeyboardInterrupt()], ids=["disk-full", "interrupt"])
def test_failed_write_keeps_the_previous_file(tmp_path, monkeypatch, kind, fraction, exc):
    path = target(tmp_path, kind)
    WRITERS[kind](path, 1)
    before = path.read_bytes()
    size = len(before.decode()) if kind in SUFFIX else len(before)  # text: characters
    fail_writes_after(monkeypatch, int(fraction * size), exc)
    with pytest.raises(type(exc)):
        WRITERS[kind](path, 2)
    monkeypatch.undo()
    assert_untouched(path, before)
    if kind == "operator":  # and it still loads as the first version
        np.testing.assert_array_equal(load_operator(path).theta,
                                      SchwarzOperator(Decomposition1D(24, 3), seed=1).theta + 1)


@pytest.mark.parametrize("kind", WRITERS)
def test_failed_sync_keeps_the_previous_file(tmp_path, monkeypatch, kind):
    """Everything written, then the flush to disk fails: still no rename."""
    path = target(tmp_path, kind)
    WRITERS[kind](path, 1)
    before = path.read_bytes()

    def fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(dio.os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output"):
        WRITERS[kind](path, 2)
    monkeypatch.undo()
    assert_untouched(path, before)


@pytest.mark.parametrize("kind", WRITERS)
def test_failed_first_write_leaves_nothing(tmp_path, monkeypatch, kind):
    path = target(tmp_path, kind)
    fail_writes_after(monkeypatch, 10, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(OSError):
        WRITERS[kind](path, 1)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("write,exc,match", [
    (lambda p: atomic_write_json(p, {"a": object()}), TypeError, "not JSON serialisable"),
    (lambda p: atomic_write_json(p, {"a": float("nan"), "b": {1, 2}}), TypeError, "set"),
    (lambda p: atomic_write_text(p, b"bytes"), TypeError, "text must be a str"),
    (lambda p: atomic_write_text(p, "lone surrogate \udcff"), UnicodeEncodeError, "utf-8"),
    (lambda p: atomic_savez(p, a=np.ones(3), b=np.array([{}, None], dtype=object)), TypeError,
     "array 'b' holds Python objects"),
    (lambda p: save_operator(SchwarzOperator(Decomposition1D(24, 3)), p,
                             notes=np.array(["x", 1], dtype=object)), TypeError,
     "array 'notes' holds Python objects"),
    (lambda p: save_operator(SchwarzOperator(Decomposition1D(24, 3)), p, theta=np.ones(2)),
     ValueError, "extra array name 'theta' is reserved"),
])
def test_payload_that_cannot_be_written(tmp_path, write, exc, match):
    path = tmp_path / "out.npz"
    path.write_bytes(b"previous content")
    with pytest.raises(exc, match=match):
        write(path)
    assert_untouched(path, b"previous content")


def test_savez_never_writes_a_pickle(tmp_path):
    """What the writers produce, every loader can read: no object arrays at all."""
    with pytest.raises(TypeError, match="array 'x' holds Python objects"):
        atomic_savez(tmp_path / "a.npz", x=[{"k": 1}])
    assert os.listdir(tmp_path) == []


@pytest.fixture
def umask():
    """Run under a chosen umask, restored afterwards."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("kind", WRITERS)
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
def test_new_files_have_normal_permissions(tmp_path, umask, kind, mask):
    umask(mask)
    path = target(tmp_path, kind)
    WRITERS[kind](path, 1)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
    path.chmod(0o600)
    WRITERS[kind](path, 2)  # a replaced file is a new file
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
    # as a plain open() would create it
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    assert plain.stat().st_mode & 0o777 == path.stat().st_mode & 0o777


def test_umask_without_proc(monkeypatch, umask):
    """Where /proc is not readable the umask is queried (and restored) the portable way."""
    umask(0o027)

    def no_proc(*args, **kwargs):
        raise OSError(errno.ENOENT, "No such file")

    monkeypatch.setattr(dio, "open", no_proc, raising=False)
    assert dio._current_umask() == 0o027
    monkeypatch.undo()
    assert dio._current_umask() == 0o027
    assert os.umask(0o027) == 0o027  # left as it was


def test_parent_directories_are_created(tmp_path):
    path = atomic_write_text(tmp_path / "a" / "b" / "c.txt", "x")
    assert path.read_text() == "x"
    path = atomic_savez(tmp_path / "d" / "e", x=np.ones(2))
    assert path.name == "e.npz" and os.listdir(path.parent) == ["e.npz"]


def test_text_is_utf8(tmp_path):
    path = atomic_write_text(tmp_path / "t.txt", "Schwarz é ß\n")
    assert path.read_bytes() == "Schwarz é ß\n".encode()
