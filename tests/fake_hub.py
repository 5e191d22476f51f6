"""Stdlib fake of the HF Hub for huggingface_hub 2.4.0 (model_info/list_repo_tree/get_paths_info/
list_repo_refs/hf_hub_download/HfFileSystem) and llama.cpp hf-cache.cpp (/refs, /tree?recursive=true).
Faults: hub.gated.add(repo); hub.drop_after[(repo, path)] = (nbytes, times); hub.bare_errors = True;
hub.slow[(repo, path)] = seconds between 4 KiB chunks (a download long enough to interrupt);
hub.redirect_lfs = True (302 to http://localhost:PORT/cdn/<sha256>: another origin, like the real CDN);
hub.move_on_list[repo] = (sha, files): once the repo's tree is listed, a new commit replaces it (a push
between a client's listing and its download)."""
import hashlib, json, re, socket, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    def __init__(self):
        self.repos, self.gated, self.drop_after, self.log = {}, set(), {}, []
        self.private, self.slow, self.move_on_list = set(), {}, {}
        self.redirect_lfs = self.bare_errors = False
        # repos whose LFS files are on Xet (add_xet): their CAS, hf_xet's local one, or a dead
        # one where none was given
        self.xet, self.xet_cas = set(), "http://127.0.0.1:9"

    def add_repo(self, repo_id, files, sha=None, lfs_suffixes=(".gguf", ".bin", ".safetensors")):
        entries = {}
        for path, data in files.items():
            e = {"path": path, "data": data, "size": len(data), "lfs": None, "oid": git_blob_sha1(data)}
            if path.endswith(lfs_suffixes):  # LFS: oid = sha1 of the pointer file, lfs.oid = sha256
                sha256 = hashlib.sha256(data).hexdigest()
                ptr = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n".encode()
                e.update(oid=git_blob_sha1(ptr), lfs={"oid": sha256, "size": len(data), "pointerSize": len(ptr)})
            entries[path] = e
        self.repos[repo_id] = {"sha": sha or hashlib.sha1(repo_id.encode()).hexdigest(), "files": entries}

    def add_xet(self, repo_id, cas_dir=None):
        """Serve repo_id's LFS files as the Hub serves Xet-backed ones. With cas_dir, each is
        uploaded by hf_xet into a local CAS there (hf_xet's own local:// store), which the
        download then reads; without, the CAS announced is dead."""
        self.xet.add(repo_id)
        if cas_dir is None:
            return
        import tempfile, time, warnings
        import hf_xet
        self.xet_cas = f"local://{cas_dir}"
        token = ("t", int(time.time()) + 3600)
        for e in self.repos[repo_id]["files"].values():
            if e["lfs"]:
                with tempfile.NamedTemporaryFile() as f:
                    f.write(e["data"]); f.flush()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", DeprecationWarning)
                        info, = hf_xet.upload_files([f.name], self.xet_cas, token,
                                                    lambda: token, None, "model")
                e["xet_hash"] = info.hash

    def start(self, host="127.0.0.1"):
        handler = type("H", (Handler,), {"hub": self})
        self._srv = ThreadingHTTPServer((host, 0), handler)
        self._srv.daemon_threads = True
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        self.port = self._srv.server_address[1]
        self.endpoint = f"http://{host}:{self.port}"
        return self.endpoint

    def stop(self):
        self._srv.shutdown(); self._srv.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every response carries Content-Length

    def log_message(self, *a):
        pass

    def _send(self, status, body=b"", headers=None, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, status=200, headers=None):
        self._send(status, json.dumps(obj).encode(), headers)

    def _err(self, status, code, msg, extra=None):
        h = {} if self.hub.bare_errors else {"X-Error-Code": code, "X-Error-Message": msg}
        self._json({"error": msg}, status, {**h, **(extra or {})})

    def _repo(self, repo_id, rev=None):
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            return self._err(404, "RepoNotFound", "Repository not found")
        if repo_id in self.hub.gated:  # Hub: 401 anonymous / 403 no access, both X-Error-Code: GatedRepo
            return self._err(401, "GatedRepo", f"Access to model {repo_id} is restricted.")
        if rev is not None and rev not in ("main", repo["sha"]):
            return self._err(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return repo

    do_HEAD = do_POST = lambda self: self.do_GET()

    def do_GET(self):
        u = urlsplit(self.path)
        path, q = unquote(u.path), parse_qs(u.query)
        self.hub.log.append((self.command, self.path, dict(self.headers)))
        R = r"([^/]+/[^/]+)"
        for pat, fn in ((rf"/api/models/{R}(?:/revision/([^/]+))?", self.model_info),
                        (rf"/api/models/{R}/refs", self.refs),
                        (rf"/api/models/{R}/tree/([^/]+)(?:/(.*))?", self.tree),
                        (rf"/api/models/{R}/paths-info/([^/]+)", self.paths_info),
                        (rf"/{R}/resolve/([^/]+)/(.+)", self.resolve),
                        (rf"/api/models/{R}/xet-read-token/([^/]+)", self.xet_token),
                        (r"/cdn/([0-9a-f]{64})", self.cdn)):
            m = re.fullmatch(pat, path)
            if m:
                return fn(*m.groups(), q=q)
        self._err(404, "NotFound", "no route")  # e.g. GET /api/agent-harnesses (harmless)

    def model_info(self, repo_id, rev, q):
        repo = self._repo(repo_id, rev or "main")
        if not repo:
            return
        blobs = q.get("blobs", ["false"])[0] == "true"  # files_metadata=True -> ?blobs=true
        sibs = []
        for e in repo["files"].values():
            s = {"rfilename": e["path"]}
            if blobs:
                s.update(size=e["size"], blobId=e["oid"])
                if e["lfs"]:
                    s["lfs"] = {"size": e["size"], "sha256": e["lfs"]["oid"], "pointerSize": e["lfs"]["pointerSize"]}
            sibs.append(s)
        self._json({"_id": "x", "id": repo_id, "modelId": repo_id, "sha": repo["sha"],
                    "private": repo_id in self.hub.private,
                    "gated": False, "disabled": False, "tags": ["gguf"], "siblings": sibs,
                    "lastModified": "2025-01-01T00:00:00.000Z"})

    def refs(self, repo_id, q):
        repo = self._repo(repo_id)
        if repo:
            self._json({"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": repo["sha"]}],
                        "converts": [], "tags": []})

    @staticmethod
    def _item(e):  # tree / paths-info entry; folders would be {"type":"directory","oid":..,"path":..}
        d = {"type": "file", "oid": e["oid"], "size": e["size"], "path": e["path"]}
        return {**d, "lfs": dict(e["lfs"])} if e["lfs"] else d

    def tree(self, repo_id, rev, sub, q):  # real Hub paginates: Link: <next>; rel="next" (1000/page)
        repo = self._repo(repo_id, rev)
        if repo:
            self._json([self._item(e) for p, e in repo["files"].items()
                        if not sub or p.startswith(sub.rstrip("/") + "/")])
            moved = self.hub.move_on_list.pop(repo_id, None)
            if moved:
                self.hub.add_repo(repo_id, moved[1], sha=moved[0])

    def paths_info(self, repo_id, rev, q):
        repo = self._repo(repo_id, rev)
        if repo:  # form-encoded body: paths=a&paths=b&expand=False
            form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
            self._json([self._item(repo["files"][p]) for p in form.get("paths", []) if p in repo["files"]])

    def resolve(self, repo_id, rev, fpath, q):
        repo = self._repo(repo_id, rev)
        if not repo:
            return
        e = repo["files"].get(fpath)
        common = {"X-Repo-Commit": repo["sha"], "Accept-Ranges": "bytes"}
        if e is None:
            return self._err(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo["sha"]})
        if e["lfs"] and self.hub.redirect_lfs:  # like the Hub: metadata on the 302 itself
            return self._send(302, b"", {**common, "ETag": f'"{e["oid"]}"',
                                         "Location": f"http://localhost:{self.hub.port}/cdn/{e['lfs']['oid']}",
                                         "X-Linked-Etag": f'"{e["lfs"]["oid"]}"', "X-Linked-Size": str(e["size"])})
        etag = e["lfs"]["oid"] if e["lfs"] else e["oid"]
        if e["lfs"] and repo_id in self.hub.xet:   # like the Hub for a Xet-backed file
            common.update({"X-Xet-Hash": e.get("xet_hash") or e["lfs"]["oid"],
                           "X-Xet-Refresh-Route":
                           f"{self.hub.endpoint}/api/models/{repo_id}/xet-read-token/{repo['sha']}"})
        self._bytes(repo_id, fpath, e["data"], {**common, "ETag": f'"{etag}"'})

    def xet_token(self, repo_id, rev, q):
        """The Hub's read token for a Xet-backed repo: where its CAS server is (here
        `xet_cas`; no Xet CAS is served, so a download from it fails as a dead CAS does)."""
        import time
        self._json({}, headers={"X-Xet-Cas-Url": self.hub.xet_cas, "X-Xet-Access-Token": "t",
                                "X-Xet-Token-Expiration": str(int(time.time()) + 3600)})

    def cdn(self, sha256, q):
        for rid, repo in self.hub.repos.items():
            for p, e in repo["files"].items():
                if e["lfs"] and e["lfs"]["oid"] == sha256:
                    return self._bytes(rid, p, e["data"], {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"})
        self._send(404, b"not found", ctype="text/plain")

    def _bytes(self, repo_id, fpath, data, headers):
        start, status = 0, 200
        stop = len(data)
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", (self.headers.get("Range") or "").strip())
        if m and self.command == "GET":
            start, status = int(m[1]), 206
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            stop = min(int(m[2]) + 1, len(data)) if m[2] else len(data)
            headers = {**headers, "Content-Range": f"bytes {start}-{stop - 1}/{len(data)}"}
        body = data[start:stop]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        n, times = self.hub.drop_after.get((repo_id, fpath), (0, 0))
        if times > 0:  # fault: n bytes, then kill the connection
            self.hub.drop_after[(repo_id, fpath)] = (n, times - 1)
            self.wfile.write(body[:n]); self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        pause = self.hub.slow.get((repo_id, fpath))
        if pause:
            import time
            try:
                for i in range(0, len(body), 4096):
                    self.wfile.write(body[i:i + 4096])
                    self.wfile.flush()
                    time.sleep(pause)
            except OSError:   # the client went away
                self.close_connection = True
            return
        self.wfile.write(body)
