"""`llamay pull / list / show / rm` end to end against a registry on 127.0.0.1, and -m by stored name."""
import pytest

from llamay.cli.main import main
from store_servers import FakeRegistry


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    return tmp_path / "home"


def test_pull_list_rm_and_a_failed_pull(home, monkeypatch, capsys):
    with FakeRegistry() as reg:
        monkeypatch.setenv("LLAMAY_REGISTRY", reg.url)
        reg.add_model("library/tiny", "1b")
        assert main(["pull", "tiny:1b"]) == 0
        assert "pulled tiny:1b" in capsys.readouterr().out
        assert main(["list"]) == 0
        assert "tiny:1b" in capsys.readouterr().out
        assert main(["pull", "missing:1b"]) == 1
        assert "does not exist" in capsys.readouterr().err
    assert main(["rm", "tiny:1b"]) == 0
    capsys.readouterr()
    assert main(["list"]) == 0
    assert "tiny:1b" not in capsys.readouterr().out
    assert not [p for p in (home / "models" / "blobs").iterdir() if p.stat().st_size > 1000]


@pytest.mark.model
def test_run_takes_a_stored_name(home, smollm_path, capsys):
    from llamay.store import Store
    from llamay.store.names import parse_name
    store = Store()
    digest = store.add_file(smollm_path)
    store.write_manifest(parse_name("smol:test"), store.make_manifest(digest, smollm_path.stat().st_size))
    assert main(["run", "-m", "smol:test", "-p", "The capital of France is", "-n", "3", "--temp", "0"]) == 0
    by_name = capsys.readouterr().out
    assert main(["run", "-m", str(smollm_path), "-p", "The capital of France is", "-n", "3", "--temp", "0"]) == 0
    assert capsys.readouterr().out == by_name
    assert main(["run", "-p", "The capital of France is", "-n", "3", "--temp", "0"]) == 0  # the first stored
    assert capsys.readouterr().out == by_name
