"""Convolution and pooling from the DSL (argus/kernels/conv.py, issue 22): the implicit-GEMM
2-D convolution is proved for symbolic sizes and matches a direct float64 convolution in the
strict emulator across stride, padding, dilation, window and epilogue; max and average
pooling likewise (padding counted as -inf for max, as zeros for the average)."""

from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import argus
from argus.kernels.conv import conv2d, conv2d_reference, phase_view, pool2d

CONV_CASES = [
    # (n, h, w, c, oc, window, stride, padding, dilation, activation)
    (1, 5, 7, 8, 32, (3, 3), 1, 1, 1, "relu"),
    (2, 6, 9, 16, 64, (3, 3), 2, 1, 1, "none"),
    (1, 7, 6, 8, 32, (2, 2), 1, 0, 2, "sigmoid"),
    (1, 4, 130, 8, 32, (1, 3), 1, 1, 1, "none"),          # a row longer than one block
]


def test_conv2d_is_proved_for_symbolic_sizes():
    report = argus.verify(conv2d, window=(3, 3), stride=2, padding=1)
    assert report.ok and report.proved_for_all_sizes, str(report)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[:5])) +
                         f"-k{c[5][0]}{c[5][1]}-s{c[6]}-p{c[7]}-d{c[8]}-{c[9]}")
def test_conv2d_matches_direct_convolution(case):
    n, h, w, c, oc, window, stride, padding, dilation, activation = case
    rng = np.random.default_rng(h * w + c)
    x = rng.standard_normal((n, h, w, c)).astype(bfloat16)
    weight = rng.standard_normal((*window, oc, c)).astype(bfloat16)
    bias = rng.standard_normal(oc).astype(np.float32)
    want = conv2d_reference(x, weight, bias, stride=stride, padding=padding,
                            dilation=dilation, activation=activation)
    compiled = argus.compile(conv2d, window=window, stride=stride, padding=padding,
                             dilation=dilation, activation=activation)
    y = np.zeros(want.shape, np.float32)
    compiled.run(phase_view(x, stride), weight, bias, y, check="strict")
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4 * max(1, np.abs(want).max()))


def _pool_reference(x, kind, k, s, p):
    nc, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    pad = np.full((nc, h + 2 * p + s * oh, w + 2 * p + s * ow), -np.inf if kind == "max" else 0.0)
    pad[:, p:p + h, p:p + w] = x
    out = np.full((nc, oh, ow), -np.inf) if kind == "max" else np.zeros((nc, oh, ow))
    for i in range(k):
        for j in range(k):
            window = pad[:, i:i + s * oh:s, j:j + s * ow:s]
            out = np.maximum(out, window) if kind == "max" else out + window / (k * k)
    return out


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("nc,h,w,k,s,p", [(3, 8, 10, 2, 2, 0), (2, 7, 9, 3, 1, 1),
                                          (2, 9, 70, 3, 2, 1)])
def test_pool2d_matches_numpy(kind, nc, h, w, k, s, p):
    x = np.random.default_rng(h + w).standard_normal((nc, h, w)).astype(np.float32)
    want = _pool_reference(x, kind, k, s, p)
    compiled = argus.compile(pool2d, kind=kind, window=(k, k), stride=s, padding=p, height=h,
                             width=w)
    y = np.zeros(want.shape, np.float32)
    compiled.run(phase_view(x[..., None], s)[..., 0], y, check="strict")
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_pool2d_is_proved_for_symbolic_sizes():
    report = argus.verify(pool2d, kind="max", window=(3, 3), stride=2, padding=1)
    assert report.ok and report.proved_for_all_sizes, str(report)


@pytest.mark.parametrize("n,h,w,c,k,s,p,d", [(2, 6, 9, 70, 3, 1, 1, 1), (1, 8, 8, 64, 3, 2, 1, 1),
                                             (1, 7, 7, 16, 2, 1, 0, 2)])
def test_depthwise_conv2d_matches_numpy(n, h, w, c, k, s, p, d):
    from argus.kernels.conv import depthwise_conv2d

    rng = np.random.default_rng(c + k)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    weight = rng.standard_normal((k, k, c)).astype(np.float32)
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    pad = np.zeros((n, h + 2 * p + s * oh, w + 2 * p + s * ow, c))
    pad[:, p:p + h, p:p + w] = x
    want = sum(pad[:, i * d:i * d + s * oh:s, j * d:j * d + s * ow:s] * weight[i, j]
               for i in range(k) for j in range(k))
    params = dict(window=(k, k), stride=s, padding=p, dilation=d)
    assert argus.verify(depthwise_conv2d, **params).proved_for_all_sizes
    y = np.zeros((n, oh, ow, c), np.float32)
    argus.compile(depthwise_conv2d, **params).run(phase_view(x, s), weight, y, check="strict")
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
