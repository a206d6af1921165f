"""`deskside up` pushing a model folder of this machine (fake nodes): a link inside the
folder arrives as the file it points to; a link out of it stops the deploy at preflight,
exit 2, before anything is pushed."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_deploy_pipeline import ROOT_DIR, Cluster


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_link_out_of_the_model_folder_stops_the_deploy_before_any_push(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path)
    victim = tmp_path / "private.txt"
    victim.write_text("not the model's\n")
    link = tmp_path / "models" / "tiny-deepseek-v3" / "leak.txt"
    link.symlink_to(victim)
    report = c.deploy()
    assert not report.ok and report.failed_stage == "preflight"
    assert report.exit_code == 2
    assert f"{link} is a link to {victim}, outside the folder" in (report.error or "")
    assert "cp -rL" in (report.hint or "")
    assert not [e for e in c.journal.entries if e[1] in ("put", "spawn")]


def test_a_link_inside_the_model_folder_arrives_as_its_contents(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    model = tmp_path / "models" / "tiny-deepseek-v3"
    (model / "config-again.json").symlink_to("config.json")
    report = c.deploy()
    assert report.ok, (report.error, report.hint)
    pushed = f"{ROOT_DIR}/ssh-tiny/models/tiny-deepseek-v3"
    for host in c.hosts:
        assert host.files[f"{pushed}/config-again.json"] == (model / "config.json").read_bytes()
        assert host.modes.get(f"{pushed}/config-again.json", 0o644) == 0o644
