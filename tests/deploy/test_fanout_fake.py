"""The checkpoint fan-out as the whole deploy runs it (pyinfra's @fake connector, two boxes): an AIRGAPPED box copies
every checkpoint from the other box and never from the Hub, its token not installed; the
boxes let each other copy only a read-only rrsync of the model store; a fleet whose every box is AIRGAPPED is
refused before a single command reaches a box."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.deploy.test_wheelhouse_fake import stand_in_cache
from tests.render.test_topologies import cmds, copy_sources, fetches, run_pair


def with_wheels(tmp_path) -> tuple[str, str]:
    """An AIRGAPPED box installs vLLM from the control machine's wheelhouse alone: a complete one here (else the
    deploy refuses it for its wheels before its checkpoints are planned)."""
    stand_in_cache(tmp_path / "wheels")
    return "--data", f"WHEELHOUSE_CACHE={tmp_path / 'wheels'}"


@pytest.fixture(scope="module")
def gapped(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_AIRGAPPED", "spark-2")
    try:
        tmp = tmp_path_factory.mktemp("gapped")
        return run_pair(tmp, "replicas", *with_wheels(tmp), "--data", "CHECKPOINT_FANOUT_BWLIMIT_KIB_S=51200")
    finally:
        mp.undo()


def test_an_airgapped_box_copies_everything_from_the_other_box_and_never_asks_the_hub(gapped):
    copies = fetches(gapped, "spark-2")
    assert len(copies) == 5
    for c in copies:
        assert copy_sources(c) == ["@fake/spark-1=root@@fake/spark-1"]
        argv = shlex.split(c)
        assert "--hub" not in argv and "--cache-dir" not in argv  # no Hub fallback (the script then never imports
        # huggingface_hub; its environment also says HF_HUB_OFFLINE=1, which @fake does not record)
        assert argv[argv.index("--rsync-bwlimit") + 1] == "51200"  # CHECKPOINT_FANOUT_BWLIMIT_KIB_S, KiB/s
    assert not any("--copy" in c for c in fetches(gapped, "spark-1"))  # spark-1 downloads, once
    assert not any("/etc/sparkctl/hf_token" in c and ("cat >" in c or "mv " in c) for c in cmds(gapped, "spark-2"))


def test_each_box_lets_the_others_copy_a_read_only_rrsync_of_the_model_store(gapped):
    for box in ("spark-1", "spark-2"):
        line = [c for c in cmds(gapped, box) if "sparkctl-fleet-sync' >> /root/.ssh/authorized_keys" in c]
        assert len(line) == 1, cmds(gapped, box)
        assert 'restrict,from="@fake/spark-1,@fake/spark-2' in line[0]
        assert 'command="rrsync -ro /srv/models"' in line[0]
        assert any("/root/.ssh/sparkctl-fleet-sync" in c and "chmod 600" in c for c in cmds(gapped, box))


def test_a_fleet_of_airgapped_boxes_only_is_refused_before_any_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_AIRGAPPED", "spark-1,spark-2")
    out = run_pair(tmp_path, "replicas", *with_wheels(tmp_path))
    # whichever box pyinfra reaches first is refused first (its hosts run concurrently): either names itself
    assert re.search(r"AIRGAPPED of @fake/spark-[12] = True is not valid", out["log"]), out["log"]
    assert "no reachable source can provide it" in out["log"]
    assert not any("fetch_checkpoint.py" in c or "apt-get" in c for c in out["commands"])
