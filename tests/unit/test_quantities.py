"""Kubernetes quantities as Coach reads them from job files and `--cpu/--memory`, and writes them."""

from __future__ import annotations

import pytest

from coach import quantities


@pytest.mark.parametrize(("text", "cores", "gib", "gib_plain_bytes"), [
    ("2", 2.0, 2.0, 2 / 2**30),
    (".5", 0.5, 0.5, 0.5 / 2**30),
    ("1.", 1.0, 1.0, 1 / 2**30),
    ("+3", 3.0, 3.0, 3 / 2**30),
    ("500m", 0.5, 0.5 / 2**30, 0.5 / 2**30),
    ("8Gi", 8 * 2**30, 8.0, 8.0),
    ("512Mi", 512 * 2**20, 0.5, 0.5),
    ("1G", 1e9, 1e9 / 2**30, 1e9 / 2**30),
    ("4096000k", 4.096e9, 4.096e9 / 2**30, 4.096e9 / 2**30),
    ("1K", 1e3, 1e3 / 2**30, 1e3 / 2**30),          # Kubernetes wants k; Coach writes its own units
    ("1e3", 1e3, 1e3, 1e3 / 2**30),                 # an exponent is a number without a suffix
    ("1.5E-1", 0.15, 0.15, 0.15 / 2**30),
    ("2E", 2e18, 2e18 / 2**30, 2e18 / 2**30),       # E alone is exa
    (" 4 ", 4.0, 4.0, 4 / 2**30),
    ("250000000n", 0.25, 0.25 / 2**30, 0.25 / 2**30),   # as `kubectl top` prints CPU
    ("100u", 1e-4, 1e-4 / 2**30, 1e-4 / 2**30),
    ("-1", -1.0, -1.0, -1 / 2**30),                     # a quantity: callers say "must be more than 0"
])
def test_quantities_are_read_as_kubernetes_reads_them(text: str, cores: float, gib: float,
                                                     gib_plain_bytes: float) -> None:
    assert quantities.cores(text) == pytest.approx(cores)
    assert quantities.gib(text) == pytest.approx(gib)
    assert quantities.gib(text, plain_is_bytes=True) == pytest.approx(gib_plain_bytes)


@pytest.mark.parametrize("text", ["", "--1", "1e", "8Qi", "0x10", "4 Gi", "1e400", "Gi", "inf", "nan", "1,5"])
def test_what_is_not_a_finite_quantity_is_none(text: str) -> None:
    assert quantities.cores(text) is None and quantities.gib(text) is None


@pytest.mark.parametrize(("cores", "written", "read_as"), [(4, "4", 4.0), (1.5, "1500m", 1.5), (0.0135, "14m", 0.014),
                                                           (2.0004, "2", 2.0)])
def test_cpu_is_written_in_whole_cores_else_millicores(cores: float, written: str, read_as: float) -> None:
    assert quantities.cpu_text(cores) == written
    assert quantities.written_cores(cores) == read_as == quantities.cores(written)


@pytest.mark.parametrize(("gib", "written"), [(8, "8Gi"), (0.5, "512Mi"), (1e9 / 2**30, "954Mi")])
def test_memory_is_written_in_whole_gib_else_mib(gib: float, written: str) -> None:
    assert quantities.memory_text(gib) == written
    assert quantities.written_gib(gib) == quantities.gib(written)
