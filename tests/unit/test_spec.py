"""Job files: good ones parse; broken ones fail naming file, field and problem, exit 2."""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

import pytest
import yaml

from coach.errors import SpecError
from coach.spec import load_spec, parse_spec, read_yaml
from tests.conftest import run_coach

GOOD = dict(name="j", model="lenet", dataset="mnist-5k", target_loss=0.1, budget=1.0)


def test_a_tiny_budget_is_fine_when_the_functions_are_free() -> None:
    assert parse_spec(dict(GOOD, budget=1e-9, prices={"cpu_core_second": 0, "gib_second": 0}), "x.yaml").budget == 1e-9


def test_a_static_jobs_limits_default_to_its_allocation() -> None:
    """Refused before: 10 workers as "more than max_workers (8)", a batch of 4 for 1 worker as
    "batch_size must be >= max_workers (8)"."""
    big = parse_spec(dict(GOOD, allocation="static", workers=10, servers=5), "x.yaml")
    assert (big.max_workers, big.max_servers) == (10, 5)
    small = parse_spec(dict(GOOD, allocation="static", workers=1, servers=1, batch_size=4, tuning_samples=2), "x.yaml")
    assert (small.max_workers, small.batch_size) == (1, 4)
    with pytest.raises(SpecError, match="<= max_workers"):   # a limit the file gives still holds
        parse_spec(dict(GOOD, allocation="static", workers=10, servers=1, max_workers=8), "x.yaml")


def test_defaults_and_quantities() -> None:
    spec = parse_spec(dict(GOOD, resources={"worker": {"cpu": "1500m", "memory": "512Mi"}}), "x.yaml")
    assert spec.resources["worker"].cpu == 1.5
    assert spec.resources["worker"].memory_gib == 0.5
    assert spec.consecutive == 3 and spec.allocation == "dynamic" and spec.scheduler == "default"


def test_sizes_are_read_as_their_pods_are_written() -> None:
    # a 1G function is a 954Mi pod: planned as 1G, four fitted a 4G (3815Mi) node that Kubernetes found too small
    spec = parse_spec(dict(GOOD, resources={"worker": {"cpu": "13.5m", "memory": "1G"}}), "x.yaml")
    assert spec.resources["worker"].cpu == 0.014 and spec.resources["worker"].memory_gib * 1024 == 954


