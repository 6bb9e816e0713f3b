"""solo_geometry.runtime.distributed: collectives off inside a measurement, rank chunks, merging.

The protocol itself (agreement, gather, rank zero measuring) runs under real 2-process DDP in
tests/hosts/test_ddp.py; here its pieces, against hand-written references.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from solo_geometry.hosts.solo.losses import barlow_loss
from solo_geometry.hosts.solo.spec import frozen, merge_contexts
from solo_geometry.runtime.chunks import (
    PerRankHead,
    batch_norm_synced,
    global_head,
    rank_chunks,
    ranks_of,
    sync_batch_norm,
)
from solo_geometry.runtime.distributed import CollectiveInMeasurement, collectives_off


@pytest.fixture
def group() -> Iterator[None]:
    """A real (one-process) gloo process group."""
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _bn_head() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.SiLU(), nn.Linear(7, 3)).double()


class TestCollectivesOff:
    def test_uninitialised_and_collectives_raise_inside(self, group: None) -> None:
        before = dist.all_reduce
        t = torch.ones(2)
        with collectives_off():
            assert not dist.is_initialized()
            with pytest.raises(CollectiveInMeasurement, match="all_reduce"):
                dist.all_reduce(t)
            with pytest.raises(CollectiveInMeasurement, match="all_gather"):
                dist.all_gather([torch.zeros(2)], t)
        assert dist.is_initialized() and dist.all_reduce is before
        dist.all_reduce(t)  # works again
        assert t.tolist() == [1.0, 1.0]

    def test_other_threads_and_nesting_unaffected(self, group: None) -> None:
        seen: list[bool] = []
        with collectives_off():
            with collectives_off():
                assert not dist.is_initialized()
            assert not dist.is_initialized()  # still inside the outer block
            worker = threading.Thread(target=lambda: seen.append(dist.is_initialized()))
            worker.start()
            worker.join()
        assert seen == [True]

    def test_solo_gather_takes_its_single_process_path(self, group: None) -> None:
        misc = pytest.importorskip("solo.utils.misc", reason="solo-learn is not importable")
        x = torch.randn(3, 2, requires_grad=True)
        with collectives_off():
            out = misc.gather(x)
            assert misc.get_rank() == 0
        assert torch.equal(out, x)


class TestPerRank:
    def test_head_per_chunk_equals_batch_norm_of_each_chunk(self) -> None:
        head = _bn_head()
        x = torch.randn(8, 5, dtype=torch.float64)
        wrapped = global_head(head, ranks=2, rows=8)
        assert isinstance(wrapped, PerRankHead)
        expected = torch.cat([head(x[:4]), head(x[4:])])  # each rank's BatchNorm on its chunk
        assert torch.allclose(wrapped(x), expected, rtol=0, atol=1e-14)
        assert not torch.allclose(head(x), expected)  # the whole batch's statistics differ
        assert torch.equal(wrapped(x[:3]), head(x[:3]))  # other row counts: one call

    def test_heads_without_batch_norm_are_left_alone(self) -> None:
        head = nn.Sequential(nn.Linear(5, 3), nn.SiLU())
        assert global_head(head, ranks=2, rows=8) is head
        assert global_head(_bn_head(), ranks=1, rows=8) is not None

    def test_frozen_modules_act_per_chunk_within_ranks_of(self) -> None:
        head = _bn_head()
        x = torch.randn(8, 5, dtype=torch.float64)
        assert rank_chunks() == 1
        with ranks_of(2):
            assert rank_chunks() == 2
            got = frozen(head, x)
        assert rank_chunks() == 1
        assert torch.allclose(got, torch.cat([head(x[:4]), head(x[4:])]), rtol=0, atol=1e-14)
        assert torch.allclose(frozen(head, x), head(x), rtol=0, atol=1e-14)

    def test_barlow_standardises_each_rank_and_averages_the_correlation(self) -> None:
        torch.manual_seed(1)
        z1, z2 = torch.randn(8, 6, dtype=torch.float64), torch.randn(8, 6, dtype=torch.float64)
        lamb, scale = 0.05, 0.1

        def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            bn = [F.batch_norm(t, None, None, training=True, eps=1e-5) for t in (a, b)]
            return bn[0].T @ bn[1] / a.shape[0]  # (D, D), as barlow_loss_func on one rank

        corr = (reference(z1[:4], z2[:4]) + reference(z1[4:], z2[4:])) / 2  # all_reduce / 2
        on = (torch.diagonal(corr) - 1).pow(2).sum()
        off = (corr - torch.diag(torch.diagonal(corr))).pow(2).sum()
        with ranks_of(2):
            got = barlow_loss(z1, z2, lamb, scale)
        assert torch.isclose(got, scale * (on + lamb * off), rtol=1e-12)


class TestSyncBatchNorm:
    def test_detected_from_the_host_the_layers_or_the_trainer(self) -> None:
        import lightning.pytorch as pl

        module = pl.LightningModule()
        module.head = _bn_head()
        assert not sync_batch_norm(module)
        ddp = {
            "accelerator": "cpu",
            "devices": 2,
            "strategy": "ddp",
            "logger": False,
            "enable_checkpointing": False,  # built, never launched
        }
        module.trainer = pl.Trainer(**ddp)
        assert not sync_batch_norm(module)
        module.trainer = pl.Trainer(**ddp, sync_batchnorm=True)
        assert sync_batch_norm(module)  # the trainer says so before its strategy converts
        module.geometry_sync_batchnorm = False  # the host's declaration wins
        assert not sync_batch_norm(module)
        converted = nn.SyncBatchNorm.convert_sync_batchnorm(_bn_head())
        assert sync_batch_norm(converted) and not sync_batch_norm(_bn_head())

    def test_synced_modules_see_the_whole_batch(self, group: None) -> None:
        head = _bn_head()
        synced = nn.SyncBatchNorm.convert_sync_batchnorm(_bn_head()).train()
        x = torch.randn(8, 5, dtype=torch.float64)
        assert global_head(head, ranks=2, rows=8, synced=True) is head
        with collectives_off(), ranks_of(2, synced=True):  # as rank zero measures
            assert batch_norm_synced() and rank_chunks() == 2
            got, plain = frozen(synced, x), frozen(head, x)
        assert not batch_norm_synced()
        expected = head(x)  # BatchNorm with the statistics of all 8 rows
        assert torch.allclose(got, expected, rtol=0, atol=1e-14)
        assert torch.allclose(plain, expected, rtol=0, atol=1e-14)
        assert not torch.allclose(expected, torch.cat([head(x[:4]), head(x[4:])]))


class TestMergeContexts:
    def test_per_sample_concatenated_shared_from_rank_zero(self) -> None:
        a = {
            "idx": torch.tensor([0, 1]),
            "t": [torch.zeros(2, 3), torch.ones(2, 3)],
            "queue": torch.full((2, 3, 5), 7.0),
            "asg": torch.zeros(4, 2),
        }
        b = {
            "idx": torch.tensor([2, 3]),
            "t": [torch.ones(2, 3), torch.zeros(2, 3)],
            "queue": torch.full((2, 3, 5), 7.0),
            "asg": torch.ones(4, 2),
        }
        out = merge_contexts([a, b], shared=("queue",), dims={"asg": 1})
        assert out["idx"].tolist() == [0, 1, 2, 3]
        assert [t.shape for t in out["t"]] == [(4, 3), (4, 3)]
        assert out["t"][0][:2].eq(0).all() and out["t"][0][2:].eq(1).all()
        assert out["queue"] is a["queue"]
        assert out["asg"].shape == (4, 4) and out["asg"][:, 2:].eq(1).all()

    def test_unmergeable_entry_is_an_error(self) -> None:
        with pytest.raises(TypeError, match="'pos'"):
            merge_contexts([{"pos": nn.Identity()}, {"pos": nn.Identity()}])
