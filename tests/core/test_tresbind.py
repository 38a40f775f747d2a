"""The TresBind grammar Slurm's controller checks (--tres-bind, --gpu-bind, scontrol update TresBind=)."""

from __future__ import annotations

import pytest

from wattsched import tresbind


@pytest.mark.parametrize("text", [
    "", "gres/gpu:closest", "gres/gpu:verbose,closest", "gres/gpu:none", "gres/gpu:single:2", "gres/gpu:per_task:1",
    "gres/gpu:map_gpu:0,1", "gres/gpu:map:", "gres/gpu:map:0*2", "gres/gpu:mask_gpu:0x3,0xc", "gres/gpu:mask:abc",
    "gres/gpu:mask:0x1*2", "gres/shard:per_task:2", "gres/mps:none", "gres/gpu:closest+gres/shard:none",
    "gres/gpu:MAP_GPU:1",
])
def test_bindings_slurm_takes_are_taken(text: str) -> None:
    assert tresbind.valid(text)


@pytest.mark.parametrize("text", [
    # the lists 23.11 let through by starting four characters late, refused whole since 26.05
    "gres/gpu:map:abcd", "gres/gpu:map:0x00", "gres/gpu:mask:x000", "gres/gpu:mask:wxyz",
    "gres/gpu:map_gpu:z", "gres/gpu:map_gpu:0,1z", "gres/gpu:map:1*x", "gres/gpu:map:99999999999999999999",
    "gpu:closest", "gres/gpu", "gres/gpu:bogus", "gres/shard:closest", "gres/gpu:single:-1",
    "cpu:closest", "gres/gpu:closest+bogus", "gres/gpu:map:" + "1," * 600,
])
def test_malformed_bindings_are_refused(text: str) -> None:
    assert not tresbind.valid(text)
