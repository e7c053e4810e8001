"""The convolution family (argus/kernels/conv.py `conv_kernel`, issue 22): random configurations
over 1-D/2-D/3-D, stride, padding, dilation, groups (depthwise and pointwise included),
transposed convolution, both engines and random fused epilogues, each variant proved for
symbolic sizes and matching a direct float64 numpy convolution in the strict emulator; max
and average pooling 1-3-D likewise. The configurations come from a seeded generator, so a
failure names a configuration that reruns exactly."""

from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import argus
from argus.errors import ArgusError
from argus.kernels.conv import (
    conv_engine,
    conv_input_view,
    conv_kernel,
    conv_output_size,
    conv_output_view,
    conv_reference_nd,
    conv_taps,
    engine_layout,
    from_phase_view,
    output_layout,
    output_shape,
    pool_input_view,
    pool_kernel,
    pool_reference_nd,
    pool_runs_kernel,
    pool_runs_view,
)

#: (dims, engine, kind): every kind the issue names, in each dimension count
KINDS = [
    (1, "fma", "strided"), (1, "fma", "dilated"), (1, "fma", "grouped"),
    (1, "fma", "depthwise"), (1, "fma", "pointwise"), (1, "fma", "transposed"),
    (1, "mfma", "strided"), (1, "mfma", "transposed"),
    (2, "fma", "plain"), (2, "fma", "strided"), (2, "fma", "dilated"), (2, "fma", "grouped"),
    (2, "fma", "depthwise"), (2, "fma", "pointwise"), (2, "fma", "transposed"),
    (2, "mfma", "grouped"),
    (3, "fma", "plain"), (3, "fma", "strided"), (3, "fma", "depthwise"),
    (3, "fma", "pointwise"), (3, "fma", "transposed"), (3, "mfma", "dilated"),
    # the f32 MFMA engine: channel tails (any CG, OCG), two channel tiles per wave
    (1, "mfma_f32", "transposed"), (2, "mfma_f32", "strided"), (3, "mfma_f32", "grouped"),
    # its 16x16 variant for groups of at most 16 output channels
    (1, "mfma_f32_16", "grouped"),
]
ACTIVATIONS = ("relu", "sigmoid", "tanh", "gelu")


def draw(index: int) -> dict:
    """Configuration `index`: its kind from KINDS, the rest drawn from a generator seeded by
    `index` (small sizes: the strict emulator runs every lane)."""
    dims, engine, kind = KINDS[index]
    rng = np.random.default_rng(1000 + index)

    def per_dim(lo, hi):
        return tuple(int(v) for v in rng.integers(lo, hi + 1, dims))

    window = (1,) * dims if kind == "pointwise" else per_dim(2, 3 if dims < 3 else 2)
    stride = per_dim(1, 2) if kind in ("strided", "transposed", "pointwise") else (1,) * dims
    if kind in ("strided", "transposed") and max(stride) == 1:
        stride = (2, *stride[1:])
    if dims == 3 and kind == "transposed":
        stride = (1, 1, 2)      # eight output phases would lower slowly; one strided axis
    dilation = per_dim(1, 2) if kind in ("dilated", "transposed") else (1,) * dims
    transposed = kind == "transposed"
    padding = tuple(int(rng.integers(0, (d * (k - 1)) // 2 + 1)) for k, d in
                    zip(window, dilation, strict=True))
    if engine == "mfma":
        groups, cg, ocg = (2 if kind == "grouped" else 1), 8, 32
    elif kind == "depthwise":
        groups, cg, ocg = int(rng.integers(2, 6)), 1, int(rng.integers(1, 3))
    elif kind == "grouped":
        groups, cg, ocg = int(rng.integers(2, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
    else:
        groups, cg, ocg = 1, int(rng.integers(1, 4)), int(rng.integers(1, 7))
    lo, hi = {1: (5, 12), 2: (3, 7), 3: (2, 4)}[dims]
    spatial = tuple(max(int(rng.integers(lo, hi + 1)), d * (k - 1) + 1 - 2 * p)
                    for k, d, p in zip(window, dilation, padding, strict=True))
    steps = ["bias", "residual", str(rng.choice(ACTIVATIONS)), ("scale", 0.75),
             ("clamp", -1.5, 2.0)]
    chosen = rng.permutation(len(steps))[:int(rng.integers(0, 4))]
    epilogue = tuple(steps[i] for i in sorted(chosen))
    config = dict(dims=dims, engine=engine, n=int(rng.integers(1, 3)), spatial=spatial,
                  groups=groups, cg=cg, ocg=ocg, window=window, stride=stride, padding=padding,
                  dilation=dilation, transposed=transposed, epilogue=epilogue)
    if engine == "mfma_f32" and not transposed:
        config["tiles"] = (1, 2)
    if engine == "mfma_f32" and dims == 1:
        config["n"] = 5             # two blocks of MFMA_WAVES images, the second one a tail
    if engine == "fma":
        # position tiles (slots past the first 64 positions) and channel slots, as
        # `conv_engine` picks them for depthwise (4, 1) and a depthwise multiplier (1, 4)
        config["tiles"] = [(1, 1), (4, 1), (1, 4), (2, 2)][index % 4]
    return config


CONFIGS = [draw(i) for i in range(len(KINDS))]


def _output_padding(c: dict) -> tuple[int, ...]:
    """torch's output_padding for a transposed configuration: 1 on each axis where it is
    legal (below the stride or the dilation), so the output's far end is exercised too."""
    if not c["transposed"]:
        return (0,) * c["dims"]
    return tuple(1 if max(s, d) > 1 else 0 for s, d in
                 zip(c["stride"], c["dilation"], strict=True))


def _id(c: dict) -> str:
    return (f"{c['dims']}d-{c['engine']}-{'T' if c['transposed'] else 'F'}-"
            f"g{c['groups']}x{c['cg']}x{c['ocg']}-k{c['window']}-s{c['stride']}-"
            f"p{c['padding']}-d{c['dilation']}").replace(" ", "")


def test_the_configurations_cover_every_kind():
    """The drawn configurations include every case the family promises."""
    assert len(CONFIGS) >= 20
    assert {c["dims"] for c in CONFIGS} == {1, 2, 3}
    assert any(c["transposed"] and max(c["stride"]) > 1 for c in CONFIGS)
    assert any(c["groups"] > 1 and c["cg"] == 1 for c in CONFIGS)             # depthwise
    assert any(c["groups"] > 1 and c["cg"] > 1 for c in CONFIGS)              # grouped
    assert any(set(c["window"]) == {1} for c in CONFIGS)                      # pointwise
    assert any(max(c["dilation"]) > 1 for c in CONFIGS)
    assert any(max(c["padding"]) > 0 for c in CONFIGS)
    assert {c["engine"] for c in CONFIGS} == {"fma", "mfma", "mfma_f32", "mfma_f32_16"}
    assert any(c.get("tiles", (1, 1)) != (1, 1) for c in CONFIGS)
    steps = {s if isinstance(s, str) else s[0] for c in CONFIGS for s in c["epilogue"]}
    assert {"bias", "residual", "scale", "clamp"} <= steps


@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_conv_family_is_proved_and_matches_numpy(config):
    c = config
    dims, engine, epilogue = c["dims"], c["engine"], c["epilogue"]
    params = dict(window=c["window"], stride=c["stride"], padding=c["padding"],
                  dilation=c["dilation"], transposed=c["transposed"])
    if "tiles" in c:
        params["tiles"] = c["tiles"]
    kernel = conv_kernel(dims, engine, epilogue)
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)

    rng = np.random.default_rng(len(_id(c)))
    dtype = bfloat16 if engine == "mfma" else np.float32
    x = rng.standard_normal((c["n"], *c["spatial"], c["groups"] * c["cg"])).astype(dtype)
    weight = rng.standard_normal((*c["window"], c["groups"], c["ocg"], c["cg"])).astype(dtype)
    output_padding = _output_padding(c)
    out = [conv_output_size(i, k, s, p, d, c["transposed"], o) for i, k, s, p, d, o in
           zip(c["spatial"], c["window"], c["stride"], c["padding"], c["dilation"],
               output_padding, strict=True)]
    y_shape = conv_output_view(c["n"], out, c["stride"], c["groups"], c["ocg"],
                               c["transposed"])
    bias = rng.standard_normal((c["groups"], c["ocg"])).astype(np.float32)
    residual = rng.standard_normal(y_shape).astype(np.float32)
    names = [s if isinstance(s, str) else s[0] for s in epilogue]
    want = conv_reference_nd(x, weight, stride=c["stride"], padding=c["padding"],
                             dilation=c["dilation"], transposed=c["transposed"],
                             output_padding=output_padding, epilogue=epilogue, bias=bias,
                             residual=from_phase_view(residual, out))
    args = list(engine_layout(engine, conv_input_view(
        x, window=c["window"], stride=c["stride"], padding=c["padding"],
        dilation=c["dilation"], transposed=c["transposed"], groups=c["groups"]), weight))
    args += [bias] if "bias" in names else []
    args += [output_layout(engine, residual)] if "residual" in names else []
    y = np.zeros(output_shape(engine, y_shape), np.float32)
    argus.compile(kernel, **params).run(*args, y, check="strict")
    got = from_phase_view(output_layout(engine, y, back=True), out)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


def test_a_3x3x3_strided_window_walks_its_taps_in_loops():
    """27 taps are more than UNROLLED_TAPS: the window is walked by runtime loops (unrolled,
    its offsets would not fit the SGPRs), proved and right in the strict emulator."""
    c = dict(dims=3, engine="fma", n=1, spatial=(5, 4, 6), groups=1, cg=2, ocg=3,
             window=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1), dilation=(1, 1, 1),
             transposed=False, epilogue=("bias",))
    assert "k0" in str(conv_kernel(3, "fma", ("bias",)).trace(
        **{k: c[k] for k in ("window", "stride", "padding", "dilation", "transposed")}))
    test_conv_family_is_proved_and_matches_numpy(c)


def test_transposed_taps_partition_the_window():
    """Every tap of a transposed convolution reaches exactly one output phase per dimension
    (each input-output pair is counted once), the offsets never reach before the view."""
    taps = conv_taps(2, (3, 4), (2, 3), (1, 2), (1, 2), True)
    assert sorted(taps) == [(r, q) for r in range(2) for q in range(3)]
    seen = sorted(k for phase in taps.values() for k, _, _ in phase)
    assert seen == [(a, b) for a in range(3) for b in range(4)]
    assert min(o for phase in taps.values() for _, off, _ in phase for o in off) >= 0


def test_conv_family_refuses_bad_parameters():
    with pytest.raises(ArgusError, match="dims is 1, 2 or 3"):
        conv_kernel(4)
    with pytest.raises(ArgusError, match="epilogue step"):
        conv_kernel(2, "fma", ("swish",))
    with pytest.raises(ArgusError, match="does not fit 2 spatial"):
        conv_kernel(2).trace(window=(3, 3, 3))


POOLS = [
    # (kind, nc, spatial, window, stride, padding, dilation)
    ("max", 3, (11,), 3, 2, 1, 1), ("avg", 2, (9,), 2, 1, 0, 2),
    ("max", 2, (7, 9), 3, 2, 1, 1), ("avg", 5, (6, 5), 3, 1, 1, 1),
    ("max", 2, (4, 5, 6), 2, 2, 1, 1), ("avg", 3, (5, 4, 7), (2, 1, 3), (1, 1, 2), 0, 1),
    ("max", 6, (5, 6, 5), 3, 1, 1, 2),
    # a row stride of 1 walks rows with a ring of row results (`_pool_ring`): two workgroups
    # of rows, a ragged last one, a dilated window, a column stride of 2
    ("max", 3, (37, 70), 4, 1, 1, 1), ("avg", 2, (40, 9), 3, (1, 2), 1, 2),
]


@pytest.mark.parametrize("case", POOLS, ids=lambda c: f"{c[0]}{len(c[2])}d-{c[2]}".replace(" ", ""))
def test_pool_family_is_proved_and_matches_numpy(case):
    kind, nc, spatial, window, stride, padding, dilation = case
    dims = len(spatial)
    params = dict(kind=kind, window=window, stride=stride, padding=padding, dilation=dilation)
    norm = {k: (v if isinstance(v, (str, tuple)) else (v,) * dims) for k, v in params.items()}
    report = argus.verify(pool_kernel(dims), **norm)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    x = np.random.default_rng(nc * dims).standard_normal((nc, *spatial)).astype(np.float32)
    x[0, ...] = -np.abs(x[0])                       # a plane below 0: padding must not win
    want = pool_reference_nd(x, **params)
    y = np.zeros(want.shape, np.float32)
    argus.compile(pool_kernel(dims), **norm).run(pool_input_view(x, **params), y,
                                                 check="strict")
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", [("avg", 37, (6, 7, 9), 2, 2, 0, 1, 16),
                                  ("max", 11, (5, 40), 3, 2, 1, 1, 32),
                                  ("max", 9, (7, 33), 2, 2, 1, 1, 16)],
                         ids=lambda c: f"{c[0]}{len(c[2])}d-cols{c[-1]}")
