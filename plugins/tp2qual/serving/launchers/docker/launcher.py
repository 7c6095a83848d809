"""Docker launcher: the same protocol as ``ProcessLauncher``, for a server in a container.

Constructors store settings; ``start()`` checks the image pin (nothing is created on a
mismatch, nothing is pulled unless ``pull=True``), creates the container, proves it got the
verified image, starts it and streams its logs into the sink. ``poll()`` reloads the container on
every call. ``stop()`` keeps the evidence (log streamed, ``container-inspect.json``) before the
container is removed (testcontainers' ``stop()`` loses both) and is safe to call twice.

One function (``run_kwargs``) turns the resolved launch (``tp2qual.launch``) into the SDK
arguments; ``start()`` passes them to ``containers.create`` and ``plan()`` renders them as
``docker run``: the two cannot drift.
Everything we create carries the labels below; ``sweep`` removes leftovers by label.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tp2qual.artifacts.layout import atomic_write
from tp2qual.candidate import Candidate
from tp2qual.checks.preflight import image_matches, model_label_problem
from tp2qual.engine_env import candidate_env_problems
from tp2qual.exceptions import CandidateError, ImageUnavailable, PinMismatch, StartupExited
from tp2qual.image_ref import image_reference, is_by_digest, split_image
from tp2qual.launch import SESSION, ResolvedLaunch, resolve_launch
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.base import (
    Exited,
    LauncherBase,
    StopReport,
    wait_port_free,
)
from tp2qual.serving.launchers.docker.engine import open_client
from tp2qual.serving.launchers.docker.pins import Pin, resolve_pin
from tp2qual.serving.launchers.docker.run_args import (
    INSPECT_FILE,
    gpu_request,
    render_docker_run,
    run_kwargs,
    sdk_kwargs,
)
from tp2qual.serving.launchers.docker.sweep import exited_from_state, redact_inspect
from tp2qual.serving.launchers.docker.tunnel import SshTunnel, tunnel_for

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# The launcher


class DockerLauncher(LauncherBase):
    """A server in a detached container on the host network (see the module docstring)."""

    kind = "docker"

    def __init__(
        self,
        candidate: Candidate,
        log_path: Path,
        redactor: Redactor,
        *,
        run_id: str,
        port: int = 0,
        client: Any = None,
        pull: bool = False,
        device_ids: Sequence[str] = (),
        session: str = SESSION,
        wsl2: bool | None = None,
        launch: ResolvedLaunch | None = None,
    ):
        """``launch``: the run's resolved launch; without one it is resolved here from the
        port, run id, session, WSL2 and device ids given."""
        launch = launch or resolve_launch(
            candidate, port=port, run_id=run_id, session=session, wsl2=wsl2, device_ids=device_ids
        )
        if launch.container is None:
            raise CandidateError("not a Docker launch", candidate=candidate.name)
        super().__init__(candidate, launch, log_path, redactor)
        self.container = launch.container
        self.run_id = run_id
        self.pull = pull
        self._client = client
        self._own_client = client is None
        self._container: Any = None
        self._image: dict[str, Any] = {}
        self._pin: Pin | None = None
        self._log_stream: Any = None
        self._final: Exited | None = None
        self._tunnel: SshTunnel | None = None

    @property
    def inspect_path(self) -> Path:
        return self.log.path.with_name(INSPECT_FILE)

    @property
    def wsl2(self) -> bool:
        return self.container.wsl2

    def run_kwargs(self) -> dict[str, Any]:
        return run_kwargs(self.launch)

    def plan(self) -> str:
        return render_docker_run(self.run_kwargs(), self._redactor)

    # -- start --------------------------------------------------------------------------------

    def start(self) -> None:
        from docker.errors import APIError

        kwargs = self.run_kwargs()
        if unknown := candidate_env_problems(self.candidate):  # set, but the engine ignores it
            raise CandidateError("; ".join(unknown), candidate=self.candidate.name)
        client = self._docker()
        self._image = self._verified_image(client)
        self.refuse_busy_port()
        self._container = client.containers.create(**sdk_kwargs(kwargs))
        if self._container.attrs.get("Image") != self._image["Id"]:  # the tag moved meanwhile
            found = self._container.attrs.get("Image")
            self._container.remove(force=True)
            self._container = None
            raise PinMismatch(
                f"image {kwargs['image']} changed during start: created from "
                f"{found}, verified {self._image['Id']}",
                candidate=self.candidate.name,
            )
        try:
            self._container.start()
        except APIError as exc:  # e.g. the command does not exist in the image
            raise StartupExited(
                f"container {kwargs['name']} did not start: {exc.explanation}",
                candidate=self.candidate.name,
                log_path=self.log.path,
            ) from None
        self.log.pump(self._log_chunks())
        self._tunnel = tunnel_for(self.port)  # a remote host: its loopback server, here
        if self._tunnel is not None:
            self._tunnel.open()
            self.base_url = f"http://127.0.0.1:{self._tunnel.local_port}"

    def verify_image(self) -> dict[str, Any]:
        """The pin check alone, for the preflight gate: image facts, or PinMismatch carrying
        the facts found (gate 00 records them either way; ``checks.preflight`` judges them)."""
        self._found: dict[str, Any] | None = None
        try:
            self._image = self._verified_image(self._docker())
        except PinMismatch as exc:
            exc.facts = self._image_facts(self._found)
            raise
        return self._image_facts(self._image)

    def _image_facts(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        labels = ((attrs or {}).get("Config") or {}).get("Labels") or {}
        return {
            "image_id": (attrs or {}).get("Id"),
            "repo_digests": (attrs or {}).get("RepoDigests"),
            "pin": self._pin.as_dict() if self._pin else None,
            "model_label": labels.get("tp2qual.model.sha256"),
        }

    def _docker(self) -> Any:
        if self._client is None:
            self._client = open_client()
        return self._client

    def _verified_image(self, client: Any) -> dict[str, Any]:
        """The local image, proven to be the pinned one; PinMismatch names the candidate file,
        the reference asked for, what was found and what to do."""
        from docker.errors import ImageNotFound

        self._pin = pin = resolve_pin(self.candidate)
        if pin.value is None:
            raise PinMismatch(
                f"{self._where()}: pin {pin.raw} is unresolved ({pin.source})",
                candidate=self.candidate.name,
            )
        ref = image_reference(self.candidate.launch["docker"]["image"], pin.value)
        if self.pull:
            self._pull(client, ref)
        try:
            attrs = client.images.get(ref).attrs
        except ImageNotFound:
            attrs = self._by_image_id(client, ref, pin.value)
        self._found = attrs
        if not image_matches(attrs, pin.value):
            raise PinMismatch(
                f"{self._where()}: image {ref} is pinned to {pin.value} (from {pin.source}) but "
                f"the local image is {attrs['Id']} with RepoDigests "
                f"{attrs.get('RepoDigests') or []}; {self._what_to_do(ref)}",
                candidate=self.candidate.name,
            )
        self._check_model_label(attrs)
        return attrs

    def _where(self) -> str:
        return f"candidate {self.candidate.path}"

    def _what_to_do(self, ref: str) -> str:
        how = self.candidate.launch["docker"].get("how_to_pin", "")
        if is_by_digest(ref):
            act = f"run `docker pull {ref}` (or pass --pull)"
        else:
            act = f"build or pull {ref} so it is the pinned image"
        return (
            f"{act}, or if another image is meant, set launch.docker.pin in "
            f"{self.candidate.path}" + (f" ({how})" if how else "")
        )

    def _by_image_id(self, client: Any, ref: str, pin: str) -> dict[str, Any]:
        """A pin that is an image id under an untagged name is found by the id; else the image
        is missing and the message lists what the repository holds here."""
        from docker.errors import ImageNotFound

        if is_by_digest(ref):
            try:
                attrs: dict[str, Any] = client.images.get(pin).attrs
                if attrs.get("Id") == pin:
                    return attrs
            except ImageNotFound:
                pass
        repo = split_image(ref).repo
        held = sorted(
            {f"{i.id} {i.attrs.get('RepoDigests') or i.tags}" for i in client.images.list(repo)}
        )
        raise ImageUnavailable(
            f"{self._where()}: image {ref} is not present locally (pinned {pin}); "
            + (f"{repo} here: {'; '.join(held)}; " if held else "")
            + f"nothing is pulled unless asked (--pull): {self._what_to_do(ref)}",
            candidate=self.candidate.name,
        ) from None

    def _pull(self, client: Any, ref: str) -> None:
        """``--pull``: exactly the reference (``repo@digest``, ``repo:tag``), never ``:latest``."""
        from docker.errors import APIError

        try:
            client.images.pull(ref)
        except APIError as exc:  # NotFound (wrong digest), registry refused, no network
            raise ImageUnavailable(
                f"{self._where()}: docker pull {ref} failed: {exc.explanation or exc}; check the "
                f"reference and registry access, or {self._what_to_do(ref)}",
                candidate=self.candidate.name,
            ) from None

    def _check_model_label(self, attrs: Mapping[str, Any]) -> None:
        """An image that says which GGUF it carries must carry the pinned one."""
        baked = ((attrs.get("Config") or {}).get("Labels") or {}).get("tp2qual.model.sha256")
        problem = model_label_problem(attrs["Id"], baked, self.candidate.model["revision"])
        if problem:
            raise PinMismatch(problem, candidate=self.candidate.name)

    def _log_chunks(self) -> Iterator[bytes]:
        """Runs in the sink's thread; ends when the container stops or the stream is closed."""
        self._log_stream = self._container.logs(stream=True, follow=True)
        try:
            yield from self._log_stream
        except Exception as exc:  # daemon gone or stream closed at stop: keep what we have
            yield f"[tp2qual] log stream ended: {type(exc).__name__}: {exc}\n".encode()

    # -- poll -----------------------------------------------------------------------------------

    def poll(self) -> Exited | None:
        """Reload the container's state on every call; None while it runs."""
        if self._final is not None or self._container is None:
            return self._final
        from docker.errors import NotFound

        try:
            self._container.reload()
        except NotFound:
            return Exited(None, detail="container removed behind our back")
        return exited_from_state(self._container.attrs.get("State") or {})

    # -- stop -----------------------------------------------------------------------------------

    def stop(self, timeout_s: float | None = None) -> StopReport:
        if self._stopped is not None:
            return self._stopped
        if self._container is None:
            self._close_client()
            self._stopped = StopReport()
            return self._stopped
        timeout = int(timeout_s or self.stop_timeout_s)
        began = time.monotonic()
        extra: dict[str, Any] = {"container": self._container.id[:12]}
        try:
            how = self._stop_container(timeout, extra)
        except Exception as exc:  # the daemon misbehaved: removal below still kills it
            how = f"stop failed ({type(exc).__name__}: {exc}); force-removed"
        finally:
            self._remove(extra)
            self._close_client()
            if self._tunnel is not None:
                self._tunnel.close()
        self._stopped = StopReport(
            how=how,
            seconds=round(time.monotonic() - began, 3),
            port_free=wait_port_free(self.port),
            extra=extra,
        )
        return self._stopped

    def _stop_container(self, timeout: int, extra: dict[str, Any]) -> str:
        from docker.errors import NotFound

        try:
            self._container.reload()
            running = self._container.status in ("running", "created", "restarting", "paused")
            if running:
                self._container.stop(timeout=timeout)
                self._container.reload()
        except NotFound:
            self._final = Exited(None, detail="container removed behind our back")
            extra["exit_code"] = None
            return "already removed"
        state = self._container.attrs.get("State") or {}
        self._final = exited_from_state(state) or Exited(None, detail="still running")
        extra.update(exit_code=state.get("ExitCode"), oom_killed=state.get("OOMKilled"))
        self.log.join(timeout=5.0)
        self._save_inspect()
        if not running:
            return "already exited"
        killed = state.get("ExitCode") == 137 and not state.get("OOMKilled")
        return f"SIGKILL after {timeout}s SIGTERM timeout" if killed else "docker stop (SIGTERM)"

    def _save_inspect(self) -> None:
        body = json.dumps(redact_inspect(self._container.attrs), indent=2, sort_keys=True)
        atomic_write(self.inspect_path, self._redactor.text(body) + "\n")

    def _remove(self, extra: dict[str, Any]) -> None:
        from docker.errors import APIError, NotFound

        if self._log_stream is not None:
            self._log_stream.close()
        try:
            self._container.remove(force=True, v=True)
            extra["removed"] = True
        except NotFound:
            extra["removed"] = True
        except APIError as exc:
            extra["removed"] = False
            extra["remove_error"] = str(exc)
        self.log.join(timeout=2.0)

    def _close_client(self) -> None:
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    # -- identity -------------------------------------------------------------------------------

    @property
    def container_id(self) -> str:
        """The container's id; empty before the start."""
        return self._container.id if self._container is not None else ""

    def identity(self) -> dict[str, Any]:
        kwargs = self.run_kwargs()
        _, gpu_mode = gpu_request(
            self.container.gpus, wsl2=self.wsl2, device_ids=self.container.device_ids
        )
        pin = self._pin.as_dict() if self._pin else _pin_or_error(self.candidate)
        config = self._image.get("Config") or {}
        return {
            "launcher": self.kind,
            "image": kwargs["image"],
            "image_id": self._image.get("Id"),
            "repo_digests": self._image.get("RepoDigests"),
            "image_labels": config.get("Labels") or {},
            "image_created": self._image.get("Created"),
            "pin": pin,
            "model_pin": dict(self.launch.model_pin),
            "container_id": self._container.id if self._container is not None else None,
            "container_name": kwargs["name"],
            "labels": kwargs["labels"],
            "run_kwargs": kwargs | {"environment": self._redactor.mapping(kwargs["environment"])},
            "argv": self._redactor.argv(list(self.launch.argv)),
            "env": self._redactor.mapping(kwargs["environment"]),
            "gpu_request": gpu_mode,
            "shm_size": self.container.shm_size,
            "wsl2": self.wsl2,
            "pull": self.pull,
            "base_url": self.base_url,
            "server_port": self.port,
            "tunnel": self._tunnel.argv if self._tunnel is not None else None,
        }


def _pin_or_error(candidate: Candidate) -> dict[str, Any]:
    try:
        return resolve_pin(candidate).as_dict()
    except CandidateError as exc:
        return {"raw": candidate.launch["docker"]["pin"], "value": None, "source": str(exc)}
