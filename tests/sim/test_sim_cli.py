"""`python -m sparkctl sim ...`: the command line the README and the tests drive the simulated Spark with."""

import re

from sparkctl.sim import config


def test_cli_parser_has_the_contract_commands():
    from sparkctl.__main__ import build_parser

    p = build_parser()
    for argv in (["sim", "up", "--hosts", "2", "--flavor", "ubuntu", "--flavor-of", "spark-2=dgx"], ["sim", "down"],
                 ["sim", "down", "--purge"], ["sim", "status"], ["sim", "ssh", "spark-1", "true"],
                 ["sim", "exec", "spark-1", "true"], ["sim", "reboot", "spark-1"]):
        assert callable(p.parse_args(argv).func)
    assert p.parse_args(["sim", "up", "--hosts", "4", "--gateway", "spark-4"]).gateway == ["spark-4"]
    assert re.match(r"spark-\d", config.instance_name(3))
