"""A pin known to be of another build is no pin: the SGLang campaign images are built here
(scripts/build-anvil-sglang-image.sh), and the ids their files once pinned were of earlier
builds, so each pin is a placeholder the build fills (``tp2qual.local_pins``), as the DFlash
draft's revision is. Unfilled, the candidate is refused before start with its ``how_to_pin``
(``hooks/candidates.why_not_runnable``); filled, the id the build wrote is the pin; and
``--plan`` renders either way (tests below and test_every_candidate_renders.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tp2qual.candidate import load_candidates
from tp2qual.local_pins import PLACEHOLDER
from tp2qual.serving.launchers.docker.pins import pin_unresolved, resolve_pin

MAIN = Path(__file__).resolve().parents[2]
BUILT_HERE = {  # candidate -> the file the build script writes (its line 7 and 32)
    "deepseek-v4-flash-0731": "anvil-sglang-deepseek-v4-image-id",
    "inkling-small-nvfp4": "anvil-sglang-inkling-image-id",
    "inkling-small-nvfp4-mxfp8kv": "anvil-sglang-inkling-image-id",
}
BUILT_ID = "sha256:" + "c" * 64


@pytest.fixture(scope="module")
def shipped() -> dict:
    return {c.name: c for c in load_candidates([MAIN / "candidates"])}


@pytest.mark.parametrize("name", sorted(BUILT_HERE))
def test_a_locally_built_image_is_pinned_by_a_placeholder_the_build_fills(
    shipped: dict, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate = shipped[name]
    raw = candidate.launch["docker"]["pin"]
    match = PLACEHOLDER.match(raw)
    assert match is not None, f"{name}: pins {raw}, not a placeholder"
    assert match.group(1).replace("_", "-") == BUILT_HERE[name]  # the build's own file
    env = "TP2QUAL_" + match.group(1).upper()
    monkeypatch.delenv(env, raising=False)
    monkeypatch.chdir(MAIN.parent)  # no .cache of the working directory either
    if resolve_pin(candidate).value is not None:
        pytest.skip(f"{BUILT_HERE[name]} is filled on this machine")
    why = pin_unresolved(candidate)
    assert why is not None and why.startswith(f"image pin {raw} is unresolved"), why
    assert "scripts/build-anvil-sglang-image.sh" in why  # how_to_pin: what to do
    monkeypatch.setenv(env, BUILT_ID)
    assert resolve_pin(candidate).value == BUILT_ID and pin_unresolved(candidate) is None


def test_the_build_script_writes_the_files_the_placeholders_read() -> None:
    script = (MAIN / "scripts" / "build-anvil-sglang-image.sh").read_text()
    assert ".cache/anvil-sglang-$VARIANT-image-id" in script
    for written in set(BUILT_HERE.values()):
        variant = written.removeprefix("anvil-sglang-").removesuffix("-image-id")
        assert (MAIN / "images" / "anvil-sglang" / f"Dockerfile.{variant}").is_file(), variant
