"""A model on the Hugging Face Hub, or in the local Hub cache: its config and tensor table.

Nothing but metadata is read: the repository's file list
(``/api/models/{repo}/revision/{rev}``), ``config.json`` (and
``hf_quant_config.json`` or ``model.safetensors.index.json`` when the
repository has them) through ``huggingface_hub``'s cache, and each safetensors
file's header by HTTP range requests, as ``huggingface_hub``'s
``get_safetensors_metadata`` reads them: the first 100,000 bytes, and a second
range only for a longer header. No tensor data is downloaded.

What the Hub sends is untrusted input. Every response is read up to a bound
(:data:`memacct.io.MAX_FILE_BYTES`, or the header's declared length, itself
capped at the safetensors format's 100 MB before any of it is read), parsed
strictly (:mod:`memacct.io`), and the shard index may only name files inside
the repository. A cold read of a model costs a fixed number of requests: one
for the file list, two (``HEAD`` + ``GET``) per metadata file, and one range
request per safetensors file (two for a header past 100,000 bytes). The tensor
table is then kept in memacct's cache per commit, so a second run asks only
for the file list, and an offline run (``HF_HUB_OFFLINE=1``) none.

``HF_TOKEN``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT``, ``HF_HOME`` and
``HF_HUB_CACHE`` are read when a model is resolved, not when memacct is
imported. ``huggingface_hub`` (the ``memacct[hf]`` extra) is imported only here,
inside the functions that need it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memacct.errors import ConfigError, ModelSourceError
from memacct.io import (
    MAX_FILE_BYTES,
    loads_json_object,
    read_json_object,
)
from memacct.model.sources.checkpoint import (
    TensorInfo,
    TensorTable,
    header_length,
    header_tensors,
    merge_tensors,
    shard_names,
)
from memacct.model.sources.hub_cache import (
    COMMIT,
    INDEX,
    SINGLE,
    cached_commit,
    cached_table,
    hub_cache_dir,
    snapshot_table,
    storage,
    store_ref,
    store_table,
)
from memacct.model.sources.local import read_config_file

__all__ = ["HubModel", "HubUnavailableError", "load_hub_model", "parse_hub_id"]

_FIRST_RANGE = 100_000  # what get_safetensors_metadata asks first: 97% of headers fit
_REVISION = re.compile(r"[\w.\-/]{1,200}")
_TIMEOUT_S = 10.0

StatusFn = Callable[[str], None]


@dataclass(frozen=True)
class HubModel:
    """A model read from the Hub or its local cache.

    Attributes:
        repo_id: ``org/name``.
        commit: the commit the revision resolved to.
        config: its ``config.json``.
        table: the tensor table of its safetensors headers; ``None`` when it has none.
        snapshot: the snapshot directory in the Hugging Face cache.
        notes: what was assumed or where it came from, for the plan's notes.
        from_cache: read from the local cache, without asking the Hub.
    """

    repo_id: str
    commit: str
    config: dict[str, Any]
    table: TensorTable | None
    snapshot: Path
    notes: tuple[str, ...] = ()
    from_cache: bool = False


class HubUnavailableError(ModelSourceError):
    """The Hub cannot be asked (offline, unreachable, or huggingface_hub missing) and the
    local cache does not have the model: nothing said the model is wrong."""


def stderr_status(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def parse_hub_id(name: str, revision: str | None = None) -> tuple[str, str | None]:
    """``(repo_id, revision)`` from ``org/name`` or ``org/name@rev`` (``revision`` wins if both).

    Raises:
        ModelSourceError: not ``org/name`` by huggingface_hub's repo-id rules, or a bad revision.
    """
    repo_id, _, inline = name.partition("@")
    if inline and revision is not None and inline != revision:
        raise ModelSourceError(
            f"model={name!r} names revision {inline!r} but revision={revision!r} was given too: "
            "give the revision once"
        )
    rev = revision if revision is not None else (inline or None)
    _check_repo_id(repo_id)
    if rev is not None and (not _REVISION.fullmatch(rev) or ".." in rev or rev.startswith("/")):
        raise ModelSourceError(
            f"revision {rev[:80]!r} of {repo_id} is not a branch, tag or commit name: give e.g. "
            "main, v1.0 or a 40-character commit hash"
        )
    return repo_id, rev


def _check_repo_id(repo_id: str) -> None:
    problem = None
    if repo_id.count("/") != 1:
        problem = "it must be org/name, with exactly one '/'"
    else:
        try:
            from huggingface_hub.errors import HFValidationError
            from huggingface_hub.utils._validators import validate_repo_id
        except ImportError:  # checked again, with the install hint, before the Hub is asked
            pass
        else:
            try:
                validate_repo_id(repo_id)
            except HFValidationError as exc:
                problem = str(exc).split(":", 1)[0]
    if problem:
        raise ModelSourceError(
            f"{repo_id[:120]!r} is not a Hugging Face Hub id ({problem}): give org/name, "
            "a preset, or the path of a config.json, checkpoint directory or .gguf file"
        )


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _import_hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        from memacct.plugin import extra_hint

        raise HubUnavailableError(
            "naming a model by its Hugging Face Hub id needs huggingface_hub: "
            f"{extra_hint('hf')}, or give the path of its config.json"
        ) from None
    return huggingface_hub


def load_hub_model(
    repo_id: str, revision: str | None = None, *, status: StatusFn | None = stderr_status
) -> HubModel:
    """Read ``repo_id`` at ``revision`` (default ``main``) from the Hub, or offline from the cache.

    Args:
        repo_id: ``org/name`` (checked by :func:`parse_hub_id`'s rules).
        revision: a branch, tag or commit; ``None``: ``main``.
        status: called with one line before the Hub is asked (default: printed on stderr).

    Raises:
        ModelSourceError: gated, missing or private repository, unknown revision, no
            ``config.json``, offline without the model in the cache, Hub unreachable, or
            hostile content; one line naming the cause and the fix.
    """
    repo_id, revision = parse_hub_id(repo_id, revision)
    _import_hub()
    if _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE"):
        cached = _from_cache(repo_id, revision)
        if cached is None:
            raise HubUnavailableError(
                f"HF_HUB_OFFLINE is set and {repo_id}@{revision or 'main'} is not in the Hugging "
                f"Face cache ({hub_cache_dir()}): run once online (unset HF_HUB_OFFLINE) to cache "
                "it, or give the path of its config.json"
            )
        return cached
    endpoint = _endpoint()
    if status is not None:
        status(
            f"memacct: reading {repo_id}@{revision or 'main'} from {endpoint} "
            "(config and safetensors headers, no weights)"
        )
    try:
        return _from_hub(repo_id, revision, endpoint)
    except _Unreachable as exc:
        cached = _from_cache(repo_id, revision)
        if cached is None:
            reason, fix = exc.args
            raise HubUnavailableError(
                f"{reason} and it is not in the Hugging Face cache: {fix}") from None
        note = f"{exc.args[0]}: read {repo_id} from the local cache"
        return replace(cached, notes=(*cached.notes, note))


class _Unreachable(Exception):
    """The Hub did not answer (a network error): the cache may still serve the model.
    ``args``: what happened (the endpoint, its timeout or the error) and the fix."""


# ---------------------------------------------------------------- the Hub


def _explain_status(
    repo_id: str, revision: str | None, endpoint: str, status_code: int, error_code: str | None,
    what: str,
) -> ModelSourceError:  # fmt: skip
    """One line for an HTTP error of the Hub, naming the cause and the fix."""
    from huggingface_hub import get_token

    has_token = bool(get_token())
    where = f"{repo_id}@{revision or 'main'}"
    if error_code == "GatedRepo":
        return ModelSourceError(
            f"{repo_id} is a gated model: request access at {endpoint}/{repo_id}, then set "
            "HF_TOKEN to a token of the account that was granted it (or run `hf auth login`)"
        )
    if error_code == "RevisionNotFound":
        return ModelSourceError(
            f"{repo_id} has no revision {revision!r}: give a branch, tag or commit that exists "
            "(default: main)"
        )
    if error_code == "EntryNotFound" or (status_code == 404 and what != "the repository"):
        return ModelSourceError(
            f"{where} has no {what}: memacct reads transformers-format repositories (a GGUF "
            "one: download the .gguf file and give its path)"
        )
    if status_code in (401, 403, 404) or error_code == "RepoNotFound":
        if has_token:
            return ModelSourceError(
                f"{repo_id} was not found on {endpoint}, or it is private and the token in use "
                "cannot read it: check the name (org/name) and the token's access"
            )
        return ModelSourceError(
            f"{repo_id} was not found on {endpoint}, or it is private and no token is set: "
            "check the name (org/name); for a private model set HF_TOKEN"
        )
    return ModelSourceError(
        f"{endpoint} answered HTTP {status_code} for {what} of {where}: try again later, "
        "or set HF_HUB_OFFLINE=1 to use the local cache"
    )


def _explain(exc: BaseException, repo_id: str, revision: str | None, endpoint: str,
             what: str) -> Exception:  # fmt: skip
    """A ``huggingface_hub`` or network exception as one line (or :class:`_Unreachable`)."""
    from huggingface_hub import errors

    if isinstance(exc, errors.HfHubHTTPError) and exc.response is not None:
        response = exc.response
        code = response.headers.get("X-Error-Code")
        if isinstance(exc, errors.GatedRepoError):
            code = "GatedRepo"
        return _explain_status(repo_id, revision, endpoint, response.status_code, code, what)
    names = {c.__name__ for c in type(exc).__mro__}
    if any("Timeout" in name for name in names):  # httpx's and requests' timeouts
        return _Unreachable(
            f"{endpoint} timed out after {_TIMEOUT_S:g} s for {repo_id} ({type(exc).__name__})",
            "try again, check the network or HF_ENDPOINT, or give the path of its config.json",
        )
    if names & {"TransportError", "ConnectionError"} or isinstance(
            exc, errors.LocalEntryNotFoundError):  # fmt: skip
        return _Unreachable(
            f"cannot reach {endpoint} for {repo_id} ({type(exc).__name__})",
            "check the network or HF_ENDPOINT, or give the path of its config.json",
        )
    return ModelSourceError(
        f"reading {what} of {repo_id} from {endpoint} failed ({type(exc).__name__}: "
        f"{str(exc)[:200]}): check HF_ENDPOINT, or give the path of its config.json"
    )


class _Client:
    """Bounded requests to one Hub endpoint for one repository."""

    def __init__(self, repo_id: str, revision: str | None, endpoint: str) -> None:
        from huggingface_hub import get_session
        from huggingface_hub.utils._headers import build_hf_headers

        self.repo_id, self.revision, self.endpoint = repo_id, revision, endpoint
        self.session = get_session()
        self.headers = build_hf_headers()

    def get(self, url: str, what: str, limit: int, byte_range: str | None = None) -> bytes:
        """The body of a ``GET``, at most ``limit`` bytes (a longer body is cut, never read)."""
        headers = dict(self.headers)
        if byte_range is not None:
            headers["Range"] = f"bytes={byte_range}"
        try:
            with self.session.stream(
                "GET", url, headers=headers, timeout=_TIMEOUT_S, follow_redirects=True
            ) as response:
                if response.status_code >= 400:
                    raise _explain_status(
                        self.repo_id, self.revision, self.endpoint, response.status_code,
                        response.headers.get("X-Error-Code"), what,
                    )  # fmt: skip
                skip = 8 if byte_range is not None and byte_range.startswith("8-") and (
                    response.status_code == 200
                ) else 0  # a server that ignores Range sends the file from its start
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) >= skip + limit:
                        break
                return bytes(data[skip : skip + limit])
        except ConfigError:
            raise
        except Exception as exc:  # the session's own (httpx) errors: a network failure
            raise _explain(exc, self.repo_id, self.revision, self.endpoint, what) from None

    def file_list(self) -> tuple[str, dict[str, int | None]]:
        """The commit the revision points to and the repository's files with their sizes."""
        from urllib.parse import quote

        rev = quote(self.revision or "main", safe="")
        url = f"{self.endpoint}/api/models/{self.repo_id}/revision/{rev}?blobs=true"
        body = self.get(url, "the repository", MAX_FILE_BYTES + 1)
        if len(body) > MAX_FILE_BYTES:
            raise ModelSourceError(
                f"{self.endpoint} sent more than {MAX_FILE_BYTES} bytes of metadata for "
                f"{self.repo_id}: not a Hub answer; check HF_ENDPOINT"
            )
        info = loads_json_object(body.decode("utf-8", errors="replace"), f"{url} (model info)")
        commit = info.get("sha")
        siblings = info.get("siblings")
        if not (isinstance(commit, str) and COMMIT.fullmatch(commit)) or not isinstance(
            siblings, list
        ):
            raise ModelSourceError(
                f"{self.endpoint}'s model info for {self.repo_id} has no commit sha or file "
                "list: not a Hub answer; check HF_ENDPOINT"
            )
        files: dict[str, int | None] = {}
        for entry in siblings:
            name = entry.get("rfilename") if isinstance(entry, Mapping) else None
            if isinstance(name, str):
                size = entry.get("size")
                files[name] = size if isinstance(size, int) and size >= 0 else None
        return commit, files

    def download(self, filename: str, commit: str, size: int | None) -> Path:
        """``filename`` into the Hugging Face cache (``hf_hub_download``), size checked first."""
        from huggingface_hub import hf_hub_download

        if size is not None and size > MAX_FILE_BYTES:
            raise ModelSourceError(
                f"{filename} of {self.repo_id} is {size} bytes, far more than any real one "
                f"(at most {MAX_FILE_BYTES}): refusing to download it"
            )
        try:
            path = hf_hub_download(
                self.repo_id, filename, revision=commit, cache_dir=str(hub_cache_dir()),
                endpoint=self.endpoint, etag_timeout=_TIMEOUT_S,
            )  # fmt: skip
        except Exception as exc:
            raise _explain(exc, self.repo_id, self.revision, self.endpoint, filename) from None
        return Path(path)

    def header(self, filename: str, commit: str, size: int | None) -> dict[str, TensorInfo]:
        """One safetensors file's tensor table, from one or two range requests."""
        from huggingface_hub import hf_hub_url

        url = hf_hub_url(self.repo_id, filename, revision=commit, endpoint=self.endpoint)
        source = f"safetensors header of {self.repo_id}/{filename}"
        first = self.get(url, filename, _FIRST_RANGE + 1, f"0-{_FIRST_RANGE}")
        length = header_length(first[:8], source)
        if size is not None and 8 + length > size:
            raise ModelSourceError(
                f"{source} declares {length} bytes, more than the file's {size}: the file is "
                "damaged or not safetensors"
            )
        body = first[8 : 8 + length]
        if len(body) < length:
            body = self.get(url, filename, length, f"8-{length + 7}")
            if len(body) != length:
                raise ModelSourceError(
                    f"{source}: the Hub sent {len(body)} of its {length} bytes: try again"
                )
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelSourceError(f"{source} is not UTF-8 JSON: not a safetensors file") from None
        return header_tensors(loads_json_object(text, source), source)


def _from_hub(repo_id: str, revision: str | None, endpoint: str) -> HubModel:
    client = _Client(repo_id, revision, endpoint)
    commit, files = client.file_list()
    if "config.json" not in files:
        raise ModelSourceError(
            f"{repo_id}@{revision or 'main'} has no config.json: memacct reads transformers-"
            "format repositories (a GGUF one: download the .gguf file and give its path)"
        )
    if "hf_quant_config.json" in files:
        client.download("hf_quant_config.json", commit, files["hf_quant_config.json"])
    config_path = client.download("config.json", commit, files["config.json"])
    config = read_config_file(config_path)
    snapshot = config_path.parent
    store_ref(repo_id, revision or "main", commit)
    notes: list[str] = []
    table = cached_table(repo_id, commit, config) or snapshot_table(snapshot, config)
    if table is None:
        names: list[str] = []
        if INDEX in files:
            index_path = client.download(INDEX, commit, files[INDEX])
            index = read_json_object(index_path, INDEX)
            names = shard_names(index, f"{repo_id}/{INDEX}")
            missing = [n for n in names if n not in files]
            if missing:
                raise ModelSourceError(
                    f"{repo_id}/{INDEX} names {missing[0]!r}, which the repository does not "
                    "have: the index is damaged; refusing it"
                )
        elif SINGLE in files:
            names = [SINGLE]
        if names:
            tensors = merge_tensors(client.header(n, commit, files[n]) for n in names)
            table = TensorTable(config, tensors)
            store_table(repo_id, commit, table)
        else:
            notes.append(
                f"{repo_id} has no safetensors files: weights sized from its architecture"
            )
    return HubModel(repo_id, commit, config, table, snapshot, tuple(notes))


def _from_cache(repo_id: str, revision: str | None) -> HubModel | None:
    """The model from the Hugging Face cache, found offline; ``None`` when it is not there."""
    commit = cached_commit(repo_id, revision)
    if commit is None:
        return None
    snapshot = storage(repo_id) / "snapshots" / commit
    if not (snapshot / "config.json").is_file():
        return None
    config = read_config_file(snapshot / "config.json")
    table = cached_table(repo_id, commit, config) or snapshot_table(snapshot, config)
    notes = [f"{repo_id} read offline from the Hugging Face cache (commit {commit[:12]})"]
    if table is None:
        notes.append(
            f"no safetensors headers of {repo_id} are cached: weights sized from its "
            "architecture (run once online for the checkpoint's own tensor table)"
        )
    return HubModel(repo_id, commit, config, table, snapshot, tuple(notes), from_cache=True)


