"""KernelBench problem files: a `Model(nn.Module)`, module-level size constants, `get_inputs()`
and `get_init_inputs()`. A problem is loaded twice from its source: as published (shapes only,
on torch's meta device, never allocated) and with its size constants scaled down so that the
emulator runs it in seconds.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from pathlib import Path

import attrs

from argus.errors import ArgusError

#: Constants at or below this are kept (axes, kernel sizes, small channel counts).
KEEP = 16
#: A scaled constant stays above this, so every tile loop and grid axis of the templates
#: (64-wide tiles along a row, 64x64 matmul blocks) still runs more than once.
FLOOR = 65
#: The least a constant published below FLOOR is scaled to.
SMALL = 9
#: Elements of all inputs together at the scaled sizes.
BUDGET = 1 << 15
#: Matrix FLOPs (a convolution's or matmul's, as torch's flop counter counts them) the scaled
#: sizes may take per element of BUDGET, and the output's elements count against BUDGET too:
#: the emulator's time goes with the work, and a 3-D convolution with few input elements can
#: still make millions of outputs (64 MFLOP at the default budget: about a minute of emulation)
FLOPS_PER_ELEMENT = 2048


class ProblemError(ArgusError):
    """A problem file that does not follow KernelBench's format."""


@attrs.frozen
class Problem:
    """One problem file, loaded at some size constants."""

    path: Path
    level: str
    name: str                       # the file stem
    constants: dict                 # the size constants as published
    scaled: dict                    # the values used to run it here
    namespace: dict = attrs.field(repr=False, eq=False)

    @property
    def id(self) -> str:
        match = re.match(r"(\d+)", self.name)
        return match.group(1) if match else self.name

    def model(self):
        """The reference model at the scaled sizes, its weights drawn from seed 42."""
        import torch

        torch.manual_seed(42)
        ns = self.namespace
        return ns["Model"](*ns["get_init_inputs"]())

    def inputs(self, seed: int):
        import torch

        torch.manual_seed(seed)
        return list(self.namespace["get_inputs"]())

    def rescaled(self, values: dict) -> Problem | None:
        """The problem at other scaled constants, or None when the model does not build there."""
        source = self.path.read_text()
        if not _constructs(self.path, source, values):
            return None
        return attrs.evolve(self, scaled=dict(values),
                            namespace=_exec(self.path, source, values))

    def published(self, name: str):
        """A constant's value as the file gives it (small ones included)."""
        return _exec(self.path, self.path.read_text(), {})[name]

    def cost(self) -> float:
        """What the scaling bounds: the larger of the inputs' elements and the work
        (`_work`) at the scaled sizes."""
        return max(_input_elements(self.namespace),
                   _work(self.path, self.path.read_text(), self.scaled))

    def full(self):
        """(model, inputs) at the published sizes on the meta device: shapes, no data."""
        import torch

        ns = _exec(self.path, self.path.read_text(), {})
        with torch.device("meta"):
            torch.manual_seed(42)
            inputs = list(ns["get_inputs"]())
            try:
                model = ns["Model"](*ns["get_init_inputs"]())
            except (RuntimeError, NotImplementedError):
                model = None
        if model is None:
            # a constructor that reads tensor values (`.item()`, a mask built by indexing)
            # cannot run on shape-only tensors: build the model's parameters for real, then
            # keep their shapes alone
            torch.manual_seed(42)
            model = ns["Model"](*ns["get_init_inputs"]()).to("meta")
        return model, inputs


def _split_assigns(tree: ast.Module) -> ast.Module:
    """`d, h, w = 16, 32, 32` and `h = w = 64` at the top level as one assignment per name,
    so each is a size constant of its own."""
    body = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple) \
                and len(node.targets[0].elts) == len(node.value.elts) \
                and all(isinstance(t, ast.Name) for t in node.targets[0].elts):
            body += [ast.copy_location(ast.Assign([t], v), node)
                     for t, v in zip(node.targets[0].elts, node.value.elts)]
        elif isinstance(node, ast.Assign) and len(node.targets) > 1 \
                and all(isinstance(t, ast.Name) for t in node.targets):
            body += [ast.copy_location(ast.Assign([t], node.value), node) for t in node.targets]
        else:
            body.append(node)
    tree.body = body
    return ast.fix_missing_locations(tree)


