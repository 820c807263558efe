"""The style check (tests/style/check.sh) and its place in `rackemu test` (docs/style.md)."""
import argparse
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rackemu import cli

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "style" / "check.sh"

GOOD_CC = """\
// SPDX-License-Identifier: MIT
#include <cstdint>

namespace demo {
} // namespace demo

uint32_t twice(uint32_t x)
{
    return 2 * x;
}
"""
BAD_CC = "#include <cstdint>\nuint32_t  thrice( uint32_t x ){return 3*x;}\n"


def style_tree(tmp_path: Path, use_git: bool) -> Path:
    """A tree with the real check script and .clang-format, one formatted and one unformatted
    core file, and an unformatted file in the QEMU glue (out of clang-format's scope)."""
    tree = tmp_path / "tree"
    (tree / "tests" / "style").mkdir(parents=True)
    shutil.copy(CHECK, tree / "tests" / "style" / "check.sh")
    # the doc-table generator and the register reader it imports (no docs here: no tables)
    shutil.copy(ROOT / "tests" / "style" / "doc_tables.py", tree / "tests" / "style" / "doc_tables.py")
    (tree / "tests" / "e2e").mkdir()
    shutil.copy(ROOT / "tests" / "e2e" / "qtest.py", tree / "tests" / "e2e" / "qtest.py")
    shutil.copy(ROOT / ".clang-format", tree / ".clang-format")
    shutil.copy(ROOT / "setup.cfg", tree / "setup.cfg")
    (tree / "hw" / "demo").mkdir(parents=True)
    (tree / "hw" / "demo" / "good.cc").write_text(GOOD_CC)
    (tree / "hw" / "demo" / "bad.cc").write_text(BAD_CC)
    (tree / "hw" / "qemu").mkdir()
    (tree / "hw" / "qemu" / "glue.h").write_text(BAD_CC)
    if use_git:
        subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
        subprocess.run(["git", "add", "."], cwd=tree, check=True)
    return tree


def run_check(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RACKEMU_CACHE=str(tree.parent / "cache"), RACKEMU_BUILD=str(tree.parent / "build"),
               RACKEMU_QEMU_SRC=str(tree.parent / "no-qemu"))
    return subprocess.run(["bash", str(tree / "tests" / "style" / "check.sh"), *args], cwd=tree,
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(shutil.which("clang-format") is None, reason="clang-format is installed by ./rackemu setup")
@pytest.mark.parametrize("use_git", [True, False], ids=["git", "no-git"])
def test_check_lists_unformatted_cxx_and_fix_formats_it(tmp_path, use_git):
    tree = style_tree(tmp_path, use_git)
    listing = run_check(tree, "--list").stdout
    assert "hw/demo/bad.cc" in listing and "hw/demo/good.cc" in listing
    assert "hw/qemu/glue.h" not in listing.split("QEMU checkpatch")[0]  # the glue is QEMU style

    r = run_check(tree)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "hw/demo/bad.cc" in r.stdout and "good.cc" not in r.stdout
    assert "tests/style/check.sh --fix" in r.stdout
    # the glue is checked by QEMU's checkpatch; without the QEMU tree that step fails by name
    assert "MISSING: QEMU's scripts/checkpatch.pl" in r.stdout

    (tree / "hw" / "qemu" / "glue.h").unlink()
    r = run_check(tree, "--fix")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tree / "hw" / "demo" / "good.cc").read_text() == GOOD_CC
    assert (tree / "hw" / "demo" / "bad.cc").read_text() == \
        "#include <cstdint>\nuint32_t thrice(uint32_t x)\n{\n    return 3 * x;\n}\n"
    assert run_check(tree).returncode == 0


def fake_root(tmp_path: Path, style_exit: int) -> Path:
    """A root whose style check exits with style_exit and whose only pytest suite passes."""
    root = tmp_path / "root"
    (root / "tests" / "style").mkdir(parents=True)
    (root / "tests" / "style" / "check.sh").write_text(
        f"echo 'style: fake check ran'\ntouch '{tmp_path}/style-ran'\nexit {style_exit}\n")
    (root / "tests" / "launcher").mkdir()
    (root / "tests" / "launcher" / "test_ok.py").write_text(
        f"def test_ok():\n    open('{tmp_path}/pytest-ran', 'w').close()\n")
    return root


@pytest.mark.parametrize("style_exit", [0, 1])
def test_rackemu_test_runs_the_style_check_first_and_fails_at_the_end(tmp_path, monkeypatch, capfd, style_exit):
    root = fake_root(tmp_path, style_exit)
    monkeypatch.setattr(cli, "ROOT", root)
    monkeypatch.setenv("RACKEMU_BUILD", str(tmp_path / "build"))   # no meson build: no unit tests
    rc = cli.cmd_test(argparse.Namespace(pytest_args=[]))
    err = capfd.readouterr().err
    assert (tmp_path / "style-ran").exists()
    assert (tmp_path / "pytest-ran").exists(), "a style violation must not stop the tests"
    if style_exit:
        assert rc != 0
        assert "tests/style/check.sh --fix" in err.splitlines()[-1]    # the last word says how to fix
    else:
        assert rc == 0
        assert "style check failed" not in err


def test_rackemu_test_with_pytest_arguments_skips_the_style_check(tmp_path, monkeypatch, capfd):
    root = fake_root(tmp_path, 1)
    monkeypatch.setattr(cli, "ROOT", root)
    monkeypatch.setenv("RACKEMU_BUILD", str(tmp_path / "build"))
    assert cli.cmd_test(argparse.Namespace(pytest_args=["-q"])) == 0
    assert not (tmp_path / "style-ran").exists()
    assert "skipping the style check" in capfd.readouterr().err
