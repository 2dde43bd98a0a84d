"""shared_modeling: attention dispatch, pooling, geometry gauges and losses, checked against known values."""

import math

import pytest
import torch

from shared_modeling.geometry import cayley_menger_volume, erank, orthogonal_procrustes, pentachoron_cv, self_cos
from shared_modeling.identity import embedding_space
from shared_modeling.layers import Encoder, TokenLayout, attention
from shared_modeling.losses import (pentachoron_cv_loss, per_sample_mse, procrustes_residual,
                                    symmetric_info_nce)
from shared_modeling.pooling import l2_normalize, masked_mean_pool


def test_sdpa_and_eager_agree_and_ignore_padded_keys():
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 7, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 2:] = False
    sdpa = attention(q, k, v, mask, "sdpa")
    eager = attention(q, k, v, mask, "eager")
    torch.testing.assert_close(sdpa, eager, rtol=1e-10, atol=1e-10)
    # Changing what sits under the padding must not change any output.
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 5:] += 100.0
    v2[2, :, 2:] -= 50.0
    torch.testing.assert_close(attention(q, k2, v2, mask, "sdpa"), sdpa, rtol=1e-10, atol=1e-10)
    # No mask equals an all-true mask.
    full = torch.ones(3, 7, dtype=torch.bool)
    torch.testing.assert_close(attention(q, k, v, None, "eager"), attention(q, k, v, full, "eager"))
    with pytest.raises(ValueError, match="flash"):
        attention(q, k, v, mask, "flash")


def test_encoder_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    encoder = Encoder(num_layers=2, hidden_size=16, num_heads=4, intermediate_size=32, layer_norm_eps=1e-12,
                      dropout=0.0).double().eval()
    short = torch.randn(1, 5, 16, dtype=torch.float64)
    padded = torch.cat([short, torch.randn(1, 3, 16, dtype=torch.float64)], dim=1)
    mask = torch.tensor([[True] * 5 + [False] * 3])
    for implementation in ("sdpa", "eager"):
        out_short = encoder(short, torch.ones(1, 5), implementation)
        out_padded = encoder(padded, mask, implementation)
        torch.testing.assert_close(out_padded[:, :5], out_short, rtol=1e-10, atol=1e-10)
        assert out_padded[:, 5:].abs().sum() == 0  # padded positions come back as zeros


def test_token_layout_packs_real_tokens_and_restores_the_grid():
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0], [1, 1, 1, 1]])  # right, both-side and no padding
    grid = torch.arange(12.0).view(3, 4, 1) + 1
    layout = TokenLayout(mask)
    packed = layout.pack(grid)
    assert packed.squeeze(1).tolist() == [1, 2, 3, 6, 7, 9, 10, 11, 12]
    torch.testing.assert_close(layout.unpack(packed), grid * mask.unsqueeze(-1))
    assert layout.key_padding_mask.tolist() == mask.bool().tolist()
    unpadded = TokenLayout(torch.ones(2, 3))
    assert unpadded.key_padding_mask is None and unpadded.pack(torch.zeros(2, 3, 5)).shape == (6, 5)


