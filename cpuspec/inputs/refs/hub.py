"""The hub, through huggingface-hub only (its cache, token, HF_HUB_OFFLINE, HF_ENDPOINT and
HTTP session, proxies included): whether it answers, a repo's listing, a file's download
verified against it, a header read by range."""
from __future__ import annotations

import errno
import functools
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from cpuspec.inputs.refs.hashes import file_sha256, remember, sha256_file
from cpuspec.inputs.refs.names import Log, RefError

if TYPE_CHECKING:
    from cpuspec.inputs.refs.resolve import Plan


# A hub that does not answer one request within this time is treated as unreachable.
HUB_PROBE_TIMEOUT_S = 3.0


@functools.lru_cache(maxsize=1)   # asked once per command
def hub_unreachable() -> str | None:
    """None where the hub answers; else why not, in words. One quick request through
    huggingface-hub's own HTTP session (so its proxies, HTTPS_PROXY / HTTP_PROXY / NO_PROXY,
    and HF_ENDPOINT apply, as to every download after it), so an unreachable hub costs
    seconds, not huggingface-hub's retry loop (five retries with back-off per file)."""
    from huggingface_hub import constants
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = constants.ENDPOINT
    try:
        from huggingface_hub import get_session   # reads HF_ENDPOINT when first imported
        status = get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S).status_code
        if status == 407 or status >= 500:   # a proxy that wants a login, a hub that is down
            return f"the hub answered {status} at {endpoint}"
        return None
    except Exception as exc:   # connection, proxy, TLS, a malformed HF_ENDPOINT: one line
        proxy = _proxy_for(endpoint)
        how = f"through the proxy {_no_password(proxy)}" if proxy else f"at {endpoint}"
        return f"the hub did not answer {how} ({type(exc).__name__})"


def _proxy_for(url: str) -> str | None:
    """The proxy a request to url goes through, as the environment sets it (NO_PROXY kept)."""
    try:
        host = urllib.parse.urlparse(url).hostname or ""
        if urllib.request.proxy_bypass(host):
            return None
        return urllib.request.getproxies().get(urllib.parse.urlparse(url).scheme)
    except (ValueError, TypeError):
        return None


def _no_password(url: str) -> str:
    """A proxy URL as it may be printed: user:password@ taken out."""
    try:
        u = urllib.parse.urlsplit(url)
        return u._replace(netloc=u.netloc.rpartition("@")[2]).geturl() if "@" in u.netloc \
            else url
    except ValueError:
        return "(the proxy set in the environment)"


def hub_reachable() -> bool:
    global LAST_UNREACHABLE
    LAST_UNREACHABLE = hub_unreachable()
    return LAST_UNREACHABLE is None


# why the hub was out of reach when last asked (said in the error that follows it)
LAST_UNREACHABLE: str | None = None


def verified_digest(path: Path, want: str | None, log: Log) -> str | None:
    """The file's sha256 where it is the hub's (or nothing was listed to check it against);
    None where it differs."""
    digest = file_sha256(path, log)   # hashed once (a blob's name is no proof of its bytes)
    return digest if want is None or digest == want else None


