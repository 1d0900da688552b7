"""The role fork-server's warm import: MXNet without its optional imports, which stay importable.

Each case runs in a fresh interpreter: whether `import mxnet` pulls sklearn in depends on
what was imported before it.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    # (imported before the warm import, optional modules loaded after it, mxnet.model's estimator base)
    ("", [], "object"),
    # already there (sklearn brings scipy.stats): left alone, used as before
    ("import sklearn.base", ["sklearn", "scipy.stats"], "BaseEstimator"),
]


@pytest.mark.parametrize("before, loaded, base", CASES)
def test_the_warm_import_leaves_optional_modules_out_and_importable(before: str, loaded: list[str], base: str) -> None:
    code = "\n".join([
        "import sys",
        before,
        "from coach.roles.runner import OPTIONAL_IMPORTS, import_mxnet",
        "import_mxnet()",
        "import mxnet.model",
        "print([m for m in OPTIONAL_IMPORTS if m in sys.modules], mxnet.model.BASE_ESTIMATOR.__name__)",
        "from sklearn.datasets import load_digits",   # what the digits dataset needs afterwards
        "import scipy.stats",
        "print(load_digits().data.shape, scipy.stats.norm.cdf(0.0))",
    ])
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == [f"{loaded} {base}", "(1797, 64) 0.5"]