def test_masked_mean_pool_values():
    states = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[5.0, 6.0], [0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(masked_mean_pool(states, mask), torch.tensor([[2.0, 3.0], [5.0, 6.0]]))
    assert masked_mean_pool(states, torch.zeros(2, 3)).abs().sum() == 0  # no NaN for an empty row


def test_l2_normalize():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    torch.testing.assert_close(l2_normalize(x), torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


def test_self_cos_values():
    assert self_cos(torch.ones(10, 5) * 3) == pytest.approx(1.0)
    assert self_cos(torch.eye(6)) == pytest.approx(0.0, abs=1e-12)
    # Three rows: cos(a, b) = 0.5, cos(a, c) = 0, cos(b, c) = sqrt(3)/2  -> mean of the three pairs.
    rows = torch.tensor([[1.0, 0.0], [0.5, math.sqrt(3) / 2], [0.0, 2.0]])
    assert self_cos(rows) == pytest.approx((0.5 + 0.0 + math.sqrt(3) / 2) / 3)
    torch.manual_seed(0)
    assert abs(self_cos(torch.randn(2000, 64))) < 0.01  # isotropic cloud
    with pytest.raises(ValueError):
        self_cos(torch.ones(1, 4))


def test_erank_values():
    torch.manual_seed(0)
    isotropic = torch.randn(20000, 64)
    assert erank(isotropic) == pytest.approx(64, rel=0.02)
    low_rank = torch.randn(500, 3) @ torch.randn(3, 64)
    assert erank(low_rank) <= 3 + 1e-9
    assert erank(torch.randn(500, 1) @ torch.randn(1, 64)) == pytest.approx(1.0)
    # Two orthogonal directions with variances 1 and 1/4 (std 1 and 1/2): PR = (1 + 1/4)^2 / (1 + 1/16) = 1.4706
    signs = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    scaled = signs * torch.tensor([1.0, 0.5])
    assert erank(scaled) == pytest.approx((1 + 0.25) ** 2 / (1 + 0.0625))


def test_symmetric_info_nce_values():
    # Orthonormal pairs, cosine 1 on the diagonal and 0 elsewhere: loss = log(1 + (B-1) e^{-1/T}).
    batch, temperature = 4, 0.5
    eye = torch.eye(batch)
    expected = math.log(1 + (batch - 1) * math.exp(-1 / temperature))
    assert symmetric_info_nce(eye, eye, temperature).item() == pytest.approx(expected, rel=1e-6)
    # Scale does not matter (rows are normalised), and it is symmetric in its arguments.
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    assert symmetric_info_nce(a * 7, b, 0.07).item() == pytest.approx(symmetric_info_nce(a, b, 0.07).item(), rel=1e-5)
    assert symmetric_info_nce(a, b, 0.07).item() == pytest.approx(symmetric_info_nce(b, a, 0.07).item(), rel=1e-6)
    # Very high temperature -> uniform softmax -> log(B).
    assert symmetric_info_nce(a, b, 1e6).item() == pytest.approx(math.log(8), rel=1e-4)
    with pytest.raises(ValueError):
        symmetric_info_nce(a, b, 0.0)


def test_per_sample_mse_values():
    predictions = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    targets = torch.tensor([[1.0, 0.0], [3.0, 1.0]])
    torch.testing.assert_close(per_sample_mse(predictions, targets), torch.tensor([2.0, 5.0]))


def test_encoder_trains_through_the_packed_path():
    torch.manual_seed(0)
    encoder = Encoder(num_layers=2, hidden_size=16, num_heads=4, intermediate_size=32, layer_norm_eps=1e-12,
                      dropout=0.1).train()
    hidden = torch.randn(2, 6, 16, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    masked_mean_pool(encoder(hidden, mask, "sdpa"), mask).pow(2).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in encoder.parameters())
    assert hidden.grad[0, 4:].abs().sum() == 0 and hidden.grad[0, :4].abs().sum() > 0  # padding gets no gradient


def test_cayley_menger_volume_of_a_regular_simplex_equals_the_closed_form():
    # A regular n-simplex of edge a has volume a^n / n! * sqrt((n + 1) / 2^n); n = 4: a^4 sqrt(5) / 96.
    # The 5 unit basis vectors of R^5 are one, with edge sqrt(2), embedded here in R^7 and moved around.
    vertices = torch.cat([torch.eye(5, dtype=torch.float64), torch.zeros(5, 2, dtype=torch.float64)], dim=1)
    rotation = torch.linalg.qr(torch.randn(7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))).Q
    for edge in (math.sqrt(2), 3.0):
        points = vertices * edge / math.sqrt(2) @ rotation + torch.randn(7, dtype=torch.float64)
        assert math.isclose(cayley_menger_volume(points).item(), edge ** 4 * math.sqrt(5) / 96, rel_tol=1e-9)
    flat = vertices.clone()
    flat[4] = (flat[0] + flat[1]) / 2  # a vertex on an edge: no 4-volume
    batch = cayley_menger_volume(torch.stack([vertices, flat]))
    assert batch.shape == (2,) and batch[1].item() < 1e-6 and math.isclose(batch[0].item(), math.sqrt(5) / 24)
    with pytest.raises(ValueError, match="5 vertices"):
        cayley_menger_volume(vertices[:4])


def test_pentachoron_cv_is_scale_free_and_zero_for_equal_volumes():
    cloud = torch.randn(40, 16, dtype=torch.float64)
    first = pentachoron_cv(cloud, 256, torch.Generator().manual_seed(1))
    scaled = pentachoron_cv(cloud * 7.5, 256, torch.Generator().manual_seed(1))
    assert 0 < first.item() and math.isclose(first.item(), scaled.item(), rel_tol=1e-9)
    simplex = torch.eye(5, dtype=torch.float64)  # every 5-subset is the same regular simplex
    assert pentachoron_cv(simplex, 8).item() < 1e-9
    with pytest.raises(ValueError, match="at least 5 points"):
        pentachoron_cv(cloud[:4], 8)


def test_orthogonal_procrustes_recovers_a_rotation_and_a_semi_orthogonal_map():
    generator = torch.Generator().manual_seed(3)
    source = torch.randn(200, 8, dtype=torch.float64, generator=generator)
    rotation = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64, generator=generator)).Q
    torch.testing.assert_close(orthogonal_procrustes(source, source @ rotation), rotation)
    wide = torch.linalg.qr(torch.randn(12, 8, dtype=torch.float64, generator=generator)).Q.T  # (8, 12)
    found = orthogonal_procrustes(source, source @ wide + 0.01 * torch.randn(200, 12, dtype=torch.float64,
                                                                                generator=generator))
    torch.testing.assert_close(found @ found.T, torch.eye(8, dtype=torch.float64))
    assert (found - wide).abs().max() < 0.01


