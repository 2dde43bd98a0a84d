"""An in-memory Hugging Face Hub on 127.0.0.1 for the publishing tests: exactly the endpoints huggingface_hub 2.3.0
calls to create a repo and commit files to it, and then to download them again (snapshot_download / hf_hub_download).

Upload (HfApi.create_repo, HfApi.list_repo_files, HfApi.create_commit):
    POST /api/repos/create                                   {"name", "organization", "visibility"?} -> {"url"}; 409 if
                                                             the repo exists (create_repo(exist_ok=True) accepts that)
    POST /api/validate-yaml                                  the README.md check create_commit makes first
    POST /api/models/<org>/<name>/preupload/<revision>       per file: "regular" (sent inline) or "lfs"
    POST /<org>/<name>.git/info/lfs/objects/batch            LFS batch API: an upload href per object not stored yet
    PUT  /lfs/<sha256>                                       one LFS object (its sha256 is checked)
    POST /api/models/<org>/<name>/commit/<revision>          NDJSON: a header line, then "file" (base64 content),
                                                             "lfsFile" (an uploaded oid) and "deletedFile" lines
Download (HfApi.repo_info, HfApi.list_repo_tree, hf_hub_download):
    GET  /api/models/<org>/<name>/revision/<revision>        {"id", "sha", "siblings"}
    GET  /api/models/<org>/<name>/tree/<revision>            every file (recursive) with its blob id and LFS info
    HEAD/GET /<org>/<name>/resolve/<revision>/<path>         the file, with X-Repo-Commit and ETag (and X-Linked-Etag,
                                                             X-Linked-Size for LFS files)

Writes need `Authorization: Bearer <token>`. A new repo starts, as on the Hub, with one commit holding .gitattributes.
Xet storage, which huggingface_hub uses for LFS-mode files whenever hf_xet is installed, is not served: clients must
run with HF_HUB_DISABLE_XET=1, which sends those files through the LFS batch API above.
"""

import base64
import contextlib
import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

# Files the Hub's default .gitattributes stores in LFS (a subset), and the size from which any file goes to LFS.
LFS_SUFFIXES = (".bin", ".gguf", ".h5", ".msgpack", ".npy", ".npz", ".onnx", ".pt", ".pth", ".safetensors", ".zip")
LFS_MIN_BYTES = 10 * 2**20
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES).encode()

ROUTES = Map([
    Rule("/api/repos/create", methods=["POST"], endpoint="create_repo"),
    Rule("/api/validate-yaml", methods=["POST"], endpoint="validate_yaml"),
    Rule("/api/models/<namespace>/<name>/preupload/<revision>", methods=["POST"], endpoint="preupload"),
    Rule("/<namespace>/<name>.git/info/lfs/objects/batch", methods=["POST"], endpoint="lfs_batch"),
    Rule("/lfs/<oid>", methods=["PUT"], endpoint="lfs_upload"),
    Rule("/api/models/<namespace>/<name>/commit/<revision>", methods=["POST"], endpoint="commit"),
    Rule("/api/models/<namespace>/<name>/revision/<revision>", methods=["GET"], endpoint="revision"),
    Rule("/api/models/<namespace>/<name>/tree/<revision>", methods=["GET"], endpoint="tree"),
    Rule("/<namespace>/<name>/resolve/<revision>/<path:filename>", methods=["GET"], endpoint="resolve"),  # and HEAD
])


