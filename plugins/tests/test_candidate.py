"""Candidate files: schema errors name file and field; TP2 defaults and written overrides."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tp2qual.candidate import TP2_ENV_DEFAULTS, load_candidate, load_candidates
from tp2qual.exceptions import CandidateError
from tp2qual.launch import resolve_launch

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """
name = "{name}"
[model]
repo = "org/model"
revision = "0123456789abcdef0123456789abcdef01234567"
served_name = "m"
[engine]
kind = "vllm"
[launch]
kind = "process"
command = ["serve", "--port", "{{port}}", "--max-num-seqs", "1"]
{launch_extra}
[serve]
tensor_parallel_size = {tp}
max_model_len = 4096
"""


def write(tmp_path: Path, name: str = "cand", tp: int = 1, launch_extra: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(MINIMAL.format(name=name, tp=tp, launch_extra=launch_extra)))
    return path


def test_shipped_candidates_are_valid():
    names = [c.name for c in load_candidates([ROOT / "candidates"])]
    assert "smollm2-135m-local" in names


def test_minimal_candidate_loads(tmp_path):
    candidate = load_candidate(write(tmp_path))
    assert (candidate.name, candidate.tp, candidate.max_model_len) == ("cand", 1, 4096)
    assert list(resolve_launch(candidate, port=8123).argv) == [
        "serve",
        "--port",
        "8123",
        "--max-num-seqs",
        "1",
    ]


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("max_model_len = 4096", "max_model_len = 12", "serve.max_model_len", "minimum"),
        ('kind = "vllm"', 'kind = "tgi"', "engine.kind", "is not one of"),
        (
            'revision = "0123456789abcdef0123456789abcdef01234567"',
            'revision = "main"',
            "model.revision",
            "does not match",
        ),
        ('served_name = "m"', 'served_nam = "m"', "model", "served_name"),
    ],
)
def test_invalid_field_is_named_with_file(tmp_path, old, new, field, words):
    path = write(tmp_path)
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(CandidateError) as info:
        load_candidate(path)
    message = str(info.value)
    assert str(path) in message and field in message and words in message


def test_bad_toml_is_named(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("name = \n")
    with pytest.raises(CandidateError, match=r"broken\.toml: not valid TOML"):
        load_candidate(path)


def test_name_must_match_file(tmp_path):
    path = write(tmp_path, name="cand")
    path.rename(tmp_path / "other.toml")
    with pytest.raises(CandidateError, match="must match the file name"):
        load_candidate(tmp_path / "other.toml")


def test_tp2_gets_campaign_transport_defaults(tmp_path):
    env = load_candidate(write(tmp_path, tp=2)).env()
    assert {k: env[k] for k in TP2_ENV_DEFAULTS} == TP2_ENV_DEFAULTS


def test_tp1_gets_no_transport_defaults(tmp_path):
    assert load_candidate(write(tmp_path, tp=1)).env() == {}


def test_tp2_default_changed_without_reason_is_refused(tmp_path):
    path = write(tmp_path, tp=2, launch_extra='env = { NCCL_P2P_DISABLE = "0" }')
    with pytest.raises(CandidateError, match=r"NCCL_P2P_DISABLE.*written reason"):
        load_candidate(path)


def test_tp2_override_with_reason_applies(tmp_path):
    extra = (
        'env_overrides = { NCCL_P2P_DISABLE = { value = "0", '
        'reason = "NVLink bridge present on this host" } }'
    )
    env = load_candidate(write(tmp_path, tp=2, launch_extra=extra)).env()
    assert env["NCCL_P2P_DISABLE"] == "0" and env["NCCL_CUMEM_ENABLE"] == "0"


def test_expandable_segments_refused(tmp_path):
    extra = 'env = { PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True" }'
    with pytest.raises(CandidateError, match="expandable_segments"):
        load_candidate(write(tmp_path, tp=2, launch_extra=extra))


def test_duplicate_names_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write(tmp_path / "a")
    write(tmp_path / "b")
    with pytest.raises(CandidateError, match="defined twice"):
        load_candidates([tmp_path / "a", tmp_path / "b"])


def test_invalid_file_stops_pytest_before_anything_starts(pytester, tmp_path):
    bad = write(tmp_path, name="bad")
    bad.write_text(bad.read_text().replace("max_model_len = 4096", "max_model_len = -1"))
    pytester.makepyfile(test_x="def test_x(candidate):\n    raise AssertionError('ran')\n")
    result = pytester.runpytest("--candidates", str(tmp_path), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*candidate files rejected, nothing was started*", f"*{bad}: serve.max_model_len*"]
    )


def _with_command(tmp_path, command: str):
    path = write(tmp_path, tp=2)
    written = 'command = ["serve", "--port", "{port}", "--max-num-seqs", "1"]'
    path.write_text(path.read_text().replace(written, command))
    return path


def test_speculative_decoding_is_refused_in_a_baseline(tmp_path):
    path = _with_command(
        tmp_path, 'command = ["serve", "--speculative-config", "{}", "--max-num-seqs", "1"]'
    )
    with pytest.raises(CandidateError, match="--speculative-config turns on speculative"):
        load_candidate(path)


def test_speculative_decoding_is_allowed_in_an_optional_lane(tmp_path):
    lane = '[lane]\nkind = "optional"\nafter = "base"\n'
    path = _with_command(tmp_path, 'command = ["serve", "--speculative-config", "{}"]')
    text = path.read_text()
    path.write_text(text.replace("[model]", lane + "[model]", 1))
    assert load_candidate(path).name == "cand"


@pytest.mark.parametrize("flags", ['"--max-num-seqs", "4"', '"--max-running-requests=2"'])
def test_more_than_one_request_at_a_time_is_refused(tmp_path, flags):
    path = _with_command(tmp_path, f'command = ["serve", {flags}]')
    with pytest.raises(CandidateError, match="admits more than one request"):
        load_candidate(path)


def test_one_request_at_a_time_is_fine(tmp_path):
    path = _with_command(tmp_path, 'command = ["serve", "--max-num-seqs", "1"]')
    assert load_candidate(path).tp == 2