def test_procrustes_residual_is_zero_for_an_isometric_copy_and_trains():
    generator = torch.Generator().manual_seed(4)
    student = torch.randn(64, 8, dtype=torch.float64, generator=generator, requires_grad=True)
    wide = torch.linalg.qr(torch.randn(12, 8, dtype=torch.float64, generator=generator)).Q.T
    assert procrustes_residual(student, student.detach() @ wide).item() < 1e-20
    unrelated = torch.randn(64, 12, dtype=torch.float64, generator=generator)
    loss = procrustes_residual(student, unrelated)
    assert loss.item() > 0.5
    loss.backward()
    assert torch.isfinite(student.grad).all() and student.grad.abs().sum() > 0


def test_pentachoron_cv_loss_pulls_toward_its_target():
    generator = torch.Generator().manual_seed(5)
    sets = [torch.randn(7, 16, dtype=torch.float64, generator=generator, requires_grad=True) for _ in range(3)]
    cv = [pentachoron_cv(points, 64, torch.Generator().manual_seed(9)).item() for points in sets]
    exact = pentachoron_cv_loss(sets[:1], cv[0], 64, torch.Generator().manual_seed(9))
    assert exact.item() < 1e-20  # the same subsets at the set's own CV
    loss = pentachoron_cv_loss(sets, 0.0, 64, generator)
    assert loss.item() > 0
    loss.backward()
    assert all(torch.isfinite(points.grad).all() and points.grad.abs().sum() > 0 for points in sets)
    with pytest.raises(ValueError, match="no point set"):
        pentachoron_cv_loss([], 0.1, 8)


def test_embedding_space_covers_the_config_fields_that_run_the_weights():
    from transformers import RobertaConfig  # glyph's config class; captionbert's and geolip's declare theirs alike

    weights = "ab" * 32
    config = RobertaConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128)
    space = embedding_space(weights, config=config)
    assert len(space) == 12 and space != embedding_space(weights) == weights[:12]
    renamed = RobertaConfig(**{**config.to_dict(), "_name_or_path": "elsewhere/copy"})
    assert embedding_space(weights, config=renamed) == space  # where it was loaded from is not its behaviour
    for field, value in (("num_attention_heads", 8), ("layer_norm_eps", 1e-5)):  # tensors keep their shapes
        edited = RobertaConfig(**{**config.to_dict(), field: value})
        assert embedding_space(weights, config=edited) != space, field
