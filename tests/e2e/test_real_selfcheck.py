"""Proof that the both-ways comparisons can fail: the emulator is given a deliberate
bug (through its admin config, never on otherwise) and the very assertions that
tests/e2e/test_real_kube.py runs against the emulator and the real kube-apiserver must
then reject it.  Without this, a comparison that passes both ways could be one that
checks nothing.
"""
import pytest

from real_fixtures import EmulatorView
from test_real_kube import assert_crds_and_generation


def test_emulator_that_forgets_generation_fails_the_comparison(kubeapi):
    k = EmulatorView(kubeapi)
    assert_crds_and_generation(k)          # the healthy emulator passes ...
    k.client.delete("source.toolkit.fluxcd.io/v1", "ocirepositories", "gen", k.namespace)
    kubeapi.configure(break_generation=True)
    with pytest.raises(AssertionError) as caught:
        assert_crds_and_generation(k)      # ... the broken one does not
    # and it fails for the reason planted, on the spec change (1 where 2 is right)
    msg = str(caught.value)
    assert "generation after a spec change" in msg and "1 == 2" in msg, msg
