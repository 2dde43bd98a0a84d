"""tools/publish.py against a mock Hub on 127.0.0.1 (tests/mock_hub.py): a publish uploads exactly the folder's model
files, byte for byte, the repo then loads by its id through huggingface_hub's download and cache code with the Hub
offline, a dry run uploads nothing, and a folder that is not ready is refused before anything goes up. Only the files
of the model's manifest go up, any symbolic link is refused, and nothing goes up without a yes."""

import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from transformers import AutoModel

from helpers import ENV, ROOT, saved_arm_trunk
from mock_hub import GITATTRIBUTES, serve
from shared_modeling.amoe import Arm, Dispatch, save_arm, save_dispatch
from shared_modeling.identity import trunk_hash
from tools import publish, registry

TOKEN = "hf_mock_write_token"
PREFIX = "test-org"
REPO = f"{PREFIX}/captionbert-8192-v2"
ROSTER = ["paraphrase", "equiv"]
TEXTS = ["A dog runs across the grass.", "two men play chess in a park"]
CARD = "---\nlibrary_name: transformers\nlicense: apache-2.0\n---\n\n# captionbert-8192-v2 (a tiny test model)\n"
# Files a working folder picks up that are not the model: none of them may go up.
NOT_MODEL = {"__pycache__/modeling_captionbert.cpython-311.pyc": b"\x00compiled",
             ".cache/huggingface/download/model.safetensors.lock": b"",
             ".ipynb_checkpoints/README-checkpoint.md": b"# an old card",
             "amoe/arms/.DS_Store": b"\x00",
             "runs/demo/metrics.json": b"{}",
             "export-check/run.json": b"{}", "export-check/metrics.json": b"{}",
             "checkpoint.pt": b"\x80pickle", "pytorch_model.bin": b"\x80pickle", "model.safetensors.tmp": b"",
             "._model.safetensors": b"\x00", "tensorboard/events.out.tfevents.1700000000.host.1.0": b"\x00",
             "wandb/latest-run/logs/debug.log": b"", "run.json": b"{}",
             # what the old allow-list's patterns (*.py, config*.json, *.safetensors) let through
             "secrets.py": b"HF_TOKEN = 'hf_secret'", "config.local.json": b'{"token": "hf_secret"}',
             "optimizer_state.safetensors": b"\x00state", "amoe/arms/draft.safetensors": b"\x00not listed"}