def test_a_narrow_pool_tile_is_proved_and_matches_numpy(case):
    """`pool_kernel`'s cols: a wave's tile of 256 / cols planes by cols positions, for outputs
    narrower than 64 (`pool_cols`); ragged planes (37 of 16 a tile) and ragged rows (an
    output of 17 in 16-wide tiles). Proved and right in the strict emulator; Level 2 72's
    second 3-D pool (15 wide) is modelled faster on 16 (fails on the old kernel, which had
    no cols)."""
    from argus.kernelbench import road
    from argus.kernelbench.templates import Pool
    from argus.kernels.conv import pool_cols

    kind, nc, spatial, window, stride, padding, dilation, cols = case
    dims = len(spatial)
    params = dict(kind=kind, window=window, stride=stride, padding=padding, dilation=dilation)
    norm = {k: (v if isinstance(v, (str, tuple)) else (v,) * dims) for k, v in params.items()}
    report = argus.verify(pool_kernel(dims), **norm, cols=cols)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    x = np.random.default_rng(nc).standard_normal((nc, *spatial)).astype(np.float32)
    want = pool_reference_nd(x, **params)
    y = np.zeros(want.shape, np.float32)
    argus.compile(pool_kernel(dims), **norm, cols=cols).run(pool_input_view(x, **params), y,
                                                            check="strict")
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    assert [pool_cols(e) for e in (1, 15, 16, 17, 33, 64, 65)] == [16, 16, 16, 32, 64, 64, 64]
    sizes = {"NC": 1024, "I2D": 31, "SD": 1, "I2H": 31, "SH": 1, "I2W": 16, "SW": 2,
             "OD": 15, "OH": 15, "OW": 15}

    def modelled(width):
        pool = Pool(3, "avg", (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), cols=width)
        return road.model_time(pool.kernel(), sizes)

    assert modelled(16) < 0.6 * modelled(64)