def test_user_model_file_resolved_beside_job_file(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text("def build(num_classes):\n    raise NotImplementedError\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: j\nmodel: net.py\ndataset: digits\ntarget_loss: 0.2\nbudget: 1\n")
    assert load_spec(job).model == {"file": str(tmp_path / "net.py"), "source": (tmp_path / "net.py").read_text()}


MODEL_FILES = [
    ("syntax-error", "def build(num_classes):\n    return (\n", "line 2: syntax error"),
    ("no-build", "def make(num_classes):\n    pass\n", "no top-level build found"),
    ("build-in-a-class", "class M:\n    def build(self, n):\n        pass\n", "no top-level build found"),
    ("no-argument", "def build():\n    pass\n", "it is build()"),
    ("two-required", "def build(num_classes, width):\n    pass\n", "it is build(num_classes, width)"),
    ("keyword-only", "def build(num_classes, *, width):\n    pass\n", "exactly one argument"),
    ("async", "async def build(num_classes):\n    pass\n", "not async"),
    ("nul-byte", "def build(n):\n    pass\n\0", "syntax error: source code string cannot contain null bytes"),
    # a traceback before (RecursionError in the parser)
    ("deeply-nested", "def build(n):\n    return " + "+".join(["1"] * 3000) + "\n", "too deeply nested"),
    # its source goes in every worker event: an HTTP trigger refuses bodies over 4 MiB
    ("larger-than-1-MiB", "def build(n):\n    pass\n" + "#" * (1 << 20) + "\n", "larger than 1 MiB as JSON"),
    # each control character is 6 bytes in JSON: 6 MiB in an event, which the replica refused
    ("larger-than-1-MiB-as-json", "def build(n):\n    pass\n#" + "\x01" * 200_000 + "\n", "larger than 1 MiB as JSON"),
]


@pytest.mark.parametrize("case,source,problem", MODEL_FILES, ids=[c[0] for c in MODEL_FILES])
def test_model_file_checked_without_running_it(tmp_path: Path, case: str, source: str, problem: str) -> None:
    (tmp_path / "net.py").write_text(source)
    with pytest.raises(SpecError) as e:
        parse_spec(dict(GOOD, model="net.py"), "job.yaml", tmp_path)
    assert e.value.field == "model" and problem in str(e.value) and str(tmp_path / "net.py") in str(e.value)


@pytest.mark.parametrize("source", [
    "def build(num_classes, width=64):\n    pass\n",
    "def build(*args):\n    pass\n",
    "from functools import partial\nbuild = partial(print)\n",
    "from mymodels import make as build\n",
    "import sys\nif sys:\n    pass\ndef build(n: int) -> object:\n    pass\n",
    "class build:\n    def __init__(self, num_classes):\n        pass\n",   # refused before
    "from mymodels import *\n",
])
def test_model_file_build_forms_accepted(tmp_path: Path, source: str) -> None:
    (tmp_path / "net.py").write_text(source)
    model = parse_spec(dict(GOOD, model="net.py"), "job.yaml", tmp_path).model
    assert model == {"file": str(tmp_path / "net.py"), "source": (tmp_path / "net.py").read_text()}


BROKEN = [
    ("negative-target", dict(GOOD, target_loss=-1), "target_loss", "must be > 0, got -1"),
    ("missing-target", {k: v for k, v in GOOD.items() if k != "target_loss"}, "target_loss", "missing"),
    ("string-budget", dict(GOOD, budget="lots"), "budget", "must be a number"),
    ("zero-budget", dict(GOOD, budget=0), "budget", "must be > 0"),
    # the first (mini-)epoch would overspend it hundreds of times
    ("budget-below-one-second", dict(GOOD, budget=1e-7), "budget", "1e-07 buys less than 1 s of the smallest "
     "configuration (a scheduler, a server and a worker cost 2.48e-05 per second"),
    ("batch-above-training-set", dict(GOOD, dataset="digits", batch_size=1439), "batch_size",
     "1439 is more than the 1438 training samples of digits"),
    ("batch-above-synthetic-set", dict(GOOD, dataset={"name": "synthetic", "samples": 100}, batch_size=81),
     "batch_size", "81 is more than the 80 training samples of synthetic"),
    ("unknown-model", dict(GOOD, model="vgg99"), "model", "unknown model 'vgg99'"),
    ("missing-model-file", dict(GOOD, model="nope.py"), "model", "does not exist"),
    ("unknown-dataset", dict(GOOD, dataset="imagenet"), "dataset.name", "unknown dataset 'imagenet'"),
    ("cifar-without-path", dict(GOOD, dataset={"name": "cifar10"}), "dataset.path", "cifar-10-python"),
    ("cifar-missing-files", dict(GOOD, dataset={"name": "cifar10", "path": "/tmp"}), "dataset.path",
     "/tmp lacks data_batch_1"),
    # it said "/nonexistent lacks data_batch_1, …"
    ("cifar-no-such-folder", dict(GOOD, dataset={"name": "cifar10", "path": "/nonexistent"}), "dataset.path",
     "/nonexistent does not exist; "),
    # it said "/etc/hostname lacks data_batch_1, …"
    ("cifar-path-a-file", dict(GOOD, dataset={"name": "cifar10", "path": __file__}), "dataset.path",
     f"{__file__} is a file, not a folder"),
    ("bad-allocation", dict(GOOD, allocation="elastic"), "allocation", "must be one of dynamic, static"),
    ("static-without-workers", dict(GOOD, allocation="static", servers=1), "workers", "static allocation"),
    ("workers-over-max", dict(GOOD, allocation="static", workers=5, servers=1, max_workers=4), "workers",
     "<= max_workers"),
    # accepted before and ignored: the job was tuned and planned as if the line were not there
    ("workers-of-a-dynamic-job", dict(GOOD, workers=2), "workers", "only for allocation: static"),
    ("consecutive-beyond-the-stop-rule-chain", dict(GOOD, consecutive=1001, max_epochs=2000), "consecutive",
     "at most 1000"),
    # accepted before: every attempt's worker died allocating 466 TiB of class centres
    ("too-many-classes", dict(GOOD, dataset={"name": "synthetic", "classes": 10**12}), "dataset.classes",
     "at most the samples (4000)"),
    ("more-classes-than-samples", dict(GOOD, dataset={"name": "synthetic", "samples": 100, "classes": 101}),
     "dataset.classes", "at most the samples (100)"),
    ("servers-of-a-dynamic-job", dict(GOOD, allocation="dynamic", servers=2), "servers", "max_servers"),
    ("fractional-epochs", dict(GOOD, max_epochs=2.5), "max_epochs", "whole number"),
    ("bad-scheduler", dict(GOOD, scheduler="volcano"), "scheduler", "default, gang"),
    ("unknown-field", dict(GOOD, target_los=0.1), "target_los", "unknown field"),
    ("bad-name", dict(GOOD, name="My Job!"), "name", "lowercase"),
    ("bad-cpu", dict(GOOD, resources={"worker": {"cpu": "lots"}}), "resources.worker.cpu", "cores"),
    ("bad-role", dict(GOOD, resources={"gpu": {"cpu": 1}}), "resources.gpu", "unknown role"),
    ("bad-optimizer", dict(GOOD, optimizer="lbfgs"), "optimizer", "must be one of"),
    ("momentum-with-adam", dict(GOOD, optimizer="adam", momentum=0.5), "momentum", "sgd and nag only, not adam"),
    ("batch-below-workers", dict(GOOD, batch_size=2, max_workers=4), "batch_size", ">= max_workers"),
    ("name-ending-in-a-newline", dict(GOOD, name="mlp\n"), "name", "must be 1-40 lowercase"),   # job id "mlp\n-fad2f0"
    # "must be ... digits, got 12": YAML had read the digits as a number (0123 as 83, yes as True)
    ("name-read-as-a-number", dict(GOOD, name=83), "name", "YAML read it as a number (83), not text: quote"),
    ("name-read-as-a-boolean", dict(GOOD, name=True), "name", "YAML read it as true/false (true), not text"),
    ("no-name", {k: v for k, v in GOOD.items() if k != "name"}, "name", "missing (required)"),   # "got None"
    ("workers-read-as-a-boolean", dict(GOOD, max_workers=True), "max_workers", "must be a number, got true"),
    ("name-read-as-a-date", dict(GOOD, name=datetime.date(2024, 1, 1)), "name", "YAML read it as a date"),
    # accepted before, then every (2, 1) mini-epoch failed its 4 attempts: "limit: must be >= workers"
    ("tuning-below-the-workers", dict(GOOD, tuning_samples=1, max_workers=4), "tuning_samples",
     "must be >= max_workers (4)"),
    # accepted before: 4 charged attempts, each failing in MXNet's convolution with a C++ message
    ("lenet-on-flat-samples", dict(GOOD, model="lenet", dataset={"name": "synthetic", "shape": [5]}),
     "dataset.shape", "lenet convolves images"),
    # accepted before: 4 attempts, each failing in MXNet's pooling ("kernel size (2) exceeds input")
    ("lenet-on-tiny-images", dict(GOOD, model="lenet", dataset={"name": "synthetic", "shape": [1, 8, 3]}),
     "dataset.shape", "height and width of at least 4, got [1, 8, 3]"),
    ("bool-as-number", dict(GOOD, learning_rate=True), "learning_rate", "must be a number"),
    ("infinite", dict(GOOD, target_loss=float("inf")), "target_loss", "finite"),
    ("not-a-number", dict(GOOD, budget=float("nan")), "budget", "finite"),
    ("huge-integer", dict(GOOD, max_epochs=10**400), "max_epochs", "at most"),
    ("bad-prices", dict(GOOD, prices={"per_hour": 1}), "prices", "cpu_core_second"),
    ("negative-seed", dict(GOOD, seed=-1), "seed", ">= 0"),
    ("retune-text", dict(GOOD, retune="always"), "retune", "must be true or false, got 'always'"),
    ("retune-number", dict(GOOD, retune=1), "retune", "must be true or false, got 1"),
    ("retune-static", dict(GOOD, allocation="static", workers=1, servers=1, retune=True), "retune",
     "only for allocation: dynamic"),
    ("fractional-seed", dict(GOOD, seed=1.5), "seed", "whole number"),
    ("dataset-noise-text", dict(GOOD, dataset={"name": "synthetic", "noise": "loud"}), "dataset.noise",
     "must be a number"),
    ("dataset-shape-text", dict(GOOD, dataset={"name": "synthetic", "shape": "abc"}), "dataset.shape", "1 to 3"),
    ("dataset-typo", dict(GOOD, dataset={"name": "synthetic", "sample": 100}), "dataset.sample",
     "unknown setting for synthetic"),
    ("dataset-setting-for-digits", dict(GOOD, dataset={"name": "digits", "samples": 10}), "dataset.samples",
     "settings: none"),
    ("dataset-too-big", dict(GOOD, dataset={"name": "synthetic", "samples": 10**15}), "dataset.samples",
     "more than"),
    ("model-mapping-extra", dict(GOOD, model={"name": "mlp", "extra": 1}), "model", "exactly one of name or file"),
    ("prices-zero", dict(GOOD, prices=0), "prices", "must be a mapping"),
    ("resources-false", dict(GOOD, resources=False), "resources", "must map roles"),
    ("rule-longer-than-run", dict(GOOD, max_epochs=2, consecutive=3), "consecutive", "<= max_epochs (2)"),
    # the file sets max_epochs only: named, not the consecutive it never set
    ("run-shorter-than-default-rule", dict(GOOD, max_epochs=1), "max_epochs", ">= consecutive (3 by default)"),
    ("momentum-one", dict(GOOD, momentum=5), "momentum", "must be < 1"),
    ("infinite-cpu", dict(GOOD, resources={"worker": {"cpu": float("inf")}}), "resources.worker.cpu", "cores"),
    ("memory-in-bytes", dict(GOOD, resources={"worker": {"memory": 1073741824}}), "resources.worker.memory",
     "a plain number is GiB"),
    ("infinite-memory", dict(GOOD, resources={"worker": {"memory": float("inf")}}), "resources.worker.memory",
     "memory size"),
    # pods asked for cpu: '0' and memory: '0' (requests are written in millicores and MiB)
    ("sub-millicore", dict(GOOD, resources={"worker": {"cpu": "0.1m"}}), "resources.worker.cpu",
     "'0.1m' is under 1m, the smallest request"),
    ("sub-mib", dict(GOOD, resources={"server": {"memory": "1k"}}), "resources.server.memory",
     "'1k' is under 1Mi, the smallest request"),
    ("negative-cpu", dict(GOOD, resources={"worker": {"cpu": "-1"}}), "resources.worker.cpu", "must be cores like"),
]


def test_numbers_yaml_reads_as_text_and_cpu_strings_are_read() -> None:
    spec = parse_spec(dict(GOOD, target_loss="1e-1", resources={"worker": {"cpu": "2"}}), "x.yaml")
    assert spec.target_loss == 0.1 and spec.resources["worker"].cpu == 2.0


@pytest.mark.parametrize(("text", "retune"), [("", False), ("retune: true\n", True), ("retune: yes\n", True),
                                               ("retune: false\n", False), ("retune:\n", False)])
def test_retune_is_a_yaml_boolean_off_by_default(tmp_path: Path, text: str, retune: bool) -> None:
    path = tmp_path / "j.yaml"
    path.write_text(yaml.safe_dump(GOOD) + text)
    assert load_spec(path).retune is retune


@pytest.mark.parametrize("data,field,problem", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_job_files_name_field_and_problem(data: dict, field: str, problem: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(data, "jobs/x.yaml")
    assert e.value.field == field
    assert str(e.value).startswith(f"jobs/x.yaml: {field}: ")
    assert problem in str(e.value)


def test_a_damaged_cifar10_batch_is_refused_at_submit(tmp_path: Path) -> None:
    # before, the job was recorded and failed when its loop first loaded the data
    from tests.unit.test_datasets import _write_cifar

    _write_cifar(tmp_path / "cifar")
    (tmp_path / "cifar" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(SpecError) as e:
        parse_spec(dict(GOOD, dataset={"name": "cifar10", "path": "cifar"}), "jobs/x.yaml", tmp_path)
    assert str(e.value).startswith(f"jobs/x.yaml: dataset.path: {tmp_path / 'cifar' / 'data_batch_3'} is not a "
                                   "CIFAR-10 python batch"), str(e.value)


RAW = [
    ("not-yaml", "name: [unclosed\n", "line"),
    ("not-a-mapping", "- just\n- a list\n", "must be a YAML mapping"),
    ("empty", "", "must be a YAML mapping"),
    ("duplicate-key", "name: a\nname: b\n", "key 'name' is given twice"),
    ("nested-too-deep", "a: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    # it said "YAML: … position 7" over two lines
    ("nul-byte", "name: x\nmodel: mlp\n\0\n", "line 3: not valid YAML: character U+0000 is not allowed"),
    ("empty-key", "name: x\nnull: 3\n", "line 2: not valid YAML: a key is empty (null)"),   # was named "None"
    # a ValueError traceback: Python reads at most 4,300 digits of an int (helper-32)
    ("5000-digit-number", "name: x\nmax_epochs: " + "9" * 5000 + "\n",
     "line 2: not valid YAML: a number written with 5000 digits; at most 100"),
]


@pytest.mark.parametrize("text,problem", [r[1:] for r in RAW], ids=[r[0] for r in RAW])
def test_unparseable_files_via_cli_exit_2_without_traceback(text: str, problem: str, tmp_path: Path,
                                                            coach_home: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text(text)
    proc = run_coach("submit", str(job))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert str(job) in proc.stderr and problem in proc.stderr


@pytest.mark.parametrize("text,value", [
    ("batch_size: 1:30", "batch_size: must be a number, got '1:30'"),   # YAML 1.1 base 60: was 90
    ("learning_rate: 1:30.5", "learning_rate: must be a number, got '1:30.5'"),
    ("batch_size: 010", 10),   # YAML 1.1 octal: was 8
    ("batch_size: 0_64", 64),
    ("batch_size: 0x40", 64),   # written as hexadecimal on purpose
    ("learning_rate: 1_0.5", 10.5),
    ("batch_size: !!int 64", 64),   # an explicit tag still reads
    ("batch_size: !!int abc", "line 6: not valid YAML: 'abc' is not a number"),   # a ValueError traceback
    ("learning_rate: !!float ''", "line 6: not valid YAML: '' is not a number"),   # an IndexError traceback
])
def test_base_60_and_leading_zeros_are_read_as_written(tmp_path: Path, text: str, value) -> None:
    job = tmp_path / "j.yaml"
    job.write_text(f"name: a\nmodel: mlp\ndataset: digits\ntarget_loss: 0.2\nbudget: 1\n{text}\n")
    if isinstance(value, str):
        with pytest.raises(SpecError, match=value):
            load_spec(job)
    else:
        assert getattr(load_spec(job), text.split(":")[0]) == value


def test_keys_merged_from_an_anchor_are_read_and_overridden_by_keys_beside_them(tmp_path: Path) -> None:
    """`<<: *anchor` is plain YAML (safe_load reads it); the loader that refuses a key given twice
    refused it as "could not determine a constructor for the tag ...merge"."""
    job = tmp_path / "merge.yaml"
    job.write_text("name: a\nmodel: mlp\ndataset: digits\ntarget_loss: 0.2\nbudget: 1\n"
                   "resources:\n  worker: &big {cpu: 0.5, memory: 1Gi}\n  server: {<<: *big, memory: 2Gi}\n")
    spec = load_spec(job)
    assert (spec.resources["server"].cpu, spec.resources["server"].memory_gib) == (0.5, 2.0)
    assert (spec.resources["worker"].cpu, spec.resources["worker"].memory_gib) == (0.5, 1.0)
    job.write_text("name: a\nmodel: mlp\ndataset: digits\ntarget_loss: 0.2\nbudget: 1\n"
                   "resources:\n  worker: &big {cpu: 0.5}\n  server: {<<: *big, cpu: 1, cpu: 2}\n")
    with pytest.raises(SpecError, match="key 'cpu' is given twice"):   # beside a merge, as anywhere
        load_spec(job)


def test_cli_rejects_every_bad_file_and_starts_nothing(tmp_path: Path, coach_home: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("name: ok\nmodel: mlp\ndataset: digits\ntarget_loss: 0.2\nbudget: 1\n")
    bad1 = tmp_path / "bad1.yaml"
    bad1.write_text("name: a\nmodel: mlp\ndataset: digits\ntarget_loss: -1\nbudget: 1\n")
    proc = run_coach("submit", str(good), str(bad1), str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2
    assert f"{bad1}: target_loss: must be > 0, got -1" in proc.stderr.replace("\n", "")
    assert "missing.yaml: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr
    status = run_coach("status", "--json", check=True)
    assert status.stdout.strip() == "[]"  # nothing was recorded or started


@pytest.mark.parametrize(("make", "said"), [
    (lambda p: None, "no such file"),
    (lambda p: p.symlink_to(p.parent / "gone.yaml"), "no such file"),   # a dangling link
    (lambda p: p.symlink_to(p), "cannot be looked up: Too many levels of symbolic links"),   # read "no such file"
    (lambda p: p.mkdir(), "a folder, not a job file"),
    (lambda p: os.mkfifo(p), "not a regular file"),
])
def test_a_job_file_that_cannot_be_read_says_why(tmp_path: Path, make, said: str) -> None:
    path = tmp_path / "job.yaml"
    make(path)
    with pytest.raises(SpecError, match=f"^{re.escape(str(path))}: {said}$"):
        read_yaml(path)


def test_unknown_job_id_is_a_clear_error(coach_home: Path) -> None:
    proc = run_coach("history", "no-such-job")
    assert proc.returncode == 1
    assert "no job 'no-such-job'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "jobs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_job_files_are_valid(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem, "a shipped job is named after its file"


def test_an_error_quotes_a_huge_value_briefly(tmp_path: Path) -> None:
    """Nested YAML anchors make a 400-byte file hold a value whose repr runs to gigabytes; the
    message quotes a short form (it was 58 MB at this depth, 580 MB one level deeper)."""
    lines = ["name:", "  - &a0 [xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx]"]
    lines += [f"  - &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]"
              for i in range(1, 9)]
    job = tmp_path / "bomb.yaml"
    job.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="name: must be 1-40") as e:
        load_spec(job)
    assert len(str(e.value)) < 500, len(str(e.value))


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("model", "~nosuchuser/net.py", "Could not determine home directory"),
        ("model", "a\0b.py", "embedded null byte"),
        ("model", "x" * 300 + ".py", "File name too long"),
        ("dataset", {"name": "cifar10", "path": "~nosuchuser/cifar"}, "Could not determine home directory"),
    ],
    ids=["unknown-user", "nul-byte", "name-too-long", "cifar-unknown-user"],
)
def test_a_path_the_system_cannot_look_up_is_named_not_a_traceback(tmp_path: Path, field: str, value: object,
                                                                  problem: str) -> None:
    """These raised RuntimeError, ValueError or OSError out of `coach submit` (a traceback)."""
    with pytest.raises(SpecError, match=f"not a usable path: {problem}"):
        parse_spec(dict(GOOD, **{field: value}), "job.yaml", tmp_path)


@pytest.mark.parametrize(
    ("fields", "tuning"),
    [
        ({}, 1024),
        ({"tuning_samples": 256}, 256),
        # the default fits small data and large batches (both were refused for a while)
        ({"dataset": {"name": "synthetic", "samples": 1000}}, 800),
        ({"batch_size": 2048}, 2048),
        # trimmed to the data: the deadline was once sized for 1e14 samples (time_t overflow)
        ({"dataset": "digits", "tuning_samples": 10**14}, 1438),
    ],
    ids=["default", "given", "small-data", "large-batch", "beyond-the-data"],
)
def test_a_mini_epoch_fits_the_data_and_the_batch(tmp_path: Path, fields: dict, tuning: int) -> None:
    assert parse_spec(dict(GOOD, **fields), "job.yaml", tmp_path).tuning_samples == tuning
