"""`python -m sparkctl check` and the fleet's checkpoint fan-out: it says what the fan-out will do, and refuses,
naming the setting and the box, a fleet that could not give every box its checkpoints: an AIRGAPPED box that keeps a
checkpoint no box with a route to the Hub keeps, a CHECKPOINT_SEED_BOX not in the inventory or AIRGAPPED."""

from __future__ import annotations

import pytest

from sparkctl.__main__ import main
from sparkctl.config.hosts import HostConn, with_models
from sparkctl.errors import SparkctlError
from tests.conftest import FAKE_LOCK

LOCK = f"MODEL_LOCK_FILE={FAKE_LOCK}"


@pytest.fixture
def fleet(token_file, monkeypatch):
    monkeypatch.setenv("GX10_HOSTS", "spark-1,spark-2,spark-3")
    monkeypatch.delenv("SPARK_CODING_MODELS", raising=False)
    monkeypatch.delenv("SPARK_AIRGAPPED", raising=False)
    return monkeypatch


def test_the_check_says_how_the_checkpoints_fan_out(fleet, capsys):
    assert main(["check", "--data", LOCK]) == 0
    out = capsys.readouterr().out
    assert "fleet: checkpoint fan-out: 5 downloads from the Hub, 10 copies box to box in 2 rounds" in out


def test_an_airgapped_box_is_fine_while_a_box_with_a_route_keeps_the_same_checkpoints(fleet, capsys):
    fleet.setenv("SPARK_AIRGAPPED", "spark-1,spark-3")
    assert main(["check", "--data", LOCK]) == 0, capsys.readouterr().err


def test_a_fleet_of_airgapped_boxes_only_is_refused_naming_the_box_and_the_checkpoint(fleet, capsys):
    fleet.setenv("SPARK_AIRGAPPED", "spark-1,spark-2,spark-3")
    assert main(["check", "--data", LOCK]) == 2
    err = capsys.readouterr().err
    assert "sparkctl check: fleet: AIRGAPPED of spark-1 = True is not valid" in err
    assert "BAAI/bge-m3@" in err and "no reachable source can provide it" in err


@pytest.mark.parametrize("value,expected", [
    ("spark-9", "CHECKPOINT_SEED_BOX = 'spark-9' is not valid; expected \"\" (the first box that keeps it) or a box "
                "of the inventory (spark-1, spark-2, spark-3)"),
    ("spark-2", "CHECKPOINT_SEED_BOX = 'spark-2' is not valid; expected a box that is not AIRGAPPED"),
])
def test_a_seed_box_not_in_the_inventory_or_airgapped_is_refused(fleet, capsys, value, expected):
    fleet.setenv("SPARK_AIRGAPPED", "spark-2")
    assert main(["check", "--data", LOCK, "--data", f"CHECKPOINT_SEED_BOX={value}"]) == 2
    assert expected in capsys.readouterr().err


def test_spark_airgapped_is_host_data_and_an_unknown_box_is_refused():
    hosts = [HostConn(name="spark-1", address="a"), HostConn(name="spark-2", address="b")]
    marked = with_models(hosts, {"SPARK_AIRGAPPED": "spark-2"})
    assert [h.data.get("AIRGAPPED") for h in marked] == [None, True]
    assert marked[1].pyinfra_data()["AIRGAPPED"] is True
    with pytest.raises(SparkctlError, match=r"SPARK_AIRGAPPED names \['spark-9'\], not in the inventory"):
        with_models(hosts, {"SPARK_AIRGAPPED": "spark-9"})


def test_the_fanout_key_is_a_key_of_its_own(fleet, capsys):
    assert main(["check", "--data", LOCK, "--data", "CHECKPOINT_FANOUT_KEY=cx7-sync"]) == 2
    assert "CHECKPOINT_FANOUT_KEY = 'cx7-sync' is not valid; expected a key name other than CHECKPOINT_SYNC_KEY's" \
        in capsys.readouterr().err


@pytest.mark.parametrize("value, says", [
    ("-1", "CHECKPOINT_FANOUT_BWLIMIT_KIB_S = -1 is not valid; expected a whole number of KiB/s from 0"),
    ("1.5", "CHECKPOINT_FANOUT_BWLIMIT_KIB_S = 1.5 is not valid; expected a whole number of KiB/s"),
    ('"fast"', "CHECKPOINT_FANOUT_BWLIMIT_KIB_S = 'fast' is not valid"),
])
def test_the_copy_rate_is_a_whole_number_of_kib_per_second(fleet, capsys, value, says):
    assert main(["check", "--data", LOCK, "--data", f"CHECKPOINT_FANOUT_BWLIMIT_KIB_S={value}"]) == 2
    assert says in capsys.readouterr().err