def git_blob_id(content):
    """The git blob sha1 of `content`: a regular file's oid and ETag on the Hub."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def goes_to_lfs(path, size):
    return PurePosixPath(path).suffix in LFS_SUFFIXES or size >= LFS_MIN_BYTES


@dataclass
class Snapshot:
    files: dict  # path -> bytes
    lfs: frozenset  # the paths stored as LFS objects


@dataclass
class Repo:
    private: bool
    commits: list = field(default_factory=list)  # commit oids, oldest first
    snapshots: dict = field(default_factory=dict)  # commit oid -> Snapshot

    def commit_at(self, revision):
        """The commit oid `revision` names ("main": the latest), or None."""
        return self.commits[-1] if revision == "main" else revision if revision in self.snapshots else None

    @property
    def head(self):
        return self.snapshots[self.commits[-1]]


class MockHub:
    """The server's state: repos by id, stored LFS objects, and what arrived."""

    def __init__(self, token):
        self.token = token  # the only token writes accept
        self.repos = {}  # repo id -> Repo
        self.lfs_objects = {}  # sha256 hex -> bytes
        self.requests = []  # (method, path) of every request
        self.create_payloads = []  # the body of every create-repo request, also for repos that existed
        self.url = None  # http://127.0.0.1:<port>, set by serve()

    def seed(self, repo_id, files):
        """Create `repo_id` and commit `files` ({path: bytes}) to it, as an earlier upload would have left it."""
        repo = self._new_repo(repo_id, private=False)
        files = {**repo.head.files, **files}
        self._commit(repo, repo_id, Snapshot(files, frozenset(p for p in files if goes_to_lfs(p, len(files[p])))),
                     "seed")

    def _new_repo(self, repo_id, private):
        repo = self.repos[repo_id] = Repo(private=private)
        self._commit(repo, repo_id, Snapshot({".gitattributes": GITATTRIBUTES}, frozenset()), "initial commit")
        return repo

    def _commit(self, repo, repo_id, snapshot, summary):
        digest = hashlib.sha1(json.dumps([repo_id, repo.commits[-1:], summary]).encode())
        for path in sorted(snapshot.files):
            digest.update(path.encode() + git_blob_id(snapshot.files[path]).encode())
        oid = digest.hexdigest()
        repo.commits.append(oid)
        repo.snapshots[oid] = snapshot
        return oid

    # ---- WSGI -------------------------------------------------------------------------------------------------------

    def __call__(self, environ, start_response):
        request = Request(environ)
        self.requests.append((request.method, request.path))
        try:
            endpoint, arguments = ROUTES.bind_to_environ(environ).match()
        except HTTPException:
            response = error(404, f"no mock endpoint for {request.method} {request.path}")
        else:
            if "namespace" in arguments:
                arguments["repo_id"] = f"{arguments.pop('namespace')}/{arguments.pop('name')}"
            response = getattr(self, endpoint)(request, **arguments)
        return response(environ, start_response)

    def _refuse_write(self, request, repo_id=None):
        """The error response for a write without the token or to a missing repo, else None."""
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return error(401, "Invalid credentials in Authorization header")
        if repo_id is not None and repo_id not in self.repos:
            return error(404, f"Repository not found: {repo_id}", "RepoNotFound")
        return None

    # ---- upload -----------------------------------------------------------------------------------------------------

    def create_repo(self, request):
        if refused := self._refuse_write(request):
            return refused
        payload = request.get_json(force=True)
        self.create_payloads.append(payload)
        if not payload.get("organization"):
            return error(400, "this mock needs a namespace: <organization>/<name>")
        repo_id = f"{payload['organization']}/{payload['name']}"
        url = f"{request.host_url}{repo_id}"
        if repo_id in self.repos:
            return json_response({"error": "You already created this model repo", "url": url}, 409)
        self._new_repo(repo_id, private=payload.get("visibility") == "private")
        return json_response({"url": url, "name": repo_id})

    def validate_yaml(self, request):
        return json_response({"errors": [], "warnings": []})

    def preupload(self, request, repo_id, revision):
        if refused := self._refuse_write(request, repo_id):
            return refused
        modes = [{"path": item["path"], "shouldIgnore": False,
                  "uploadMode": "lfs" if goes_to_lfs(item["path"], item["size"]) else "regular"}
                 for item in request.get_json(force=True)["files"]]
        return json_response({"files": modes})

    def lfs_batch(self, request, repo_id):
        if refused := self._refuse_write(request, repo_id):
            return refused
        objects = []
        for item in request.get_json(force=True)["objects"]:
            entry = {"oid": item["oid"], "size": item["size"], "authenticated": True}
            if item["oid"] not in self.lfs_objects:  # no "actions": the client skips the upload
                entry["actions"] = {"upload": {"href": f"{request.host_url}lfs/{item['oid']}"}}
            objects.append(entry)
        return json_response({"transfer": "basic", "objects": objects})

    def lfs_upload(self, request, oid):
        content = request.get_data()
        if hashlib.sha256(content).hexdigest() != oid:
            return error(400, f"the uploaded content does not hash to {oid}")
        self.lfs_objects[oid] = content
        return Response(status=200)

    def commit(self, request, repo_id, revision):
        if refused := self._refuse_write(request, repo_id):
            return refused
        if revision != "main":
            return error(400, "this mock commits to main only")
        lines = [json.loads(line) for line in request.get_data().decode().splitlines() if line.strip()]
        if not lines or lines[0]["key"] != "header":
            return error(400, "the commit payload must start with a header line")
        repo = self.repos[repo_id]
        files, lfs = dict(repo.head.files), set(repo.head.lfs)
        for line in lines[1:]:
            kind, value = line["key"], line["value"]
            if kind == "file":
                files[value["path"]] = base64.b64decode(value["content"])
                lfs.discard(value["path"])
            elif kind == "lfsFile":
                if value["oid"] not in self.lfs_objects:
                    return error(400, f"LFS object {value['oid']} of {value['path']} was never uploaded")
                files[value["path"]] = self.lfs_objects[value["oid"]]
                lfs.add(value["path"])
            elif kind == "deletedFile":
                if files.pop(value["path"], None) is None:
                    return error(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
                lfs.discard(value["path"])
            else:
                return error(400, f"this mock does not take {kind!r} operations")
        oid = self._commit(repo, repo_id, Snapshot(files, frozenset(lfs)), lines[0]["value"]["summary"])
        return json_response({"success": True, "commitOid": oid,
                              "commitUrl": f"{request.host_url}{repo_id}/commit/{oid}"})

    # ---- download ---------------------------------------------------------------------------------------------------

    def _find(self, repo_id, revision):
        """(commit oid, Snapshot, None), or (None, None, the error response)."""
        repo = self.repos.get(repo_id)
        if repo is None:
            return None, None, error(404, f"Repository not found: {repo_id}", "RepoNotFound")
        sha = repo.commit_at(revision)
        if sha is None:
            return None, None, error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return sha, repo.snapshots[sha], None

    def revision(self, request, repo_id, revision):
        sha, snapshot, failure = self._find(repo_id, revision)
        if failure:
            return failure
        return json_response({"id": repo_id, "sha": sha, "private": self.repos[repo_id].private,
                              "siblings": [{"rfilename": path} for path in sorted(snapshot.files)]})

    def tree(self, request, repo_id, revision):
        sha, snapshot, failure = self._find(repo_id, revision)
        if failure:
            return failure
        entries = []
        for path, content in sorted(snapshot.files.items()):
            entry = {"type": "file", "path": path, "size": len(content), "oid": git_blob_id(content)}
            if path in snapshot.lfs:
                entry["lfs"] = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 134}
            entries.append(entry)
        return json_response(entries)

    def resolve(self, request, repo_id, revision, filename):
        sha, snapshot, failure = self._find(repo_id, revision)
        if failure:
            return failure
        if filename not in snapshot.files:
            response = error(404, f"Entry not found: {filename}", "EntryNotFound")
        else:
            content = snapshot.files[filename]
            response = Response(content, content_type="application/octet-stream")
            if filename in snapshot.lfs:
                sha256 = hashlib.sha256(content).hexdigest()
                response.headers["ETag"] = response.headers["X-Linked-Etag"] = f'"{sha256}"'
                response.headers["X-Linked-Size"] = str(len(content))
            else:
                response.headers["ETag"] = f'"{git_blob_id(content)}"'
        response.headers["X-Repo-Commit"] = sha
        return response


def json_response(payload, status=200):
    return Response(json.dumps(payload), status=status, content_type="application/json")


def error(status, message, code=None):
    response = json_response({"error": message}, status)
    if code is not None:
        response.headers["X-Error-Code"] = code
    return response


@contextlib.contextmanager
def serve(token):
    """A MockHub answering on 127.0.0.1 at a free port (hub.url) for the duration of the block."""
    hub = MockHub(token)
    server = make_server("127.0.0.1", 0, hub, threaded=True)
    hub.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        thread.join()
