"""tpe+local (`tuner.search.tpe_local`): TPE, then best-first neighbourhood search."""

import pytest

from tuner.search.tpe_local import TpeLocalStrategy


def test_tpe_share_must_be_a_fraction():
    with pytest.raises(ValueError, match="tpe_share must be within"):
        TpeLocalStrategy(tpe_share=1.5)
