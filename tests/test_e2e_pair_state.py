"""How the scenarios' fixtures know whether the pair is as the group data says (no simulated Spark needed): a deploy
with anything of its own leaves the boxes it reached unsure, only a plain one that succeeded settles them."""

from __future__ import annotations

from tests.e2e.conftest import PairState, plain, targets


def test_a_limit_reaches_its_boxes_and_no_limit_the_whole_pair():
    assert targets(("-y", "--limit", "spark-1", "inventory.py", "deploy.py")) == ("spark-1",)
    assert targets(("-y", "--limit", "spark-1,spark-2", "inventory.py", "deploy.py")) == ("spark-1", "spark-2")
    assert targets(("-y", "inventory.py", "deploy.py")) == ("spark-1", "spark-2")


def test_only_the_readme_command_with_nothing_added_is_plain():
    assert plain(("-y", "inventory.py", "deploy.py"), None)
    assert plain(("-y", "--limit", "spark-2", "inventory.py", "deploy.py"), {})
    assert not plain(("-y", "--data", "CODING_MODEL=laguna-s-2.1", "inventory.py", "deploy.py"), None)
    assert not plain(("-y", "--limit", "spark-1", "--data", "X=1", "inventory.py", "deploy.py"), None)
    assert not plain(("-y", "inventory.py", "deploy.py"), {"SPARK_CODING_MODELS": "spark-2=laguna-s-2.1"})
    assert not plain(("--dry", "--json", "inventory.py", "deploy.py"), None)


def test_a_box_is_unsure_until_a_plain_deploy_settles_it():
    pair = PairState()
    assert pair.unsure == {"spark-1", "spark-2"}  # nothing is known before the first converge
    pair.settled()
    pair.disturbed("spark-1")
    assert pair.unsure == {"spark-1"}
    pair.settled("spark-2")
    assert pair.unsure == {"spark-1"}
    pair.settled("spark-1")
    assert not pair.unsure