def _exec(path: Path, source: str, overrides: dict) -> dict:
    tree = _split_assigns(ast.parse(source, filename=str(path)))
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in overrides:
            node.value = ast.copy_location(ast.Constant(overrides[node.targets[0].id]),
                                           node.value)
    module = "kernelbench_" + re.sub(r"\W", "_", path.stem)
    namespace = {"__name__": module, "__file__": str(path)}
    try:
        exec(compile(tree, str(path), "exec"), namespace)
    except Exception as err:  # the problem file itself fails: say where
        raise ProblemError(f"{path.name} raised {type(err).__name__} when loaded: {err}",
                           str(path), "check the file runs with `python3 FILE`") from None
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if name not in namespace:
            raise ProblemError(f"{path.name} defines no {name}", str(path),
                               "a KernelBench problem defines Model, get_inputs and "
                               "get_init_inputs")
    return namespace


def _constants(tree: ast.Module, namespace: dict, above: int = KEEP) -> dict:
    """The module-level size constants: names assigned a whole number above `above`, or a
    tuple of whole numbers one of which is, at the top level of the file."""
    found = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        value = namespace.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and value > above:
            found[name] = value
        elif isinstance(value, tuple) and value and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value) \
                and any(v > above for v in value):
            found[name] = value
    return found


