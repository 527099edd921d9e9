"""Every code block of docs/user_guide.md and README.md runs as written (issue 14: the guide
must not rot).

Each ```python or ```sh block is preceded by an HTML comment, invisible on a rendered page:
  <!-- doctest: NAME [after=A,B] [nproc=N] -->   a Python block; its program is the programs of
                                                 A, B (in order, each once) then this block, run
                                                 as train.py directly or through the launcher
  <!-- doctest: sh [program=NAME] -->             a shell block, run from the repository root, or
                                                 from a directory holding NAME's program as
                                                 train.py
  <!-- doctest: skip (reason) -->                 not run, for the reason given
A block without a comment fails the test, so a new block cannot go untested.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_DOCS = [_ROOT / "docs" / "user_guide.md", _ROOT / "README.md"]
_BLOCK = re.compile(r"(?:<!-- doctest: (?P<spec>[^>]*?) -->\n)?```(?P<lang>python|sh)\n"
                    r"(?P<code>.*?)```", re.S)
_CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
             "MASTER_PORT")


def _blocks(path):
    """[(spec words, language, code)] of a document, in order."""
    return [((m.group("spec") or "").split(), m.group("lang"), m.group("code"))
            for m in _BLOCK.finditer(path.read_text())]


def _python_blocks(path):
    blocks = {}
    for spec, lang, code in _blocks(path):
        if lang == "python" and spec and spec[0] != "skip":
            options = dict(word.split("=", 1) for word in spec[1:])
            blocks[spec[0]] = (options, code)
    return blocks


def _program(blocks, name, seen=None):
    seen = set() if seen is None else seen
    if name in seen:
        return ""
    seen.add(name)
    options, code = blocks[name]
    before = "".join(_program(blocks, dep, seen) for dep in options.get("after", "").split(",")
                     if dep)
    return before + code + "\n"


def _env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OFL_")) and k not in _CONTRACT}
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def _run(command, cwd, timeout=300):
    result = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True,
                            timeout=timeout, shell=isinstance(command, str))
    assert result.returncode == 0, (f"{command} failed:\n{result.stdout[-3000:]}\n"
                                    f"{result.stderr[-3000:]}")
    return result.stdout


def _cases():
    cases = []
    for path in _DOCS:
        for k, (spec, lang, code) in enumerate(_blocks(path)):
            cases.append(pytest.param(path, k, spec, lang, code, id=f"{path.name}-{k}-"
                                      f"{spec[0] if spec else 'unmarked'}"))
    return cases


@pytest.mark.parametrize("path,index,spec,lang,code", _cases())
def test_code_block_runs_as_written(tmp_path, path, index, spec, lang, code):
    assert spec, (f"{path.name} block {index} has no '<!-- doctest: ... -->' comment saying how "
                  f"to run it:\n{code}")
    if spec[0] == "skip":
        assert len(spec) > 1, f"{path.name} block {index}: a skipped block must say why"
        return
    if lang == "sh":
        options = dict(word.split("=", 1) for word in spec[1:])
        cwd = _ROOT
        if "program" in options:
            (tmp_path / "train.py").write_text(_program(_python_blocks(path), options["program"]))
            cwd = tmp_path
        command = code.strip().replace(".venv/bin/python", sys.executable)
        if cwd == _ROOT:
            command = command.replace(sys.executable, str(_ROOT / ".venv" / "bin" / "python"))
        _run(command, cwd, timeout=600)
        return
    blocks = _python_blocks(path)
    options, _ = blocks[spec[0]]
    (tmp_path / "train.py").write_text(_program(blocks, spec[0]))
    nproc = int(options.get("nproc", 1))
    if nproc == 1:
        _run([sys.executable, "train.py"], tmp_path)
    else:
        _run([sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node",
              str(nproc), "train.py"], tmp_path)
