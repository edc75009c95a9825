"""`sim up --gateway NAME`: which instances are the fleet's front door instead of boxes, refused before any
instance starts when the names cannot work (without booting one)."""

import pytest

from sparkctl.errors import SparkctlError
from sparkctl.sim import api, config, instance

NAMES = ["spark-1", "spark-2", "spark-3", "spark-4"]


def test_the_named_instances_are_gateways_and_the_rest_boxes():
    assert api._roles(NAMES, [], ("spark-4",)) == {"spark-1": "box", "spark-2": "box", "spark-3": "box",
                                                   "spark-4": "gateway"}
    assert set(api._roles(NAMES, [], ()).values()) == {"box"}


@pytest.mark.parametrize("gateways, says", [
    (("spark-5",), "--gateway spark-5 is not valid; expected one of spark-1, spark-2, spark-3, spark-4"),
    (("spark-4 ",), "--gateway spark-4  is not valid"),  # a name with a stray space is no instance
    (tuple(NAMES), "leaves no box"),
])
def test_gateway_names_that_cannot_work_are_refused(gateways, says):
    with pytest.raises(SparkctlError, match=says.replace("(", r"\(")):
        api._roles(NAMES, [], gateways)


def test_a_running_instance_keeps_its_role(tmp_path, monkeypatch):
    """Its disk holds what its role's deploy installed: changing it means `sim down` first."""
    monkeypatch.setattr(config, "RUN_DIR", tmp_path)
    monkeypatch.setattr(config, "instance_dir", lambda n: tmp_path / n)
    instance.set_role("spark-4", "gateway")
    assert instance.role_of("spark-4") == "gateway" and instance.role_of("spark-3") == "box"
    with pytest.raises(SparkctlError, match="spark-4 is running as a gateway, not a box; run `python -m sparkctl "
                                            "sim down` first"):
        api._roles(NAMES, ["spark-4"], ())
    assert api._roles(NAMES, ["spark-4"], ("spark-4",))["spark-4"] == "gateway"
