"""The hosts file and the placement rules of ``--hosts``: pure, no engine needed.

Every bad hosts file gets one message naming the file, the host and the field, before anything
starts; a candidate goes only to a host its ``[gpus]`` rule fits; test ids name their candidate.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_candidate import write

from tp2qual.candidate import Candidate, load_candidate
from tp2qual.hosts import Host, HostsError, load_hosts, without_password
from tp2qual.placement import Fleet, candidate_in, placement_for, why_not_run
from tp2qual.serving.diagnose import serving_host

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "candidates"

GOOD = """
[[host]]
name = "ws-a"
docker = "unix:///var/run/docker.sock"
gpus = 2
gpu_name = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"

[[host]]
name = "ws-b"
docker = "ssh://me@ws-b"
gpus = 2
gpu_name = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
labels = ["pcie"]
"""

# (hosts file text, what the one message must say)
BAD = [
    ("", "no [[host]] entries"),
    ("[[host]\n", "not valid TOML"),
    ('[hosts]\nname = "a"\n', "unknown top-level key(s) ['hosts']"),
    ('[[host]]\ndocker = "unix:///x.sock"\n', "host[0]: name must be a word"),
    ('[[host]]\nname = "a b"\ndocker = "unix:///x.sock"\n', "name must be a word"),
    ('[[host]]\nname = "a"\n', "host[0] 'a': give exactly one of docker"),
    ('[[host]]\nname = "a"\ndocker = "unix:///x"\ncontext = "c"\n', "exactly one of docker"),
    (
        '[[host]]\nname = "a"\ndocker = "http://a:80"\n',
        "docker must be a unix://, ssh:// or tcp://",
    ),
    ('[[host]]\nname = "a"\ndocker = "tcp://ws:2375"\n', "needs tls = 'folder' (never plain TCP)"),
    ('[[host]]\nname = "a"\ndocker = "unix:///x"\ngpus = -1\n', "gpus must be a whole number"),
    ('[[host]]\nname = "a"\ndocker = "unix:///x"\ngpus = "2"\n', "gpus must be a whole number"),
    ('[[host]]\nname = "a"\ndocker = "unix:///x"\nlabels = "pcie"\n', "labels must be a list"),
    ('[[host]]\nname = "a"\ndocker = "unix:///x"\ngpu = 2\n', "unknown key(s) ['gpu']"),
    ('[[host]]\nname = "a"\ndocker = "unix:///x"\nssh_options = "-i k"\n', "ssh_options must be"),
    ('[[host]]\nname = "a"\ndocker = "unix:///x"\ntls = "/nonexistent"\n', "tls folder"),
    ('[[host]]\nname = "a"\ncontext = "no-such-context-here"\n', "no Docker context named"),
    (
        '[[host]]\nname = "a"\ndocker = "unix:///x"\n[[host]]\nname = "a"\ndocker = "unix:///y"\n',
        "name 'a' is also host[0]",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_hosts_file_gets_one_clear_message(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    with pytest.raises(HostsError) as caught:
        load_hosts(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_remote_tcp_engine_needs_an_ssh_tunnel_for_its_loopback_servers(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    path = tmp_path / "hosts.toml"
    entry = f'[[host]]\nname = "c"\ndocker = "tcp://ws-c:2376"\ntls = "{tmp_path / "certs"}"\n'
    path.write_text(entry)
    with pytest.raises(HostsError, match="needs ssh = 'user@host' for the tunnel"):
        load_hosts(path)
    path.write_text(entry + 'ssh = "me@ws-c"\nssh_options = ["-i", "/keys/qual"]\n')
    (host,) = load_hosts(path)
    assert host.env() == {
        "DOCKER_HOST": "tcp://ws-c:2376",
        "DOCKER_TLS_VERIFY": "1",
        "DOCKER_CERT_PATH": str(tmp_path / "certs"),
        "TP2QUAL_SSH_TUNNEL": "me@ws-c",
        "TP2QUAL_SSH_OPTIONS": "-i /keys/qual",
    }
    assert host.tunnelled and not host.local


def test_a_good_file_reads_as_written(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(GOOD)
    a, b = load_hosts(path)
    assert (a.name, a.local, a.tunnelled) == ("ws-a", True, False)
    assert (b.name, b.local, b.ssh, b.labels) == ("ws-b", False, "me@ws-b", ("pcie",))
    assert b.shown()["reached_by"] == "ssh tunnel via me@ws-b"


def test_evidence_never_carries_a_password() -> None:
    assert without_password("ssh://me:hunter2@ws-b:22") == "ssh://me@ws-b:22"
    assert without_password("unix:///var/run/docker.sock") == "unix:///var/run/docker.sock"
    assert "hunter2" not in str(Host("x", "ssh://me:hunter2@ws", ssh="me:hunter2@ws").shown())


def test_a_candidate_goes_only_where_its_gpu_rule_fits(tmp_path: Path) -> None:
    qwen = load_candidate(CAMPAIGN / "qwen3.5-122b-a10b-nvfp4.toml")
    pro = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert Host("two", "ssh://a", ssh="a", gpus=2, gpu_name=pro).why_not(qwen) is None
    assert "needs 2 GPU(s)" in (Host("one", "ssh://a", ssh="a", gpus=1).why_not(qwen) or "")
    h200 = Host("h", "ssh://a", ssh="a", gpus=8, gpu_name="NVIDIA H200")
    assert "RTX PRO 6000" in (h200.why_not(qwen) or "")
    local = load_candidate(CAMPAIGN / "smollm2-135m-local.toml")
    assert Host("here", "unix:///var/run/docker.sock").why_not(local) is None
    assert "is remote" in (Host("far", "ssh://me@far", ssh="me@far").why_not(local) or "")


def test_test_ids_name_their_candidate_and_the_longest_name_wins() -> None:
    vllm = load_candidate(CAMPAIGN / "smollm2-135m-vllm.toml")
    lane = load_candidate(CAMPAIGN / "smollm2-135m-vllm-reasoning.toml")
    both = [vllm, lane]
    assert candidate_in("tests/test_02_model_list.py::test_x[smollm2-135m-vllm]", both) is vllm
    assert candidate_in("t.py::test_tool_call[smollm2-135m-vllm-reasoning-auto]", both) is lane
    assert candidate_in("t.py::test_tool_call[smollm2-135m-vllm-named]", both) is vllm
    assert candidate_in("plugins/tests/test_x.py::test_plain", both) is None


def _minimal(folder: Path, name: str, lane_after: str = "") -> Candidate:
    folder.mkdir(parents=True, exist_ok=True)
    path = write(folder, name)
    if lane_after:
        path.write_text(path.read_text() + f'[lane]\nafter = "{lane_after}"\nwhy = "a lane"\n')
    return load_candidate(path)


def test_placement_keeps_lanes_with_their_baseline_and_balances_by_measured_time(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "c"
    base = _minimal(folder, "base")
    lane = _minimal(folder, "base-lane", lane_after="base")
    other = _minimal(folder, "other")
    fleet = Fleet([Host("a", "unix:///a.sock"), Host("b", "unix:///b.sock")])
    results = tmp_path / "results"
    placement = placement_for([other, lane, base], fleet, results, "run")
    assert placement["base"] == placement["base-lane"] != placement["other"]
    assert placement == placement_for([base, lane, other], fleet, results, "run")  # same anywhere
    far = Fleet([Host("far", "ssh://me@far", ssh="me@far")])
    assert placement_for([base], far, results, "run") == {}  # a process runs on no remote host


def usage_error_of(hosts: Path, text: str, *args: str) -> str:
    """``pytest --hosts FILE ARGS -k smollm2`` with the file holding ``text``: its output, after
    checking it stopped as a usage error (before anything started), never with a traceback."""
    hosts.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--hosts", str(hosts), *args, "-k", "smollm2", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert "Traceback" not in output
    return output


def test_a_bad_hosts_file_stops_pytest_before_anything_starts(tmp_path: Path) -> None:
    output = usage_error_of(tmp_path / "hosts.toml", '[[host]]\nname = "a"\n')
    assert "hosts file rejected, nothing was started" in output
    assert "give exactly one of docker" in output


def test_one_worker_per_host_or_a_clear_message(tmp_path: Path) -> None:
    one = '[[host]]\nname = "a"\ndocker = "unix:///nonexistent/docker.sock"\n'
    output = usage_error_of(tmp_path / "hosts.toml", one, "-n", "3")
    assert "leave -n out or give -n 1 (not -n 3)" in output


def test_a_remote_host_is_refused_what_only_this_machine_can_give() -> None:
    """Preflight hashes the model cache here and the NCCL probe is mounted from here: on a remote
    host that would judge the wrong bytes or fail for our reason, so it is INCOMPLETE instead."""
    qwen = load_candidate(CAMPAIGN / "qwen3.5-122b-a10b-nvfp4.toml")
    pro = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    fleet = Fleet([Host("far", "ssh://me@far", ssh="me@far", gpus=2, gpu_name=pro)])
    fleet.placement = {"qwen3.5-122b-a10b-nvfp4": "far"}
    why = why_not_run([qwen], fleet, pull=False, here=lambda c: None)
    assert "host far is remote" in why[qwen.name]
    assert "the model cache" in why[qwen.name] and "the NCCL probe file" in why[qwen.name]
    fleet.down = {"far": "no answer"}
    assert (
        "cannot be reached (no answer)"
        in why_not_run([qwen], fleet, pull=False, here=lambda c: None)[qwen.name]
    )


def test_diagnosis_judges_the_platform_of_the_host_that_served() -> None:
    """On a Docker host the GPU snapshot is read there: WSL2 is that host's fact, not ours."""
    here = {"host": {"wsl2": False, "hostname": "controller"}}
    there = {**here, "topology": {"source": "nvml-container", "host": {"wsl2": True}}}
    assert serving_host(there)["wsl2"] is True
    assert serving_host(here)["wsl2"] is False
    unread = {**here, "topology": {"host": {"wsl2": None}}}  # the probe failed: ours, as before
    assert serving_host(unread)["hostname"] == "controller"


def test_plan_shows_where_each_candidate_would_go_and_starts_nothing(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    # 127.0.0.2: a loopback address (no traffic leaves), yet not this machine to the suite
    hosts.write_text('[[host]]\nname = "far"\ndocker = "ssh://me@127.0.0.2"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--plan", f"--hosts={hosts}", "-k", "smollm2-135m-local"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# smollm2-135m-local -> host nowhere (not run: no host can run it" in proc.stdout
    assert "host far is remote" in proc.stdout