@pytest.mark.parametrize("kind,nc,length,window,padding,dilation", [
    ("max", 3, 700, 8, 4, 1),     # two workgroups of runs, a ragged last run
    ("avg", 2, 77, 8, 4, 1), ("max", 2, 300, 3, 1, 2), ("avg", 1, 5, 2, 0, 1),
])
def test_pool_runs_is_proved_and_matches_numpy(kind, nc, length, window, padding, dilation):
    """1-D stride-1 pooling from runs of 4 positions a lane (`pool_runs_kernel`): each tap a
    register of the lane's own loads."""
    from argus.kernels.conv import RUN

    params = {"kind": kind, "window": window, "dilation": dilation}
    report = argus.verify(pool_runs_kernel(), **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    x = np.random.default_rng(length).standard_normal((nc, length)).astype(np.float32)
    x[0] = -np.abs(x[0])                            # a row below 0: padding must not win
    want = pool_reference_nd(x, kind=kind, window=window, stride=1, padding=padding,
                             dilation=dilation)
    y = np.full((nc, -(-want.shape[1] // RUN), RUN), np.nan, np.float32)
    argus.compile(pool_runs_kernel(), **params).run(
        pool_runs_view(x, kind=kind, window=window, padding=padding, dilation=dilation), y,
        check="strict")
    np.testing.assert_allclose(y.reshape(nc, -1)[:, :want.shape[1]], want, rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("index", range(len(KINDS)))
def test_numpy_reference_matches_torch(index):
    """The reference the family is checked against is torch's convolution, with the weight
    mapping docs/guide/ops.md gives (and torch's output_padding for transposed ones)."""
    torch = pytest.importorskip("torch")    # the argus[kernelbench] extra; CI installs it
    import torch.nn.functional as F

    c = draw(index)
    dims, g, cg, ocg = c["dims"], c["groups"], c["cg"], c["ocg"]
    rng = np.random.default_rng(index)
    x = rng.standard_normal((c["n"], *c["spatial"], g * cg))
    w = rng.standard_normal((*c["window"], g, ocg, cg))
    spatial_axes = tuple(range(dims))
    output_padding = _output_padding(c)
    want = conv_reference_nd(x, w, stride=c["stride"], padding=c["padding"],
                             dilation=c["dilation"], transposed=c["transposed"],
                             output_padding=output_padding)
    xt = torch.from_numpy(np.moveaxis(x, -1, 1).copy())
    # ours (*K, G, OCG, CG) -> torch's (OC, CG, *K), or (C, OCG, *K) when transposed
    if c["transposed"]:
        wt = np.moveaxis(w, (*spatial_axes, dims, dims + 1, dims + 2),
                         (*(3 + a for a in spatial_axes), 0, 2, 1)).reshape(g * cg, ocg,
                                                                          *c["window"])
        fn = getattr(F, f"conv_transpose{dims}d")
        got = fn(xt, torch.from_numpy(wt.copy()), stride=c["stride"], padding=c["padding"],
                 dilation=c["dilation"], groups=g, output_padding=output_padding)
    else:
        wt = np.moveaxis(w, (*spatial_axes, dims, dims + 1, dims + 2),
                         (*(3 + a for a in spatial_axes), 0, 1, 2)).reshape(g * ocg, cg,
                                                                          *c["window"])
        fn = getattr(F, f"conv{dims}d")
        got = fn(xt, torch.from_numpy(wt.copy()), stride=c["stride"], padding=c["padding"],
                 dilation=c["dilation"], groups=g)
    np.testing.assert_allclose(np.moveaxis(got.numpy(), 1, -1), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", [c for c in POOLS if c[0] == "max" or c[6] == 1],
                         ids=lambda c: f"{c[0]}{len(c[2])}d-{c[2]}".replace(" ", ""))
def test_pool_reference_matches_torch(case):
    """(torch's average pooling has no dilation: those cases are left out here)"""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    kind, nc, spatial, window, stride, padding, dilation = case
    dims = len(spatial)
    x = np.random.default_rng(nc).standard_normal((nc, *spatial))
    want = pool_reference_nd(x, kind=kind, window=window, stride=stride, padding=padding,
                             dilation=dilation)
    xt = torch.from_numpy(x[None])
    if kind == "max":
        got = getattr(F, f"max_pool{dims}d")(xt, window, stride, padding, dilation)
    else:
        got = getattr(F, f"avg_pool{dims}d")(xt, window, stride, padding,
                                             count_include_pad=True)
    np.testing.assert_allclose(got.numpy()[0], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,params", [
    ("conv2d_fma", dict(stride=(1, 2), padding=(1, 0), dilation=(1, 2), transposed=True)),
])
def test_library_entries_check_clean_at_their_check_sizes(name, params):
    """A library entry (random view inputs, their front included, against the view
    references) in the interpreter and the strict emulator, at sizes `check_sizes` derives
    from the parameters."""
    from roads import emulated, interpreted

    from argus.kernels import library

    entry = library()[name]
    sizes = entry.check_sizes({**entry.kernel.params, **params}, 1)
    interp = interpreted(name, sizes=sizes, params=params).interp
    emulate = emulated(name, sizes=sizes, params=params).emulated
    assert interp.ok and emulate.ok, (interp.message, emulate.message)
    assert all(t.unwritten == 0 for t in interp.trials + emulate.trials)


def test_a_transposed_asymmetric_window_keeps_one_scalar_per_vop3():
    """KernelBench 65's shape class (ConvTranspose2d, 3x7 window, stride 1): a guarded load's
    offset was uniform, so `v_cndmask_b32_e64` read it and the lane mask from SGPRs, which
    gfx942's constant bus refuses at assembly. The offset is now copied to a VGPR first."""
    c = dict(dims=2, engine="fma", n=1, spatial=(5, 6), groups=1, cg=3, ocg=4,
             window=(3, 7), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
             transposed=True, epilogue=())
    test_conv_family_is_proved_and_matches_numpy(c)


def test_fitting_steps_down_to_a_kernel_that_fits_the_registers():
    """conv_fitting keeps the f32 MFMA engine's two channel tiles where they fit and steps
    down (to one tile, then the FMA engine) only where compiling refuses the registers."""
    from argus.asm.lower.regalloc import RegisterBudgetError
    from argus.kernelbench.templates import conv_fitted
    from argus.kernelbench.templates import conv_fitting as fitting

    geometry = dict(window=(3, 3), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                    transposed=False)
    assert fitting(2, "mfma_f32", (1, 2), (), **geometry) == ("mfma_f32", (1, 2))
    # a bias fits beside two channel tiles since the stores' offsets are made where they store
    assert fitting(2, "mfma_f32", (1, 2), ("bias",), **geometry) == ("mfma_f32", (1, 2))
    # a 5x5 window's weights pass STAGED_B_BYTES, so each tap loads its own B; beside a bias
    # and a residual their offsets passed the SGPRs until the lowering folded the assumed
    # window extents (`fold_assumed`: the taps' weight offsets are constants now); a 7x7
    # window's still pass them
    geometry["window"] = (5, 5)
    assert fitting(2, "mfma_f32", (1, 2), ("bias", "residual"), **geometry) == \
        ("mfma_f32", (1, 2))
    geometry["window"] = (7, 7)
    for epilogue in [("bias", "residual")]:
        engine, tiles, unrolled = conv_fitted(2, "mfma_f32", (1, 2), epilogue, **geometry)
        argus.compile(conv_kernel(2, engine, epilogue), verify=False, tiles=tiles,
                      unrolled=unrolled, **geometry)
        assert (engine, tiles) != ("mfma_f32", (1, 2))
        with pytest.raises(RegisterBudgetError):
            argus.compile(conv_kernel(2, "mfma_f32", epilogue), verify=False, tiles=(1, 2),
                          **geometry)


def test_the_fma_engines_position_tiles_are_one_run_per_tap():
    """KernelBench 85's depthwise 3x7 window: the FMA engine's four 64-position tiles are
    one run per wave (4 adjacent positions a lane, the input channels first), so each of the
    7 unrolled taps keeps one offset live, not four, and conv_fitting keeps the four tiles
    where it used to halve them to fit the 102 SGPRs."""
    from argus.kernelbench.templates import conv_fitting as fitting

    geometry = dict(window=(3, 7), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                    transposed=False)
    assert fitting(2, "fma", (4, 1), (), **geometry) == ("fma", (4, 1))


def test_registers_do_not_grow_with_the_output_phases():
    """A strided transposed convolution's output phases run in bands of workgroups, a branch
    each, whose constants and rebased resources are made once or at the branch's head: the
    registers of a stride-8 output (8 phases) are those of a stride-2 one (they grew by 48
    VGPRs before, and KernelBench 81's 25 phases did not fit at all)."""
    def lowered(stride):
        return argus.compile(conv_kernel(1, "fma", ("bias",)), verify=False, window=3,
                             stride=stride, padding=1, transposed=True).lowered

    two, eight = lowered(2), lowered(8)
    assert eight.vgprs <= two.vgprs + 4
    assert eight.sgprs <= two.sgprs + 4


def test_the_f32_mfma_engine_stages_a_single_phase_windows_weights_in_lds():
    """One channel tile up to 32 output channels per group (a second loaded guarded zeros),
    two above; a single-phase window of STAGED_MIN_TAPS taps or more has its weights go
    through LDS once per channel step (the outermost axis rounded up to the four waves),
    proved (barriers, races) and right in the strict emulator with channel tails; a phased
    (strided transposed) output's few taps per phase are loaded directly."""
    from argus.kernels.conv import MFMA_WAVES, STAGED_B_BYTES, conv_engine

    assert conv_engine(3, 24) == ("mfma_f32", (1, 1))
    assert conv_engine(3, 17) == ("mfma_f32", (1, 1))
    assert conv_engine(3, 48) == ("mfma_f32", (1, 2))
    assert conv_engine(3, 48, phases=4) == ("mfma_f32", (1, 1))
    c = dict(dims=2, engine="mfma_f32", n=5, spatial=(4, 6), groups=1, cg=3, ocg=5,
             window=(3, 3), stride=(1, 1), padding=(1, 0), dilation=(1, 1), transposed=False,
             epilogue=("bias",), tiles=(1, 1))
    staged = argus.compile(conv_kernel(2, "mfma_f32", ("bias",)), verify=False,
                           window=(3, 3), padding=(1, 0), tiles=(1, 1))
    # the weights (outermost axis rounded up to the waves) and the input slab (3 rows of 64
    # positions by 2 channels, per wave)
    assert 4 * 3 * 2 * 32 * 4 <= STAGED_B_BYTES
    assert staged.ir.lds_bytes == 4 * 3 * 2 * 32 * 4 + 3 * MFMA_WAVES * 64 * 2 * 4
    test_conv_family_is_proved_and_matches_numpy(c)
    phased = argus.compile(conv_kernel(2, "mfma_f32"), verify=False, window=(3, 3),
                           stride=(2, 2), transposed=True, tiles=(1, 1))
    assert phased.ir.lds_bytes == 0


@pytest.mark.parametrize("engine, epilogue, output_padding", [
    ("fma", ("bias", "relu", "pool_max"), (1, 1)),
    ("mfma_f32", ("bias", ("scale", 0.5), "pool_avg"), (0, 1)),
    ("mfma_f32_16", ("bias", "relu", "pool_max"), (1, 0))])
def test_a_transposed_convolution_pools_its_phases_in_its_epilogue(engine, epilogue,
                                                                    output_padding):
    """The epilogue's last step pools a stride-2 transposed output over 2x2 windows (its
    phases at one position, combined in one workgroup), proved and right in the strict
    emulator with an odd output extent (the far row dropped, as torch's floor mode)."""
    window, stride, padding = (3, 3), (2, 2), (1, 1)
    params = dict(window=window, stride=stride, padding=padding, dilation=(1, 1),
                  transposed=True)
    kernel = conv_kernel(2, engine, epilogue)
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    rng = np.random.default_rng(7)
    n, spatial, cg, ocg = 2, (4, 5), 3, 5
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = rng.standard_normal((*window, 1, ocg, cg)).astype(np.float32)
    bias = rng.standard_normal((1, ocg)).astype(np.float32)
    out = [conv_output_size(i, 3, 2, 1, 1, True, o) for i, o in
           zip(spatial, output_padding, strict=True)]
    pooled = [o // 2 for o in out]
    want = conv_reference_nd(x, weight, stride=stride, padding=padding, transposed=True,
                             output_padding=output_padding, epilogue=epilogue, bias=bias)
    assert list(want.shape[1:-1]) == pooled
    args = list(engine_layout(engine, conv_input_view(x, **params), weight)) + [bias]
    y = np.full(output_shape(engine, conv_output_view(n, pooled, 1, 1, ocg, False)), np.nan,
                np.float32)
    argus.compile(kernel, **params).run(*args, y, check="strict")
    got = from_phase_view(output_layout(engine, y, back=True), pooled)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


def test_a_pool_step_is_a_transposed_convolution_s_one():
    with pytest.raises(ArgusError, match="pools more than once"):
        conv_kernel(2, "fma", ("pool_max", "relu", "pool_avg"))
    with pytest.raises(ArgusError, match="beside a residual"):
        conv_kernel(2, "fma", ("residual", "pool_avg"))
    with pytest.raises(ArgusError, match="on a forward convolution"):
        conv_kernel(2, "fma", ("pool_max",)).trace(window=(3, 3), stride=(2, 2))


def test_fewer_unrolled_taps_keep_fewer_sgprs_live():
    """`unrolled` bounds the taps a window pass unrolls: a 3x5 window's 15 taps walked a row
    (5) at a time hold fewer offsets than 9 at a time (what conv_fitted steps down to before
    it leaves the f32 MFMA engine: KernelBench Level 2 78 did not fit at 9)."""
    def sgprs(unrolled):
        return argus.compile(conv_kernel(2, "fma", ("bias",)), verify=False,
                             window=(3, 5), unrolled=unrolled).lowered.sgprs

    assert sgprs(3) < sgprs(9)
    with pytest.raises(ArgusError, match="unrolled=0"):
        conv_kernel(2, "fma").trace(unrolled=0)


@pytest.mark.parametrize("engine", ["mfma_f32", "mfma_f32_16"])
def test_a_rows_step_reduces_the_output_channels_in_the_epilogue(engine):
    """The epilogue's "rows" step (after a phase pool): softmax over the output channels,
    minus a per-channel vector, its max over the channels, one value per position; the
    channels past OCG (5 of a 32- or 16-channel tile) at each reduction's identity. Proved
    and right in the strict emulator."""
    from argus.kernelbench.route import exp
    from argus.kernelbench.templates import bin_

    y, shifted = ("leaf", "y"), exp(bin_("sub", ("leaf", "y"), ("stat", 0)))
    rows = ("rows", (("max", y), ("sum", shifted),
                     ("max", bin_("sub", bin_("mul", shifted, ("un", "rcp", ("stat", 1))),
                                  ("vec", "V0")))), ("stat", 2), 1)
    epilogue = ("bias", "pool_max", rows)
    params = dict(window=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                  transposed=True)
    kernel = conv_kernel(2, engine, epilogue)
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    rng = np.random.default_rng(3)
    n, spatial, cg, ocg = 2, (4, 5), 3, 5
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = rng.standard_normal((3, 3, 1, ocg, cg)).astype(np.float32)
    bias = rng.standard_normal((1, ocg)).astype(np.float32)
    vec = rng.standard_normal(ocg).astype(np.float32)
    z = conv_reference_nd(x, weight, stride=(2, 2), padding=(1, 1), transposed=True,
                          output_padding=(1, 1), epilogue=("bias", "pool_max"), bias=bias)
    e = np.exp(z - z.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True) - vec).max(-1, keepdims=True)
    pooled = list(want.shape[1:-1])
    args = list(engine_layout(engine, conv_input_view(x, **params), weight)) + [bias, vec]
    y_out = np.full(conv_output_view(n, pooled, 1, 1, 1, False), np.nan, np.float32)
    argus.compile(kernel, **params).run(*args, y_out, check="strict")
    got = from_phase_view(y_out, pooled)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ArgusError, match="reduces the channels other than once"):
        conv_kernel(2, "mfma_f32", (rows, "relu"))
    with pytest.raises(ArgusError, match="reads"):
        conv_kernel(2, "mfma_f32", (("rows", (("sum", ("leaf", "x")),), ("stat", 0), 0),))


@pytest.mark.parametrize("engine", ["mfma_f32", "mfma_f32_16"])
def test_a_rows_step_on_a_phased_output_stores_one_register_a_lane(engine):
    """Level 2 58's chain on a strided transposed output, unpooled (each phase its band of
    workgroups): a logsumexp over the channels, then a HardSwish, a shift and a clamp of one
    value per position. The stats are relaid one element a lane (`_one_a_lane`) before the
    output expression, so a position tile is one store (the MFMA tile's 4 or 16 rows a lane,
    each stored, before) and the expression runs on one register a lane. Proved, right in
    the strict emulator at ragged sizes (5 of 16 or 32 channels, 3 images of 4 a
    workgroup)."""
    from argus.ir import ops as O
    from argus.kernelbench.route import const, exp, log, sigmoid
    from argus.kernelbench.templates import bin_

    y = ("leaf", "y")
    lse = bin_("add", log(("stat", 1)), ("stat", 0))
    hardswish = bin_("mul", bin_("mul", lse, sigmoid(bin_("add", lse, const(3.0)))),
                     const(1 / 6))
    out = bin_("min", bin_("max", bin_("sub", hardswish, const(0.25)), const(-1.0)),
               const(1.0))
    rows = ("rows", (("max", y), ("sum", exp(bin_("sub", y, ("stat", 0))))), out, 0)
    params = dict(window=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                  transposed=True)
    kernel = conv_kernel(2, engine, ("bias", rows))
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    stores = [op for op in O.walk(kernel.trace(**params).body) if isinstance(op, O.GlobalStore)]
    assert all(op.value.type.layout.slots == 1 for op in stores), stores
    rng = np.random.default_rng(8)
    n, spatial, cg, ocg = 3, (4, 5), 3, 5
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = rng.standard_normal((3, 3, 1, ocg, cg)).astype(np.float32)
    bias = rng.standard_normal((1, ocg)).astype(np.float32)
    z = conv_reference_nd(x, weight, stride=(2, 2), padding=(1, 1), transposed=True,
                          epilogue=("bias",), bias=bias)
    m = z.max(-1, keepdims=True)
    l = np.log(np.exp(z - m).sum(-1, keepdims=True)) + m
    want = np.clip(l / (1 + np.exp(-(l + 3))) / 6 - 0.25, -1, 1)
    out_spatial = list(want.shape[1:-1])
    args = list(engine_layout(engine, conv_input_view(x, **params), weight)) + [bias]
    y_out = np.full(conv_output_view(n, out_spatial, (2, 2), 1, 1, True), np.nan, np.float32)
    argus.compile(kernel, **params).run(*args, y_out, check="strict")
    np.testing.assert_allclose(from_phase_view(y_out, out_spatial), want, rtol=1e-4,
                               atol=1e-5)


def test_per_channel_vectors_load_once_a_channel_block():
    """The bias and E<i> vectors of a channel block are loaded once and shared by every phase
    and position tile (`_block_vectors`): a 2-D stride-2 pool's 4 phases loaded each before
    the pool 4 times (KernelBench Level 2 50's 3-D one, 8 phases: 325 -> 270 us modelled),
    and a phased output's 2 position tiles loaded the bias twice in each phase band."""
    from collections import Counter

    from argus.ir import ops as O

    params = dict(window=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                  transposed=True)

    def loads(epilogue, **chosen):
        ir = conv_kernel(2, "mfma_f32_16", epilogue).trace(**params, **chosen)
        return Counter(op.tensor.name for op in O.walk(ir.body) if isinstance(op, O.GlobalLoad))

    pooled = loads(("bias", ("vec", "mul", 0), "pool_avg", ("vec", "add", 1)))
    assert [pooled[name] for name in ("bias", "E0", "E1")] == [1, 1, 1], pooled
    phased = loads(("bias", "relu"), tiles=(2, 1))
    assert phased["bias"] == 4, phased                   # one a phase band


@pytest.mark.parametrize("engine", ["mfma_f32", "mfma_f32_16"])
def test_a_channels_step_keeps_a_value_per_channel(engine):
    """The epilogue's "channels" step: a softmax over the output channels (Level 2 6's
    Conv3d -> Softmax(dim=1)) times a per-channel vector, every channel kept and stored as
    the convolution's output is, so the unnormalised output is never written; the channels
    past OCG (5 of a 32- or 16-channel tile) at each reduction's identity, a ragged last
    position tile. Proved and right in the strict emulator (float64 numpy)."""
    from argus.kernelbench.route import exp
    from argus.kernelbench.templates import bin_

    y = ("leaf", "y")
    shifted = exp(bin_("sub", y, ("stat", 0)))
    channels = ("channels", (("max", y), ("sum", shifted)),
                bin_("mul", bin_("mul", shifted, ("un", "rcp", ("stat", 1))), ("vec", "V0")), 1)
    params = dict(window=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                  transposed=False)
    kernel = conv_kernel(2, engine, ("bias", channels))
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    rng = np.random.default_rng(5)
    n, spatial, cg, ocg = 5, (3, 37), 3, 5
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = rng.standard_normal((3, 3, 1, ocg, cg)).astype(np.float32)
    bias = rng.standard_normal((1, ocg)).astype(np.float32)
    vec = rng.standard_normal(ocg).astype(np.float32)
    z = conv_reference_nd(x, weight, padding=(1, 1), epilogue=("bias",), bias=bias)
    e = np.exp(z - z.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True) * vec
    args = list(engine_layout(engine, conv_input_view(x, **params), weight)) + [bias, vec]
    y_out = np.full(output_shape(engine, conv_output_view(n, list(spatial), 1, 1, ocg, False)),
                    np.nan, np.float32)
    argus.compile(kernel, **params).run(*args, y_out, check="strict")
    got = from_phase_view(output_layout(engine, y_out, back=True), list(spatial))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ArgusError, match="reduces the channels other than once"):
        conv_kernel(2, "mfma_f32", (channels, "relu"))
    with pytest.raises(ArgusError, match="beside a channels step"):
        conv_kernel(2, "mfma_f32", ("pool_max", channels))
    with pytest.raises(ArgusError, match="reads"):
        conv_kernel(2, "mfma_f32", (("channels", (("sum", y),), ("leaf", "x"), 0),))


def test_vector_steps_ride_before_and_after_a_phase_pool():
    """("vec", op, i) steps apply a (G, OCG) vector E<i> per output channel: a learnt scale
    before a 2x2 average pool of the phases, then a per-channel bias and a scale after it
    (KernelBench Level 2 50's chain), proved and right in the strict emulator."""
    epilogue = ("bias", ("vec", "mul", 0), "pool_avg", ("vec", "add", 1), ("vec", "rsub", 2))
    params = dict(window=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                  transposed=True)
    kernel = conv_kernel(2, "mfma_f32_16", epilogue)       # conv_engine's for 5 channels
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    rng = np.random.default_rng(5)
    n, spatial, cg, ocg = 2, (4, 5), 3, 5
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = rng.standard_normal((3, 3, 1, ocg, cg)).astype(np.float32)
    bias, *vectors = (rng.standard_normal((1, ocg)).astype(np.float32) for _ in range(4))
    want = conv_reference_nd(x, weight, stride=(2, 2), padding=(1, 1), transposed=True,
                             epilogue=epilogue, bias=bias, vectors=vectors)
    pooled = list(want.shape[1:-1])
    args = list(engine_layout("mfma_f32_16", conv_input_view(x, **params), weight))
    y = np.full(conv_output_view(n, pooled, 1, 1, ocg, False), np.nan, np.float32)
    argus.compile(kernel, **params).run(*args, bias, *vectors, y, check="strict")
    np.testing.assert_allclose(from_phase_view(y, pooled), want, rtol=1e-5, atol=1e-4)


def test_an_expression_step_runs_a_route_chain_over_the_tile():
    """("expr", e): a leaky ReLU written as the route writes it (a select), minus a
    per-channel vector E0, over a forward convolution's tile; proved and right in the
    strict emulator; an expression reading anything else is refused."""
    from argus.kernelbench.templates import bin_, const, where

    y = ("leaf", "y")
    leaky = where(bin_("gt", y, const(0.0)), y, bin_("mul", y, const(0.01)))
    epilogue = ("bias", ("expr", bin_("sub", leaky, ("vec", "E0"))))
    params = dict(window=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                  transposed=False)
    kernel = conv_kernel(2, "fma", epilogue)
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    rng = np.random.default_rng(9)
    n, spatial, cg, ocg = 1, (4, 5), 2, 3
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = rng.standard_normal((3, 3, 1, ocg, cg)).astype(np.float32)
    bias, vec = (rng.standard_normal((1, ocg)).astype(np.float32) for _ in range(2))
    z = conv_reference_nd(x, weight, padding=(1, 1), epilogue=("bias",), bias=bias)
    want = np.where(z > 0, z, 0.01 * z) - vec.reshape(-1)
    args = list(engine_layout("fma", conv_input_view(x, **params), weight))
    y_view = np.full(output_shape("fma", conv_output_view(n, spatial, 1, 1, ocg, False)),
                     np.nan, np.float32)
    argus.compile(kernel, **params).run(*args, bias, vec, y_view, check="strict")
    got = from_phase_view(output_layout("fma", y_view, back=True), list(spatial))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    with pytest.raises(ArgusError, match="reads"):
        conv_kernel(2, "fma", (("expr", bin_("add", y, ("leaf", "z"))),))


def test_a_3x3x3_window_reads_its_inputs_through_an_lds_slab():
    """The f32 MFMA engine's single-phase 3x3x3 window with staged weights loads each
    channel step's input rows once (9 rows of 64 positions by 2 channels: 18 loads) into an
    LDS slab, in three chunks of three rows, where every tap loaded its own A (27 loads); the
    weights still take 9 loads a step. Right in the strict emulator with channel tails (3
    channels), 5 output channels and rows narrower than the slab (the proof of a 3-D slab
    takes minutes: the 2-D one is proved in the staged-weights test above, and KernelBench
    Level 2 6's full check proves this one)."""
    from argus.kernels.conv import MFMA_WAVES, SLAB_CHUNK_BYTES

    c = dict(n=5, spatial=(3, 4, 5), cg=3, ocg=5, window=(3, 3, 3))
    compiled = argus.compile(conv_kernel(3, "mfma_f32", ("bias",)), verify=False,
                             window=(3, 3, 3), padding=(1, 1, 1), tiles=(1, 1))
    chunk = 3 * MFMA_WAVES * 64 * 2 * 4
    assert chunk <= SLAB_CHUNK_BYTES
    assert compiled.ir.lds_bytes == 4 * 3 * 3 * 2 * 32 * 4 + chunk
    ops = [i.opcode for i in compiled.code.disassemble(compiled.code.kernel(compiled.name))]
    # per channel step: 18 slab rows + 9 weight slices, and the bias once
    assert ops.count("buffer_load_dword") == 18 + 9 + 1
    assert ops.count("s_barrier") == 2 + 2 * 2                  # the weights, two more chunks
    rng = np.random.default_rng(3)
    x = rng.standard_normal((c["n"], *c["spatial"], c["cg"])).astype(np.float32)
    weight = rng.standard_normal((*c["window"], 1, c["ocg"], c["cg"])).astype(np.float32)
    bias = rng.standard_normal((1, c["ocg"])).astype(np.float32)
    out = [conv_output_size(i, 3, 1, 1, 1, False) for i in c["spatial"]]
    want = conv_reference_nd(x, weight, padding=1, epilogue=("bias",), bias=bias)
    args = list(engine_layout("mfma_f32", conv_input_view(x, window=3, padding=1), weight))
    y = np.full(output_shape("mfma_f32", conv_output_view(c["n"], out, 1, 1, c["ocg"], False)),
                np.nan, np.float32)
    compiled.run(*args, bias, y, check="strict")
    got = from_phase_view(output_layout("mfma_f32", y, back=True), out)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("tiles, rows", [(2, 3), (4, 5)])
def test_the_16x16_engine_s_slab_rows_load_whole_channel_runs(tiles, rows):
    """On the 16x16 engine (k = 4) a slab row's lanes split into 4 runs of 16 positions, one
    per channel, so a 3x3x3 window's 9 rows of 16 * tiles + 2 positions take `rows` loads
    each (27 at 2 tiles; the lanes along 64 positions by slot-channels took 36), their
    offsets constants in the instruction. `conv_engine` takes 4 position tiles where a row
    passes 2 (62 positions: KernelBench Level 2 48, 491 -> 445 us, modelled). Right in the
    strict emulator with a channel tail (3 of 4), a position tail (37 a row), 13 output
    channels and a batch tail (5 images), with a bias and a vector."""
    from argus.kernels.conv import NARROW_MAX_TILES, NARROW_TILES

    assert conv_engine(3, 16, positions=30) == ("mfma_f32_16", (NARROW_TILES, 1))
    assert conv_engine(3, 16, positions=62) == ("mfma_f32_16", (NARROW_MAX_TILES, 1))
    assert conv_engine(3, 16, phases=4, positions=62) == ("mfma_f32_16", (NARROW_TILES, 1))
    c = dict(n=5, spatial=(3, 3, 37), cg=3, ocg=13, window=(3, 3, 3))
    epilogue = ("bias", ("vec", "mul", 0))
    compiled = argus.compile(conv_kernel(3, "mfma_f32_16", epilogue), verify=False,
                             window=(3, 3, 3), padding=(1, 1, 0), tiles=(tiles, 1))
    ops = [i.opcode for i in compiled.code.disassemble(compiled.code.kernel(compiled.name))]
    # per channel step: the slab's loads + 9 weight slices; the bias and the vector once a
    # channel block (shared by the position tiles)
    assert ops.count("buffer_load_dword") == 9 * rows + 9 + 2
    rng = np.random.default_rng(5)
    x = rng.standard_normal((c["n"], *c["spatial"], c["cg"])).astype(np.float32)
    weight = rng.standard_normal((*c["window"], 1, c["ocg"], c["cg"])).astype(np.float32)
    bias = rng.standard_normal((1, c["ocg"])).astype(np.float32)
    vec = rng.standard_normal((1, c["ocg"])).astype(np.float32)
    out = [conv_output_size(i, 3, 1, p, 1, False) for i, p in zip(c["spatial"], (1, 1, 0))]
    want = conv_reference_nd(x, weight, padding=(1, 1, 0), epilogue=epilogue, bias=bias,
                             vectors=(vec,))
    args = list(engine_layout("mfma_f32_16", conv_input_view(x, window=3, padding=(1, 1, 0)),
                              weight))
    y = np.full(output_shape("mfma_f32_16", conv_output_view(c["n"], out, 1, 1, c["ocg"],
                                                             False)), np.nan, np.float32)
    compiled.run(*args, bias, vec, y, check="strict")
    got = from_phase_view(output_layout("mfma_f32_16", y, back=True), out)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("engine", ["mfma_f32", "mfma_f32_16"])
def test_a_stats_step_gives_robust_moments_where_the_mean_is_1e4_stds(engine):
    """The epilogue's "stats" step (each tile's count, mean and M2 of what it stores) and
    `moments_kernel`'s combine (Chan's formula, a stage of chunks then the finish) give the
    channels' mean and 1/sqrt(var + eps) of a strided transposed convolution's output whose
    mean is 1e4 times its spread, as float64 numpy does from the stored output (the phase
    view's positions past the plain output left out); a sum of squares in f32 loses the
    variance there. Proved and run in the strict emulator."""
    from argus.kernels.conv import MOMENT_PLANES, moments_kernel

    params = dict(window=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                  transposed=True)
    kernel = conv_kernel(2, engine, ("bias", ("stats", True)))
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    rng = np.random.default_rng(7)
    n, spatial, cg, ocg = 2, (4, 6), 3, 5
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = (0.3 * rng.standard_normal((3, 3, 1, ocg, cg))).astype(np.float32)
    bias = np.full((1, ocg), 1e4, np.float32)
    out = [7, 11]
    y_shape = conv_output_view(n, out, (2, 2), 1, ocg, True)
    y = np.zeros(y_shape, np.float32)
    s = np.full((MOMENT_PLANES, n, out[0], 2, 1, 1, ocg), np.nan, np.float32)
    args = list(engine_layout(engine, conv_input_view(x, **params), weight)) + [bias]
    argus.compile(kernel, **params).run(*args, s, np.zeros(out[1], np.float32), y,
                                        check="strict")
    got = from_phase_view(y, out).astype(np.float64).reshape(-1, ocg)
    assert got.std(0).max() * 1e4 < 2 * np.abs(got.mean(0)).min()      # |mean| >> std
    parts = s.reshape(MOMENT_PLANES, 1, -1, ocg, 1)                   # (planes, O, R, M, Q)
    chunks = np.zeros((MOMENT_PLANES, 1, -(-parts.shape[2] // 16), ocg, 1), np.float32)
    span = np.zeros(2, np.float32)                  # two runs of 8 rows a workgroup
    argus.compile(moments_kernel(""), chunk=8).run(parts, span, chunks, check="strict")
    mean, inv = np.zeros((1, ocg), np.float32), np.zeros((1, ocg), np.float32)
    one = np.zeros(1, np.float32)
    argus.compile(moments_kernel("mean"), chunk=8).run(chunks, one, mean, check="strict")
    argus.compile(moments_kernel("inv"), chunk=8, eps=1e-5).run(chunks, one, inv,
                                                               check="strict")
    np.testing.assert_allclose(mean[0], got.mean(0), rtol=1e-7)
    np.testing.assert_allclose(inv[0], 1 / np.sqrt(got.var(0) + 1e-5), rtol=1e-3)
    f32 = got.astype(np.float32)
    naive = (f32 * f32).mean(0, dtype=np.float32) - f32.mean(0, dtype=np.float32) ** 2
    assert np.abs(naive - got.var(0)).max() > 0.5 * got.var(0).max()
    for finish in ("", "mean", "inv") if engine == "mfma_f32" else ():
        report = argus.verify(moments_kernel(finish), chunk=8)
        assert report.ok and report.proved_for_all_sizes, str(report)
    with pytest.raises(ArgusError, match="statistics other than once at its end"):
        conv_kernel(2, "mfma_f32", (("stats", True), "relu"))


def test_a_16_channel_3x3x3_conv_with_a_long_epilogue_fits_the_16x16_engine():
    """KernelBench Level 2 48's 3x3x3 convolution to 16 channels with a bias, two vectors and
    two activations needed 104 of a wave's 102 SGPRs on the 16x16 engine at any tiles and
    taps, and fell to the 32x32 one (719 us, modelled): each of the 9 slab rows by 4 channels
    kept its own offset live, since the phase counts (assumed 1) scaled every stride. The
    lowering folds the assumed sizes (`fold_assumed`) and the slab's lanes split by channel
    (`_slab_loads`), so a row's loads differ by constants in the instruction: it fits at the
    engine's own tiles (491 us, modelled)."""
    from argus.kernelbench.templates import conv_fitted
    from argus.kernels.conv import NARROW_TILES, UNROLLED_TAPS, conv_engine

    epilogue = ("bias", ("vec", "mul", 0), "tanh", ("vec", "mul", 1), "sigmoid")
    geometry = dict(window=(3, 3, 3), stride=(1, 1, 1), padding=(0, 0, 0),
                    dilation=(1, 1, 1), transposed=False)
    assert conv_engine(3, 16) == ("mfma_f32_16", (NARROW_TILES, 1))
    assert conv_fitted(3, "mfma_f32_16", (NARROW_TILES, 1), epilogue, **geometry) == \
        ("mfma_f32_16", (NARROW_TILES, 1), UNROLLED_TAPS)


def test_groups_of_16_output_channels_take_the_16x16_mfma_engine():
    """At most 16 output channels per group (any phases) take v_mfma_f32_16x16x4_f32, two
    16-position tiles a wave; its 2-D staged window (weights and input slab in LDS, k = 4)
    matches numpy in the strict emulator with position tails (37 positions a row), channel
    tails (5 input channels: a step of 4 and one of 1; 13 output channels) and a batch
    tail (5 images), and issues only the 16x16 MFMA (2 per tap and channel step)."""
    from argus.kernels.conv import NARROW_OC, NARROW_TILES, conv_engine

    for cg, ocg, phases in ((3, 16, 1), (3, 2, 8), (32, NARROW_OC, 1)):
        assert conv_engine(cg, ocg, phases) == ("mfma_f32_16", (NARROW_TILES, 1))
    c = dict(n=5, spatial=(4, 37), cg=5, ocg=13, window=(3, 3))
    params = dict(window=(3, 3), padding=(1, 0), tiles=(NARROW_TILES, 1))
    compiled = argus.compile(conv_kernel(2, "mfma_f32_16", ("bias", "relu")), verify=False,
                             **params)
    ops = [i.opcode for i in compiled.code.disassemble(compiled.code.kernel(compiled.name))]
    assert ops.count("v_mfma_f32_16x16x4_f32") == 9 * NARROW_TILES
    assert "v_mfma_f32_32x32x2_f32" not in ops
    rng = np.random.default_rng(7)
    x = rng.standard_normal((c["n"], *c["spatial"], c["cg"])).astype(np.float32)
    weight = rng.standard_normal((*c["window"], 1, c["ocg"], c["cg"])).astype(np.float32)
    bias = rng.standard_normal((1, c["ocg"])).astype(np.float32)
    out = [conv_output_size(i, 3, 1, p, 1, False) for i, p in zip(c["spatial"], (1, 0))]
    want = conv_reference_nd(x, weight, padding=(1, 0), epilogue=("bias", "relu"), bias=bias)
    args = list(engine_layout("mfma_f32_16", conv_input_view(x, window=3, padding=(1, 0)),
                              weight))
    y = np.full(output_shape("mfma_f32_16", conv_output_view(c["n"], out, 1, 1, c["ocg"],
                                                             False)), np.nan, np.float32)
    compiled.run(*args, bias, y, check="strict")
    got = from_phase_view(output_layout("mfma_f32_16", y, back=True), out)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("engine", ["mfma_f32", "mfma_f32_16"])
def test_statistics_before_a_pool_cover_the_unpooled_odd_extents(engine):
    """("stats", False) just before a pool step: the epilogue takes each phase's statistics of
    the unpooled output (its odd last row and column included, which the floor-mode pool
    drops) and stores only the pooled output, so a norm's statistics and a pool after a
    strided transposed convolution need no full-size tensor (KernelBench Level 2 72). Proved
    for all sizes; the pooled output and the partials' combined mean and M2 match float64
    numpy in the strict emulator."""
    from argus.kernels.conv import MOMENT_PLANES

    params = dict(window=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                  transposed=True)
    epilogue = ("bias", ("stats", False), "pool_avg")
    kernel = conv_kernel(2, engine, epilogue)
    report = argus.verify(kernel, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    rng = np.random.default_rng(11)
    n, spatial, cg, ocg = 2, (4, 6), 3, 5
    x = rng.standard_normal((n, *spatial, cg)).astype(np.float32)
    weight = (0.3 * rng.standard_normal((3, 3, 1, ocg, cg))).astype(np.float32)
    bias = rng.standard_normal((1, ocg)).astype(np.float32)
    out = [7, 11]                                         # odd: the pool drops a row, a column
    pooled = [o // 2 for o in out]
    # Y's pooled positions: ceil(plain / stride), the phase view's; the floor's are kept
    y = np.full(conv_output_view(n, [4, 6], (1, 1), 1, ocg, False), np.nan, np.float32)
    s = np.full((MOMENT_PLANES, n, out[0], 2, 1, 1, ocg), np.nan, np.float32)
    args = list(engine_layout(engine, conv_input_view(x, **params), weight)) + [bias]
    argus.compile(kernel, **params).run(*args, s, np.zeros(out[1], np.float32), y,
                                        check="strict")
    full = conv_reference_nd(x, weight, stride=2, padding=1, transposed=True,
                             epilogue=("bias",), bias=bias)
    want = conv_reference_nd(x, weight, stride=2, padding=1, transposed=True,
                             epilogue=epilogue, bias=bias)
    np.testing.assert_allclose(from_phase_view(y, pooled), want, rtol=1e-5, atol=1e-5)
    count, mean, m2 = (p.reshape(-1, ocg).astype(np.float64) for p in s)
    total = count.sum(0)
    grand = (count * mean).sum(0) / total
    spread = (m2 + count * (mean - grand) ** 2).sum(0)               # Chan's combine
    assert (total == n * out[0] * out[1]).all()
    np.testing.assert_allclose(grand, full.reshape(-1, ocg).mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(spread / total, full.reshape(-1, ocg).var(0), rtol=1e-4)
    with pytest.raises(ArgusError, match="statistics other than once at its end"):
        conv_kernel(2, engine, ("bias", ("stats", True), "pool_avg"))


#: the packed engines' cases: (dims, engine, groups, CG, OCG, N, spatial, window, stride,
#: padding, transposed, tiles): channel tails (CG not a multiple of PACK: the host's zeros;
#: an odd number of packs: the guarded pack tail), output-channel tails, ragged position
#: tiles and batch tails, a stride-2 transposed output in 2-D and 3-D, a strided 3-D forward
PACKED_CASES = [
    (2, "mfma_f32_pk", 1, 11, 37, 5, (4, 9), (4, 4), (2, 2), (1, 1), True, (1, 1)),
    (3, "mfma_f32_pk", 2, 6, 5, 2, (3, 4, 5), (3, 3, 3), (1, 1, 2), (1, 1, 1), False, (2, 1)),
    (3, "mfma_f32_pk", 1, 3, 33, 1, (2, 3, 4), (3, 3, 3), (2, 2, 2), (1, 1, 1), True, (1, 1)),
    (2, "mfma_f32_16_pk", 1, 9, 13, 5, (3, 37), (3, 3), (1, 1), (1, 0), False, (2, 1)),
]


def _packed_run(case, engine=None):
    """Case `case` of PACKED_CASES on the strict emulator (as `engine`, its own unless
    given): the output and float64 numpy's."""
    from argus.kernels.conv import PACK

    dims, own, g, cg, ocg, n, spatial, window, stride, padding, transposed, tiles = case
    engine = engine or own
    geometry = dict(window=window, stride=stride, padding=padding, dilation=(1,) * dims,
                    transposed=transposed)
    epilogue = ("bias", "relu")
    rng = np.random.default_rng(cg * 100 + ocg)
    x = rng.standard_normal((n, *spatial, g * cg)).astype(np.float32)
    weight = rng.standard_normal((*window, g, ocg, cg)).astype(np.float32)
    bias = rng.standard_normal((g, ocg)).astype(np.float32)
    output_padding = tuple(1 if transposed and s > 1 else 0 for s in stride)
    out = [conv_output_size(i, k, s, p, 1, transposed, o) for i, k, s, p, o in
           zip(spatial, window, stride, padding, output_padding, strict=True)]
    want = conv_reference_nd(x, weight, stride=stride, padding=padding, transposed=transposed,
                             output_padding=output_padding, epilogue=epilogue, bias=bias)
    X, Wt = engine_layout(engine, conv_input_view(x, groups=g, **geometry), weight)
    if engine.endswith("_pk"):
        assert X.shape[-1] == Wt.shape[-1] == PACK and X.shape[2] == -(-cg // PACK)
    y = np.full(output_shape(engine, conv_output_view(n, out, stride, g, ocg, transposed)),
                np.nan, np.float32)
    compiled = argus.compile(conv_kernel(dims, engine, epilogue), verify=False, tiles=tiles,
                             **geometry)
    compiled.run(X, Wt, bias, y, check="strict")
    return from_phase_view(output_layout(engine, y, back=True), out), want


@pytest.mark.parametrize("case", range(len(PACKED_CASES)))
def test_packed_channels_match_numpy(case):
    """The packed f32 MFMA engines (`PACKED`: X and Wt with PACK input channels innermost,
    one 16-byte load per lane feeding PACK MFMAs) match float64 numpy in the strict emulator
    at channel tails, ragged position tiles, batch tails and stride-2 transposed outputs,
    2-D and 3-D."""
    got, want = _packed_run(PACKED_CASES[case])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


def test_packed_channels_load_a_pack_per_lane_for_pack_mfmas():
    """A packed engine's loads are 16 bytes a lane and PACK MFMAs follow each A and B load
    (a 4x4 stride-2 transposed window: 16 taps over the 4 phases, one dwordx4 of A and one
    of B a tap), where the unpacked engine loads a dword of each per MFMA."""
    from argus.kernels.conv import PACK

    geometry = dict(window=(4, 4), stride=(2, 2), padding=(1, 1), transposed=True)
    counts = {}
    for engine in ("mfma_f32", "mfma_f32_pk"):
        compiled = argus.compile(conv_kernel(2, engine, ("bias",)), verify=False, **geometry)
        ops = [i.opcode for i in compiled.code.disassemble(compiled.code.kernel(compiled.name))]
        counts[engine] = (ops.count("v_mfma_f32_32x32x2_f32"),
                          sum(o.startswith("buffer_load_dword") and o != "buffer_load_dword"
                              for o in ops),
                          ops.count("buffer_load_dword"))
    assert counts["mfma_f32"][:2] == (16, 0)
    assert counts["mfma_f32"][2] >= 2 * 16
    assert counts["mfma_f32_pk"][:2] == (16 * PACK, 2 * 16)


def test_packed_channels_are_proved_with_a_and_b_meeting_at_one_channel():
    """The verifier proves a packed engine for all sizes, its tag assertion (A's and B's
    group and input channel agree at every MFMA) among what it proves; B read at the next
    slot of its pack (a mismatched k) is refuted."""
    from argus.kernels import conv

    params = dict(window=(3, 3), stride=(2, 2), padding=(1, 1), transposed=True, tiles=(1, 2))
    report = argus.verify(conv_kernel(2, "mfma_f32_pk", ("bias",)), **params)
    assert report.ok and report.proved_for_all_sizes, str(report)
    meets = [o for o in report.obligations if o.kind == "tag-assertion" and
             o.message == "A and B meet at one group and input channel"]
    assert meets and all(o.proved for o in meets)
    slots = conv.T.slots

    def skewed(tile, start, spec):
        # B's registers one slot on (A's stay): MFMA s would take channel s of A, s + 1 of B
        shifted = start + 1 if len(spec.shape) == 2 and start + 1 < conv.PACK else start
        return slots(tile, shifted, spec)

    conv.conv_kernel.cache_clear()
    try:
        conv.T.slots = skewed
        report = argus.verify(conv.conv_kernel(2, "mfma_f32_pk", ("bias",)), **params)
    finally:
        conv.T.slots = slots
        conv.conv_kernel.cache_clear()
    refuted = [o for o in report.obligations if o.verdict == "refuted"]
    assert refuted and {o.message for o in refuted} == \
        {"A and B meet at one group and input channel"}, str(report)


def test_the_route_packs_a_phased_output_s_channels_where_they_pack_evenly():
    """`conv_engine` takes a packed engine for a strided transposed output (no weights staged
    in LDS to lose) with PACKED_MIN_TAPS taps a phase or more, undilated, whose input
    channels pack with no MFMA more than unpacked (`packs_evenly`), the 16x16 one where
    32-position tiles would pad a row more than 16-position ones (Level 2 91's 65
    positions); 3 input channels, a single phase and narrow groups stay as they were; the
    packed 16x16 engine with four channel tiles fits Level 2 91's convolution."""
    from argus.kernelbench.templates import conv_fitting
    from argus.kernels.conv import packs_evenly

    assert packs_evenly("mfma_f32", 64) and packs_evenly("mfma_f32_16", 32)
    assert not packs_evenly("mfma_f32", 3) and not packs_evenly("mfma_f32_16", 8)
    assert conv_engine(64, 128, 4, 65, 16) == ("mfma_f32_16_pk", (1, 4))      # 4x4, stride 2
    assert conv_engine(32, 64, 8, 32, 27) == ("mfma_f32_pk", (1, 1))     # 3x3x3, stride 2
    assert conv_engine(32, 24, 8, 33, 27) == ("mfma_f32_16_pk", (1, 2))
    assert conv_engine(7, 24, 8, 33, 27) == ("mfma_f32_pk", (1, 1))   # 16x16: 16 for 8
    assert conv_engine(3, 64, 8, 32, 27) == ("mfma_f32", (1, 1))
    assert conv_engine(64, 128, 1, 65, 9) == ("mfma_f32", (1, 2))
    assert conv_engine(32, 16, 8, 32, 27) == ("mfma_f32_16", (2, 1))
    # 3x3, stride 2 (2.25 taps a phase) packs; too few taps a phase (3 taps, stride 2, 1-D),
    # dilated, or taps unknown: unpacked
    assert conv_engine(64, 64, 4, 128, 9) == ("mfma_f32_pk", (1, 1))
    assert conv_engine(64, 64, 2, 128, 3) == ("mfma_f32", (1, 1))
    assert conv_engine(32, 64, 8, 32, 27, dilation=2) == ("mfma_f32", (1, 1))
    assert conv_engine(32, 64, 8, 32) == ("mfma_f32", (1, 1))
    geometry = dict(window=(4, 4), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                    transposed=True)
    assert conv_fitting(2, "mfma_f32_16_pk", (1, 4), ("bias",), **geometry) == \
        ("mfma_f32_16_pk", (1, 4))


def test_moment_stages_combine_folded_runs_then_finish_over_the_channels(monkeypatch):
    """The route's `Moments` stages (`_moment_stages`) over partials of 16 channels read 4
    rows as one row of 64 lanes, every stage keeping that fold and the finish reading the
    last rows back as rows of 16: with stages small enough that a workgroup walks several
    runs (and a ragged last one), the stages then the finishes give the mean and
    1/sqrt(var + eps) that float64 numpy gives from the partials, where the mean is 1e3
    times the spread (strict emulator; the verifier proves each kernel for all sizes)."""
    pytest.importorskip("torch")
    from argus.kernelbench import road
    from argus.kernelbench import route as router_module
    from argus.kernelbench.templates import Moments
    from argus.kernels.conv import MOMENT_CHUNK, MOMENT_PLANES, moments_reference

    monkeypatch.setattr(router_module, "STAGE_ROWS", (8, 2, 1))
    router = router_module.Router(None, [])
    rows, channels = 1212, 16                   # 303 folded rows: no stage divides them
    partials = router.fresh((MOMENT_PLANES, 1, rows, channels))
    last, view = router_module._moment_stages(router, partials,
                                             (MOMENT_PLANES, 1, rows, channels, 1))
    spans = [step.template.span for step in router.steps]
    assert len(spans) == 3 and spans[0] > 1
    assert [v[3] for _, v in router.steps[0].views] == [64, 64]
    assert view == (MOMENT_PLANES, 1, router.buffers[last][2] * 4, channels, 1)
    rng = np.random.default_rng(3)
    count = rng.integers(0, 9, (1, rows, channels)).astype(np.float32)
    mean = (1e3 + rng.standard_normal((1, rows, channels))).astype(np.float32)
    m2 = (count * rng.uniform(0.5, 1.5, (1, rows, channels))).astype(np.float32)
    arrays = {partials: np.stack([count, mean, m2])}
    for step in router.steps:
        source, out = step.views
        arrays[step.output] = np.full(out[1], np.nan, np.float32)
        road.launch(step.template.kernel(), {
            "P": arrays[source[0]].reshape(source[1]),
            "Span": np.zeros(step.template.span, np.float32),
            "Y": arrays[step.output]})
    for finish in ("mean", "inv"):
        got = np.full((1, channels), np.nan, np.float32)
        kernel = Moments(finish, 1e-5, MOMENT_CHUNK).kernel()
        road.launch(kernel, {"P": arrays[last].reshape(view), "Span": np.zeros(1, np.float32),
                             "Y": got})
        want = moments_reference(arrays[partials].reshape(MOMENT_PLANES, 1, rows, channels, 1),
                                 finish)
        np.testing.assert_allclose(got, want, rtol=1e-6 if finish == "mean" else 2e-3)
        verdict, detail = road.prove(kernel)
        assert verdict == "proved", detail
    verdict, detail = road.prove(router.steps[0].template.kernel())
    assert verdict == "proved", detail


def test_a_moments_run_issues_its_loads_before_combining():
    """A `Moments` run's MOMENT_CHUNK rows are all loaded before the first combine, so the
    loads wait on memory together: a finish over 64 rows of 16 channels is modelled at
    8.6 us (35.7 when each row's combine came between its loads and the next row's, the
    code keeping program order), and a stage's 63 workgroups of 32 runs at 29.5 (137.2)."""
    from argus.kernelbench import road
    from argus.kernelbench.templates import Moments

    finish = road.model_time(Moments("mean", 1e-5, 8).kernel(),
                             {"K3": 3, "O": 1, "R": 64, "M": 16, "Q": 1, "SPAN": 1})
    stage = road.model_time(Moments("", 1e-5, 8, 32).kernel(),
                            {"K3": 3, "O": 1, "R": 15876, "M": 16, "Q": 1, "SPAN": 32,
                             "C": 63, "ONE": 1})
    assert finish < 12.0 and stage < 40.0, (finish, stage)