def scale(constants: dict, numel, floor: int = FLOOR, budget: int = BUDGET,
          frozen: frozenset = frozenset(), work=None, small: dict | None = None,
          deep: bool = True, multiple: int = 1) -> dict:
    """Halve the largest constant above `floor` (to c // 2 + 1, so tails stay odd) until the
    inputs hold at most BUDGET elements; if they still hold more, halve the constants published
    below `floor` (down to SMALL), then the smallest constant (down to KEEP + 1), then the
    constants published above KEEP down to SMALL, and last the `small` ones (published in
    (SMALL, KEEP], not otherwise scaled) down to SMALL (these two only when `deep`).
    `numel(values)` counts the elements; `work(values)`, when given, the model's work in
    elements (output elements, matrix FLOPs / FLOPS_PER_ELEMENT), which the first two steps
    also bring within the budget (all but the third: a matmul size below the floor would run
    its tile loop once); the constants named in `frozen` keep their values (and so does any
    other constant while it equals one of them). With `multiple` > 1 a constant sharing
    factors with it is scaled to multiples of those (gcd(value, multiple)), so that relations
    such as channels divisible by a group count survive the halving."""
    small = {k: v for k, v in (small or {}).items() if k not in constants}
    values = {**constants, **small}
    held = {v for name in frozen for v in (constants[name] if isinstance(constants[name], tuple)
                                           else (constants[name],))}

    def entries():
        for name, value in values.items():
            if name in frozen:
                continue
            if isinstance(value, tuple):
                for i, v in enumerate(value):
                    if v not in held:
                        yield (name, i), v
            elif value not in held:
                yield (name, None), value

    def halve(name, index, value, lowest):
        # every constant holding this value changes with it, so a shape tuple written out
        # beside its size (bias_shape = (out_features,)) stays equal to it
        new = max(lowest, value // 2 + 1)
        step = math.gcd(value, multiple)
        new = -(-new // step) * step
        if new >= value:
            # no smaller multiple above `lowest`: the value stays, and no longer counts
            held.add(value)
            return
        for key, v in list(values.items()):
            if isinstance(v, tuple):
                values[key] = tuple(new if x == value else x for x in v)
            elif v == value:
                values[key] = new
        if (name, index) in shrunk:
            shrunk.add((name, index))

    shrunk: set = set()
    while (over := numel(values) > budget) or (work is not None and work(values) > budget):
        candidates = [(v, key) for key, v in entries() if v > floor]
        if candidates:
            value, (name, index) = max(candidates)
            halve(name, index, value, floor)
            continue
        # below the floor already (a batch or channel count, as a rule): down to SMALL, which
        # still gives a tile of 8 rows (or of 4 along a strided row) two trips
        candidates = [(v, key) for key, v in entries() if SMALL < v < floor
                      and key[0] in constants and (constants[key[0]] == v or key in shrunk)]
        if candidates:
            value, (name, index) = min(candidates)
            shrunk.add((name, index))
            halve(name, index, value, SMALL)
            continue
        candidates = [(v, key) for key, v in entries() if v > KEEP + 1]
        if candidates and over:
            value, (name, index) = min(candidates)
            halve(name, index, value, KEEP + 1)
            continue
        # last, a constant published above KEEP (a spatial size, as a rule) down to SMALL: a
        # 3-D volume of 17^3 per channel is still a minute of emulation
        candidates = [(v, key) for key, v in entries() if deep and SMALL < v
                      and key[0] in constants and _published(constants, key) > KEEP]
        if not candidates:
            # at the very last, the small constants published in (SMALL, KEEP] (a batch or
            # channel count of 16); the caller checks the model still builds
            candidates = [(v, key) for key, v in entries() if SMALL < v and key[0] in small]
        if not candidates:
            break
        value, (name, index) = min(candidates)
        halve(name, index, value, SMALL)
    return {k: v for k, v in values.items() if k in constants or v != small[k]}


def _published(constants: dict, key: tuple) -> int:
    name, index = key
    return constants[name][index] if index is not None else constants[name]


def load(path: str | Path, level: str | None = None, floor: int = FLOOR,
         budget: int = BUDGET, deep: bool = True) -> Problem:
    """Load a problem file, with its size constants scaled for the emulator (none below
    `floor` unless published so; with `deep=False` nothing published above KEEP goes below
    KEEP + 1 and nothing published at or below KEEP is scaled)."""
    path = Path(path)
    if not path.is_file() or path.suffix != ".py":
        raise ProblemError(f"{path} is not a KernelBench problem file (.py)")
    source = path.read_text()
    try:
        tree = _split_assigns(ast.parse(source, filename=str(path)))
    except SyntaxError as err:
        raise ProblemError(f"{err.msg}", f"{path}:{err.lineno}",
                           "fix the problem file's syntax") from None
    published = _exec(path, source, {})
    constants = _constants(tree, published)

    def numel(values):
        return _input_elements(_exec(path, source, values))

    def work(values):
        return _work(path, source, values)

    # the small constants too when the model still builds with them scaled, else without
    for small in ((_constants(tree, published, SMALL), None) if deep else (None,)):
        scaled = scale(constants, numel, floor, budget, work=work, small=small, deep=deep)
        if _constructs(path, source, scaled):
            break
    else:
        # a relation the halving broke (channels divisible by a group count): one or two
        # constants kept as published (else all divided by one power of two), or every size
        # halved in multiples of the small constants' factors where that at least halves the
        # work to emulate (a halving is the scaling's step)
        scaled = _keeping(path, source, constants, numel, floor, budget, work, deep) \
            or proportional(constants, numel)
        if (multiple := _relations(_constants(tree, published, 1))) > 1:
            other = scale(constants, numel, floor, budget, work=work, deep=deep,
                          multiple=multiple)
            if _constructs(path, source, other) and \
                    2 * work(other) <= work(scaled):
                scaled = other
    namespace = _exec(path, source, scaled)
    return Problem(path, level or _level(path), path.stem, constants, scaled, namespace)


def _relations(constants: dict) -> int:
    """The least common multiple of the integer constants in [2, KEEP] (group counts, kernel
    sizes, factors): the multiple the sizes they may divide are scaled in."""
    values = [x for v in constants.values() for x in (v if isinstance(v, tuple) else (v,))
              if isinstance(x, int) and not isinstance(x, bool) and 2 <= x <= KEEP]
    return math.lcm(*values) if values else 1


def _keeping(path: Path, source: str, constants: dict, numel, floor: int,
             budget: int, work=None, deep: bool = True) -> dict | None:
    """Scaled constants that construct, keeping one constant (then two) at its published
    value: the one a relation ties to a size the scaling does not reach (a LayerNorm over
    `out_channels` applied to the last spatial axis, channels divisible by a group count);
    None when no such choice fits the budget and constructs."""
    names = sorted(constants)
    for count in (1, 2):
        for keep in itertools.combinations(names, count):
            scaled = scale(constants, numel, floor, budget, frozenset(keep), work,
                           deep=deep)
            if numel(scaled) <= 4 * budget and _constructs(path, source, scaled):
                return scaled
    return None


def _input_elements(namespace: dict) -> int:
    """Elements of the inputs `get_inputs` makes in a problem's namespace (on the meta
    device: shapes only)."""
    import torch

    with torch.device("meta"):
        torch.manual_seed(0)
        inputs = namespace["get_inputs"]()
    return sum(math.prod(t.shape) for t in inputs if isinstance(t, torch.Tensor))


def _work(path: Path, source: str, values: dict) -> float:
    """The model's work at `values` in elements: its output's elements plus its matrix FLOPs
    (torch's flop counter, shapes only) over FLOPS_PER_ELEMENT; 0 when it does not run there
    (`_constructs` decides about that)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        ns = _exec(path, source, values)
        with torch.device("meta"), torch.no_grad():
            torch.manual_seed(0)
            model, inputs = ns["Model"](*ns["get_init_inputs"]()), ns["get_inputs"]()
            with FlopCounterMode(display=False) as counter:
                out = model(*inputs)
    except Exception:  # noqa: BLE001 (a model that fails here is refused elsewhere)
        return 0.0
    elements = out.numel() if isinstance(out, torch.Tensor) else 0
    return elements + counter.get_total_flops() / FLOPS_PER_ELEMENT


def _constructs(path: Path, source: str, values: dict) -> bool:
    """Whether the Model builds and runs at these constants (shapes only): scaling each
    constant on its own can break a relation the model checks (channels divisible by
    groups)."""
    import torch

    try:
        ns = _exec(path, source, values)
        with torch.device("meta"), torch.no_grad():
            ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
    except Exception:  # noqa: BLE001 (any failure of the user's model means: do not use)
        return False
    return True


def proportional(constants: dict, numel) -> dict:
    """Every constant divided by one power of two (exactly where it divides, so ratios and
    divisibility between constants survive) until the inputs fit BUDGET or a constant would
    drop below SMALL."""
    def divided(factor):
        def one(v):
            return max(1, v // factor) if v > KEEP else v
        return {k: tuple(one(x) for x in v) if isinstance(v, tuple) else one(v)
                for k, v in constants.items()}

    factor = 1
    while numel(divided(factor)) > BUDGET and all(
            (min(v) if isinstance(v, tuple) else v) // (factor * 2) >= SMALL
            for v in constants.values()):
        factor *= 2
    return divided(factor)


def _level(path: Path) -> str:
    for part in reversed(path.resolve().parts[:-1]):
        if re.fullmatch(r"level\d+", part):
            return part
    return path.parent.name


def discover(folder: str | Path, only: tuple[str, ...] = ()) -> list[Path]:
    """The problem files of a level folder, in KernelBench's numeric order; `only` keeps the
    problems whose number or file stem is listed."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ProblemError(f"{folder} is not a folder", str(folder),
                           "give a KernelBench level folder, e.g. KernelBench/level1")
    files = [p for p in folder.glob("*.py") if not p.name.startswith("_")]

    def key(p: Path):
        match = re.match(r"(\d+)", p.stem)
        return (int(match.group(1)) if match else math.inf, p.stem)

    files.sort(key=key)
    if only:
        wanted = set(only)
        files = [p for p in files if p.stem in wanted
                 or (re.match(r"(\d+)", p.stem) and re.match(r"(\d+)", p.stem).group(1) in wanted)]
        known = {p.stem for p in files} | {re.match(r"(\d+)", p.stem).group(1) for p in files
                                           if re.match(r"(\d+)", p.stem)}
        missing = sorted(wanted - known)
        if missing:
            raise ProblemError(f"--only names problems not in {folder}: {', '.join(missing)}",
                               str(folder), "give problem numbers or file stems")
    if not files:
        raise ProblemError(f"{folder} holds no problem files", str(folder),
                           "give a KernelBench level folder, e.g. KernelBench/level1")
    return files
