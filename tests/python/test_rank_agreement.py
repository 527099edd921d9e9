"""What a collective call takes must be the same on every rank (Note [Ranks agree] in
framework/agreement.py): a misuse on one rank (pieces of different sizes without shape=, other
layouts or dtypes, each rank's own shard given to flow.tensor, another root or shape for a
collective, a model built without one seed, another checkpoint path) ends the call on every
rank with the same error, where it gave wrong values or a wait that never ended
(dist/agreement_worker.py)."""

from launching import launch

from oneflowlike.framework import agreement


def test_every_rank_refuses_what_the_ranks_do_not_agree_on(tmp_path):
    out = launch(2, "agreement_worker.py", str(tmp_path), timeout=180)
    for rank in (0, 1):
        assert f"rank {rank}: agreed 12" in out, out


def test_one_rank_checks_only_its_own_complaint():
    agreement.agree("op", {"shape": "(2,)"}, "rule")
    try:
        agreement.agree("op", {"shape": "(2,)"}, "rule", TypeError("[op] bad argument"))
    except TypeError as e:
        assert str(e) == "[op] bad argument"
    else:
        raise AssertionError("a complaint was not raised")