SNAPSHOT = "import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))"
LOAD_BY_ID = textwrap.dedent("""
    import importlib.util, json, sys
    from transformers import AutoModel
    assert importlib.util.find_spec("shared_modeling") is None, "the project must not be importable here"
    model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
    embeddings = model.encode(json.loads(sys.argv[2])).tolist()
    model.attach_amoe()  # amoe/ through the Hub code path: snapshot_download(allow_patterns=amoe/...)
    print(json.dumps({"embeddings": embeddings, "roster": model.detach_amoe()["dispatch"].roster}))
""")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(folder, {path: bytes} of its model files, embeddings of TEXTS): a tiny captionbert-8192-v2 as make demo leaves
    it (its remote code and tokenizer, weights, a two-arm AMOE library, a card newer than the weights), with caches,
    hidden files and run folders planted beside the model files."""
    folder = saved_arm_trunk(tmp_path_factory.mktemp("bundle") / "captionbert-8192-v2")
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    torch.manual_seed(1)
    for name in ROSTER:
        save_arm(folder / "amoe" / "arms" / f"{name}.safetensors", Arm(64, 2), name, trunk_hash(model), {})
    save_dispatch(folder / "amoe" / "collective" / "dispatch.safetensors", Dispatch(ROSTER, 64, 2), trunk_hash(model))
    (folder / "amoe" / "arms" / "ARMS.json").write_text(json.dumps(
        {"collective": "collective", "roster": ROSTER, "arms": {name: {"file": f"arms/{name}.safetensors"}
                                                                for name in ROSTER}}))
    (folder / "README.md").write_text(CARD)
    model_files = {path.relative_to(folder).as_posix(): path.read_bytes()
                   for path in sorted(folder.rglob("*")) if path.is_file()}
    for name, content in NOT_MODEL.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    return folder, model_files, model.encode(TEXTS)


def hub_env(hub, hf_home):
    """A user's environment pointed at the mock: online, no token, LFS instead of Xet for large files."""
    env = {**ENV, "HF_ENDPOINT": hub.url, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1"}
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        env.pop(name, None)
    return env


def run(args, env, cwd=ROOT):
    completed = subprocess.run([sys.executable, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


@pytest.mark.slow
def test_without_a_token_it_checks_and_lists_the_folder_and_uploads_nothing(tiny, tmp_path):
    folder, model_files, _ = tiny
    with serve(TOKEN) as hub:
        output = run(["-m", "tools.publish", "--repo-prefix", PREFIX, "--folders", folder],
                     hub_env(hub, tmp_path / "hf-home"))
        assert hub.requests == []
    assert "no Hugging Face token" in output and output.rstrip().endswith("dry run: nothing uploaded")
    assert f"{REPO}  <-  {folder}" in output
    assert "README.md: no run records found for this folder" in output  # a hand-made folder: its card is unchecked
    listed = {name: size for size, name in re.findall(r"^ +([\d,]+)  (\S+)$", output, flags=re.MULTILINE)}
    assert listed == {name: f"{len(content):,}" for name, content in model_files.items()}
    total = sum(map(len, model_files.values()))
    assert f"{len(model_files)} files, {total:,} bytes" in output
    assert f"not uploaded (not in the model's manifest): {', '.join(sorted(NOT_MODEL))}" in output
    assert f"its AMOE arms {ROSTER} attach" in output


@pytest.mark.slow
def test_publish_uploads_exactly_the_folder_and_the_repo_loads_by_id_offline(tiny, tmp_path):
    folder, model_files, expected = tiny
    hf_home, record = tmp_path / "hf-home", tmp_path / "record"
    with serve(TOKEN) as hub:
        # An earlier publish left a collective this folder no longer has, and an older card.
        hub.seed(REPO, {"amoe/old-collective/dispatch.safetensors": b"stale", "README.md": b"# old card"})
        run(["-m", "tools.publish", "--repo-prefix", PREFIX, "--folders", folder, "--token", TOKEN, "--private",
             "--yes", "--out", record], hub_env(hub, hf_home))
        head = hub.repos[REPO].head
        assert head.files == {**model_files, ".gitattributes": GITATTRIBUTES}  # byte for byte, nothing else
        assert {"model.safetensors", "amoe/collective/dispatch.safetensors", *(f"amoe/arms/{name}.safetensors"
                                                                               for name in ROSTER)} == head.lfs
        assert hub.create_payloads == [{"name": "captionbert-8192-v2", "organization": PREFIX,
                                        "visibility": "private"}]

        published = json.loads((record / "publish.json").read_text())
        [repo] = published["repos"]
        commit = hub.repos[REPO].commits[-1]
        assert repo["repo_id"] == REPO and repo["commit_oid"] == commit
        assert repo["commit_url"] == f"{hub.url}/{REPO}/commit/{commit}"
        assert repo["deleted"] == ["amoe/old-collective/dispatch.safetensors"]
        assert repo["files"] == {name: {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
                                 for name, content in model_files.items()}
        assert not any(TOKEN in path.read_text() for path in record.iterdir())

        run(["-c", SNAPSHOT, REPO], hub_env(hub, hf_home))  # online, into the temporary HF_HOME
        requests = len(hub.requests)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        offline = {**{key: value for key, value in hub_env(hub, hf_home).items() if key != "PYTHONPATH"},
                   "HF_HUB_OFFLINE": "1"}
        loaded = json.loads(run(["-c", LOAD_BY_ID, REPO, json.dumps(TEXTS)], offline, cwd=elsewhere).splitlines()[-1])
        assert len(hub.requests) == requests  # the load used the cache only
    np.testing.assert_allclose(np.array(loaded["embeddings"]), expected, atol=1e-6, rtol=0)
    assert loaded["roster"] == ROSTER


def edit_a_vendored_copy(folder):
    (folder / "shared_layers.py").write_text((folder / "shared_layers.py").read_text() + "\n# edited by hand\n")


@pytest.mark.parametrize("spoil, message", [
    (edit_a_vendored_copy, r"differs from its source: captionbert-8192-v2/shared_layers.py \(run `make vendor`\)"),
    (lambda folder: (folder / "model.safetensors").unlink(),
     r"no model.safetensors \(`make demo` builds it, `make release` ships it"),
    (lambda folder: shutil.rmtree(folder / "amoe" / "arms"), r"no amoe/arms/\*.safetensors"),
    (lambda folder: (folder / "README.md").write_text("# a card\n"), "README.md does not start with YAML front matter"),
    (lambda folder: (folder / "tokenizer_config.json").write_text('{"local_files_only": true}'),
     r"tokenizer_config.json records where it was loaded from: local_files_only"),
], ids=["drifted-vendored-code", "no-weights", "no-arms", "card-without-front-matter",
        "tokenizer-config-of-this-machine"])
def test_a_folder_that_is_not_ready_is_refused(tiny, tmp_path, spoil, message):
    folder = shutil.copytree(tiny[0], tmp_path / "captionbert-8192-v2")
    spoil(folder)
    with pytest.raises(SystemExit, match=f"not published; fix these first:\n  captionbert-8192-v2: {message}"):
        publish.main(["--repo-prefix", PREFIX, "--folders", str(folder), "--dry-run"])


@pytest.mark.parametrize("args, message", [
    (["--repo-prefix", "a/b"], "--repo-prefix 'a/b' does not make a valid repo id"),
    (["--repo-prefix", PREFIX, "--folders", str(ROOT / "tools")], "not one of the bundle's Hub folders"),
    (["--repo-prefix", PREFIX, "--token", TOKEN], "HF_HUB_OFFLINE is set"),  # conftest sets it for the suite
])
def test_bad_arguments_are_refused_with_a_clear_message(args, message):
    with pytest.raises(SystemExit, match=message):
        publish.main(args)


def test_the_manifest_publishes_every_file_of_the_hub_folders_and_nothing_else(tmp_path):
    """Each Hub folder's tracked files go up (the AMOE library as its ARMS.json lists it); files a run or a person
    leaves beside them do not, and are listed as not uploaded."""
    for pipeline in registry.PIPELINES:
        name = pipeline.folder
        tracked = subprocess.run(["git", "ls-files", name], cwd=ROOT, capture_output=True, text=True, check=True)
        model_files = {path.removeprefix(f"{name}/") for path in tracked.stdout.split()}
        for file in model_files | set(NOT_MODEL):
            (tmp_path / name / file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / file).touch()
        if (pipeline.path / "amoe" / "arms" / "ARMS.json").is_file():
            shutil.copy(pipeline.path / "amoe" / "arms" / "ARMS.json", tmp_path / name / "amoe" / "arms")
        files, skipped = publish.published_files(tmp_path / name)
        assert set(files) == model_files and set(skipped) == set(NOT_MODEL), name
        assert publish.missing_files(tmp_path / name, files) == [], name


def test_a_folder_publishes_the_weights_layout_it_holds_and_a_half_layout_is_missing_files(tmp_path):
    """geolip's weights moved from one model.safetensors to the base's file, the memory's and their index: a folder
    publishes whichever layout it holds whole, and one holding neither is told the current layout's missing files."""
    folder = tmp_path / registry.GEOLIP.folder
    folder.mkdir()
    for name in registry.GEOLIP.files:
        (folder / name).touch()
    (folder / "memory.safetensors").touch()  # half the current layout
    assert publish.missing_files(folder, publish.published_files(folder)[0]) == [
        f"no {name} (`make demo` builds it, `make release` ships it into the folder)"
        for name in ("base.safetensors", "model.safetensors.index.json")]
    (folder / "model.safetensors").touch()  # the former layout, whole
    files, skipped = publish.published_files(folder)
    assert "model.safetensors" in files and skipped == ["memory.safetensors"]
    for name in ("base.safetensors", "model.safetensors.index.json"):
        (folder / name).touch()
    files, skipped = publish.published_files(folder)  # both whole: the first listed (a release removes the other)
    assert "model.safetensors" in files and "base.safetensors" in skipped


@pytest.mark.parametrize("target", ["outside", ".hidden-token"])
def test_every_symbolic_link_is_refused(tmp_path, target):
    """A link out of the folder, or to a hidden file inside it: either would publish what it points to."""
    folder = tmp_path / "captionbert-8192-v2"
    folder.mkdir()
    (tmp_path / "outside").write_bytes(b"not this folder's")
    (folder / ".hidden-token").write_bytes(b"hf_secret")
    (folder / "model.safetensors").symlink_to(folder / target if target.startswith(".") else tmp_path / target)
    with pytest.raises(SystemExit, match="symbolic links model.safetensors: what they point to would be published"):
        publish.published_files(folder)


class Terminal(io.StringIO):
    """stdin as a person at a terminal types it."""

    def isatty(self):
        return True


def test_an_upload_without_a_terminal_needs_yes(tmp_path, monkeypatch):
    (tmp_path / "captionbert-8192-v2").mkdir()
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    monkeypatch.setattr(publish.constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(SystemExit, match="no terminal to confirm the upload on: pass --yes"):
        publish.main(["--repo-prefix", PREFIX, "--folders", str(tmp_path / "captionbert-8192-v2"), "--token", TOKEN])


@pytest.mark.slow
def test_at_a_terminal_nothing_goes_up_without_a_yes(tiny, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    with serve(TOKEN) as hub:
        monkeypatch.setattr(publish.constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(publish.constants, "HF_HUB_OFFLINE", False)
        with pytest.raises(SystemExit, match="nothing uploaded"):
            publish.main(["--repo-prefix", PREFIX, "--folders", str(tiny[0]), "--token", TOKEN])
        assert hub.requests == []
    assert f"upload to {hub.url}: {REPO}? [y/N] " in capsys.readouterr().out
