"""The ConvNet of section 6.7 with batch norm at batch size 1 (summary B's "BN collapses at batch
1"): its output must still depend on its input, or a "collapse" would be the architecture's."""
from __future__ import annotations

import torch

from layernorm_paper.data.registry import load_dataset
from layernorm_paper.reproduce import experiments  # noqa: F401  (registers the models)
from layernorm_paper.reproduce.models import convnet


def _logit_spread(m, x: torch.Tensor, batch: int) -> float:
    """Mean over classes of the logits' std across the inputs, fed in batches of ``batch``
    (training mode: batch norm uses the statistics of each batch)."""
    with torch.no_grad():
        out = torch.cat([m(x[i:i + batch]) for i in range(0, len(x), batch)])
    return float(out.std(0).mean())


def test_bn_convnet_output_at_batch_one_depends_on_its_input():
    torch.manual_seed(0)
    ds = load_dataset("digits-image", split_seed=0, limit_train=128, limit_test=8)
    x = ds.x_train[:128]
    m = convnet(ds, "batch", channels=(16, 32, 32), unbiased=True).train()
    assert m.features(x[:1]).shape[-2:] == (2, 2)     # the 8x8 digits end on a 2x2 map
    at_1, at_128 = _logit_spread(m, x, 1), _logit_spread(m, x, 128)
    # Anchor: the same weights at batch 128. With global average pooling after the last BN the
    # batch-1 spread is about a tenth of it (each channel's pooled pre-ReLU value is exactly β);
    # a model mapping every input to the same logits has spread 0.
    assert at_1 > 0.5 * at_128, (at_1, at_128)
    # ... and the other norms do not depend on the batch at all
    for norm in ("none", "layer"):
        other = convnet(ds, norm, channels=(16, 32, 32)).train()
        assert abs(_logit_spread(other, x, 1) - _logit_spread(other, x, 128)) < 1e-5


def test_bn_at_batch_one_removes_each_channels_spatial_mean():
    """Why the head is not global average pooling: at batch 1 the BN output's spatial mean per
    channel is its bias, whatever the image (the premise of the flattened head)."""
    torch.manual_seed(1)
    ds = load_dataset("digits-image", split_seed=0, limit_train=8, limit_test=8)
    m = convnet(ds, "batch", channels=(4, 8)).train()
    bn = m.features[-2][1]
    with torch.no_grad():
        bn.bias.uniform_(-1, 1)
        pre = m.features[:-1](ds.x_train[:1])          # the last BN's output, before the ReLU
    torch.testing.assert_close(pre.mean((2, 3))[0], bn.bias.detach(), atol=1e-5, rtol=0)
    # the flattened head sees every position: its input width is channels x positions
    assert m.head.in_features == 8 * pre.shape[-2] * pre.shape[-1]
