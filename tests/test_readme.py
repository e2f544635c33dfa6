"""The README's example runs and prints what it says; its two commands exist."""

import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


# Slow: tests/test_docs.py runs the same example by default and checks all it prints.
@pytest.mark.slow
def test_example_runs_and_prints_what_the_comments_say():
    code = re.search(r"## Example\s+```python\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().split("\n")[:2] == ["[ 496 1520 2544 3568]", "64.0"]


def test_the_two_commands_point_at_real_files():
    block = re.search(r"## The two commands\s+```bash\n(.*?)```", README, re.S).group(1)
    main_job, tests = [line.split("#")[0].split() for line in block.strip().splitlines()]
    assert (ROOT / main_job[1]).is_file()
    assert tests[:3] == ["python", "-m", "pytest"]