def listing(repo: str, revision: str | None) -> tuple[str, dict[str, dict], bool] | None:
    """The repo's commit, files (path → size, sha256) and whether it is private, from the
    hub (its tree, which pages past a thousand files); None where the hub is out of reach
    (offline, unreachable)."""
    if not hub_reachable():
        return None
    from huggingface_hub import HfApi
    from huggingface_hub import errors
    api = HfApi()
    try:
        info = api.model_info(repo, revision=revision)
        files = {}
        for f in api.list_repo_tree(repo, revision=info.sha, recursive=True):
            if getattr(f, "size", None) is None:   # a folder
                continue
            lfs = getattr(f, "lfs", None)
            files[f.path] = {"size": f.size, "sha256": getattr(lfs, "sha256", None)
                             if lfs is not None else None}
    except errors.GatedRepoError:
        raise RefError(f"{repo} is gated: accept its terms on its hub page, then log in "
                       "(`hf auth login`, or set HF_TOKEN)") from None
    except errors.RevisionNotFoundError:
        raise RefError(f"{repo} has no revision {revision!r}") from None
    except errors.RepositoryNotFoundError:
        raise RefError(f"no repo {repo} on the hub (a private one needs `hf auth login` or "
                       "HF_TOKEN; a file needs its path to exist)") from None
    except KeyboardInterrupt:
        raise
    except Exception as exc:   # the hub's HTTP errors, a dropped connection, a proxy's page
        raise RefError(f"{repo}: the hub did not answer as the hub ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    return info.sha, files, bool(getattr(info, "private", False))


def download(repo: str, revision: str | None, name: str, meta: dict, log: Log,
              force: bool = False, listed: str | None = None) -> tuple[Path, str]:
    """One part, through huggingface-hub into its cache (by branch, as llama.cpp's -hf does,
    so the cache's refs/ stay current), verified against the listing made at commit `listed`;
    a download that fails or differs leaves nothing to be used."""
    from huggingface_hub import hf_hub_download
    size, want = meta.get("size"), meta.get("sha256")
    log(f"hub: downloading {repo}/{name}" + (f" ({size / 1e9:.2f} GB)" if size else ""))
    try:
        path = Path(hf_hub_download(repo, name, revision=revision or "main",
                                    force_download=force))
    except KeyboardInterrupt:
        raise
    except Exception as exc:   # a dropped connection, a full disk: the partial file is gone
        raise RefError(_download_failed(f"{repo}/{name}", exc)) from None
    digest = sha256_file(path)
    if want is not None and digest != want:
        blob = path.resolve()
        path.unlink(missing_ok=True)
        if _in_blobs(path, blob):   # never a file a planted link points at outside the cache
            blob.unlink(missing_ok=True)
        got = _snapshot_commit(path, name)
        if listed and got and got != listed:
            raise RefError(f"{repo} changed on the hub while cpuspec fetched it (listed at "
                           f"{listed[:12]}, downloaded at {got[:12]}, another {name}): removed, "
                           "run it again")
        raise RefError(f"{repo}/{name}: the downloaded file's sha256 {digest[:12]}… is not the "
                       f"hub's {want[:12]}…; removed, run it again")
    remember(path, digest)
    return path, digest


def _in_blobs(link: Path, blob: Path) -> bool:
    """Whether a snapshot's file (link) resolves into its own repo's blobs/ folder in the
    hub's cache (…/models--OWNER--REPO/snapshots/COMMIT/NAME → …/models--OWNER--REPO/blobs)."""
    repo_dir = next((p for p in link.parents if p.name.startswith("models--")), None)
    return repo_dir is not None and not (repo_dir / "blobs").is_symlink() and \
        blob.is_relative_to((repo_dir / "blobs").resolve())


def _download_failed(what: str, exc: Exception) -> str:
    """One line for a download that failed: a disk that filled (or cannot hold a file that
    large, or a quota) says where to make room."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        from huggingface_hub import constants
        return (f"{what}: the download could not be written ({exc.strerror}): make room in "
                f"{constants.HF_HUB_CACHE}, or point HF_HOME at a disk that can hold it, and "
                "run it again")
    return (f"{what}: the download failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); run it again to retry")


def _snapshot_commit(path: Path, name: str) -> str | None:
    """The commit of the hub-cache snapshot a downloaded file lies in (…/snapshots/COMMIT/NAME)."""
    parts = path.parts
    depth = len(Path(name).parts)
    if len(parts) > depth + 1 and parts[-depth - 2] == "snapshots":
        return parts[-depth - 1]
    return None


def remote_head(plan: Plan) -> tuple[Callable[[int], bytes], int] | None:
    """(read, size) of a planned hub file that is not on this machine: read(n) gives the first
    n bytes of its first part, fetching by range requests at the listed commit only what an
    earlier call did not (huggingface-hub's HfFileSystem; nothing written to its cache), size that part's size as the hub lists it.
    None where the plan has a copy here, or no listing (offline)."""
    if plan.copy is not None or plan.blob is not None or not plan.meta:
        return None
    first = plan.parts[0]
    size = plan.meta[first].get("size")
    if size is None:
        raise RefError(f"{plan.ref.repo}/{first}: the hub lists no size for it; fetch it "
                       "with bench and ask again")
    from huggingface_hub import HfFileSystem
    ref, got = plan.ref, bytearray()

    def read(n: int) -> bytes:   # only the bytes not read yet, by range requests
        try:
            if len(got) < n:
                with HfFileSystem().open(f"{ref.repo}/{first}", "rb", cache_type="none",
                                         revision=plan.commit or ref.revision) as f:
                    f.seek(len(got))
                    got.extend(f.read(n - len(got)))
            return bytes(got[:n])
        except KeyboardInterrupt:
            raise
        except Exception as exc:   # the hub's HTTP errors, a dropped connection
            raise RefError(f"{ref.repo}/{first}: reading its header failed ({type(exc).__name__}"
                           f": {str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    return read, size
