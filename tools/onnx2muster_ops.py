# SPDX-License-Identifier: MIT
"""tools/onnx2muster.py's op handlers: one ONNX op computed at run time
becomes muster nodes. A handler takes (where, ins, attrs): the node being
converted (where.c is the converter), its inputs as Values (None for an
omitted optional one) and its attributes; it returns one Value per ONNX
output (None for an output muster does not compute). Constants that
configure an op (shapes, axes, pads, sizes) become muster attributes."""

import numpy as np

from onnx2muster_lib import (FLOATS, INTS, MAX_IO, MAX_RANK, ConstRequired, ConvertError,
                             Unsupported, Value, broadcast, matmul_shape, mu_dtype, norm_axis,
                             numel, reshape_target, slice_len, slice_plan, squeeze_shape,
                             unsqueeze_shape)


def _const(where, v, what):
    """The array of constant v (None when v is omitted); an error naming
    what when it is computed at run time."""
    if v is None:
        return None
    if v.const is None:
        msg = (f"{where}: {what} ({v.name!r}) must be a constant, and it is computed at run "
               "time")
        raise ConstRequired(msg, v.deps) if v.deps else ConvertError(msg)
    return np.asarray(v.const)


def _const_ints(where, v, what):
    a = _const(where, v, what)
    return None if a is None else [int(x) for x in a.reshape(-1)]


def _const_float(where, v, what):
    a = _const(where, v, what)
    return None if a is None or a.size == 0 else float(a.reshape(-1)[0])


def _input(ins, k):
    return ins[k] if len(ins) > k else None


# ---- elementwise ----

def h_binary(op):
    def handler(where, ins, attrs):
        a, b = ins[:2]
        if op == "prelu" and where.c.opset < 7 and b.rank == 1 and a.rank > 2 \
                and b.shape[0] == a.shape[1] and b.shape[0] != a.shape[-1]:
            # PRelu-6: a slope per channel (dim 1), before numpy broadcasting
            b = _reshape_to(where, b, (b.shape[0],) + (1,) * (a.rank - 2), None,
                            name=f"{where.name}/per_channel")
        extra = {"fmod": int(attrs["fmod"])} if op == "mod" and attrs.get("fmod") else None
        return [where.c.typed_op(where, op, [a, b], broadcast(a.shape, b.shape), attrs=extra,
                                 out=where.out(), logical=a.dt)]
    return handler


def h_pow(where, ins, attrs):
    a, b = ins[:2]
    shape = broadcast(a.shape, b.shape)
    if a.dt in INTS and b.dt in FLOATS:     # x ** y in floats, then back to x's type
        return [where.c.float_op(where, "pow", [a, b], shape, out=where.out(), logical=a.dt)]
    return [where.c.typed_op(where, "pow", [a, b], shape, dt=where.c.common_dtype([a]),
                             out=where.out(), logical=a.dt)]


def h_bitshift(where, ins, attrs):
    a, b = ins[:2]
    d = attrs["direction"]
    d = d.decode() if isinstance(d, bytes) else d
    if d not in ("LEFT", "RIGHT"):
        raise ConvertError(f"{where}: direction {d!r}")
    op = "shift_left" if d == "LEFT" else "shift_right"
    return [where.c.typed_op(where, op, [a, b], broadcast(a.shape, b.shape), out=where.out(),
                             logical=a.dt)]


def h_compare(op):
    def handler(where, ins, attrs):
        a, b = ins[:2]
        return [where.c.typed_op(where, op, [a, b], broadcast(a.shape, b.shape),
                                 out_dt="BOOL", out=where.out())]
    return handler


def h_variadic(op):
    """Min, Max, Sum, Mean: a chain of binary ops, left to right."""
    def handler(where, ins, attrs):
        vals = [v for v in ins if v is not None]
        mop = {"Min": "min", "Max": "max", "Sum": "add", "Mean": "add"}[op]
        acc = vals[0]
        last = len(vals) - 1 if op != "Mean" else len(vals)
        for i, v in enumerate(vals[1:], 1):
            acc = where.c.typed_op(where, mop, [acc, v], broadcast(acc.shape, v.shape),
                                   out=where.out() if i == last else None, logical=vals[0].dt,
                                   name=f"{where.name}/{i}")
        if op == "Mean":
            n = Value(where.c.fresh(f"{where.name}::count"), (), acc.dt,
                      const=np.array(len(vals), np.float64))
            acc = where.c.typed_op(where, "div", [acc, n], acc.shape, out=where.out(),
                                   logical=vals[0].dt)
        elif len(vals) == 1:
            acc = where.c.typed_op(where, "reshape", [acc], acc.shape, attrs={"shape": list(acc.shape)},
                                   out=where.out())
        return [acc]
    return handler


def h_where(where, ins, attrs):
    cond, x, y = ins
    c = where.c
    dt = c.common_dtype([x, y])
    shape = broadcast(cond.shape, x.shape, y.shape)
    deps = cond.deps | x.deps | y.deps
    args = [c.arg(where, cond, "BOOL"), c.arg(where, x, dt), c.arg(where, y, dt)]
    return [c.emit(where, "where", args, shape, dt, out=where.out(), logical=x.dt, deps=deps)]


# unary ops that compute in F32: ONNX op -> (muster op, {ONNX attr: default})
FLOAT_UNARY = {
    "Sigmoid": ("sigmoid", {}), "Tanh": ("tanh", {}), "Sqrt": ("sqrt", {}), "Exp": ("exp", {}),
    "Erf": ("erf", {}), "Log": ("log", {}), "Reciprocal": ("reciprocal", {}),
    "Floor": ("floor", {}), "Ceil": ("ceil", {}), "Round": ("round", {}), "Sin": ("sin", {}),
    "Cos": ("cos", {}), "Tan": ("tan", {}), "Asin": ("asin", {}), "Acos": ("acos", {}),
    "Atan": ("atan", {}), "Sinh": ("sinh", {}), "Cosh": ("cosh", {}), "Asinh": ("asinh", {}),
    "Acosh": ("acosh", {}), "Atanh": ("atanh", {}), "Softplus": ("softplus", {}),
    "Softsign": ("softsign", {}), "Elu": ("elu", {"alpha": 1.0}),
    "Selu": ("selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
    "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": ("hard_swish", {}), "Celu": ("celu", {"alpha": 1.0}),
    "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
    "Shrink": ("shrink", {"lambd": 0.5, "bias": 0.0}), "Gelu": ("gelu", {}),
}


def h_float_unary(onnx_op):
    op, defaults = FLOAT_UNARY[onnx_op]

    def handler(where, ins, attrs):
        x = ins[0]
        extra = {k: float(attrs.get(k, d)) for k, d in defaults.items()}
        if onnx_op == "Gelu":
            approx = attrs.get("approximate", b"none")
            approx = approx.decode() if isinstance(approx, bytes) else approx
            if approx not in ("none", "tanh"):
                raise ConvertError(f"{where}: Gelu approximate={approx!r} is not supported")
            extra = {"approximate": approx} if approx != "none" else {}
        return [where.c.float_op(where, op, [x], x.shape, extra or None, out=where.out(),
                                 logical=x.dt)]
    return handler


def h_typed_unary(op):
    def handler(where, ins, attrs):
        x = ins[0]
        return [where.c.typed_op(where, op, [x], x.shape, out=where.out(), logical=x.dt)]
    return handler


def h_clip(where, ins, attrs):
    x = ins[0]
    if where.c.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo = _const_float(where, _input(ins, 1), "min")
        hi = _const_float(where, _input(ins, 2), "max")
    extra = {}
    if lo is not None:
        extra["min"] = float(lo)
    if hi is not None:
        extra["max"] = float(hi)
    return [where.c.typed_op(where, "clip", [x], x.shape, attrs=extra or None, out=where.out(),
                             logical=x.dt)]


def h_isx(op):
    def handler(where, ins, attrs):
        x = ins[0]
        extra = {k: int(attrs[k]) for k in ("detect_positive", "detect_negative") if k in attrs}
        return [where.c.typed_op(where, op, [x], x.shape, attrs=extra or None, out_dt="BOOL",
                                 out=where.out())]
    return handler


def h_cast(where, ins, attrs):
    x = ins[0]
    to = mu_dtype(int(attrs["to"]), "Cast's target") if "to" in attrs else ins[1].dt
    if x.actual == to:        # nothing to do (at most the ONNX dtype changes)
        return [Value(x.name, x.shape, to, node=x.node, deps=x.deps)]
    return [where.c.typed_op(where, "cast", [x], x.shape, dt=x.actual, attrs={"to": to},
                             out=where.out(), out_dt=to)]


def h_identity(where, ins, attrs):
    return [ins[0]]


def h_dropout(where, ins, attrs):
    ratio = _const_float(where, _input(ins, 1), "ratio")
    mode = _const_ints(where, _input(ins, 2), "training_mode")
    if mode and any(mode) and (ratio is None or ratio != 0):
        raise Unsupported(f"{where}: Dropout in training mode draws a random mask (muster runs "
                          "inference)")
    x = ins[0]
    mask = Value(where.c.fresh(f"{where.name}::mask"), x.shape, "BOOL",
                 const=np.ones(x.shape, bool))
    return [x, mask]


# ---- linear algebra, normalization ----

def h_gemm(where, ins, attrs):
    a, b = ins[:2]
    c = _input(ins, 2)
    if a.rank != 2 or b.rank != 2:
        raise ConvertError(f"{where}: Gemm needs 2-D A and B, got {list(a.shape)} and "
                           f"{list(b.shape)}")
    ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if k != kb:
        raise ConvertError(f"{where}: inner dimensions {k} and {kb} differ")
    out = {}
    if ta:
        out["transA"] = 1
    if tb:
        out["transB"] = 1
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        out["alpha"] = alpha
    args = [a, b]
    if c is not None:
        if broadcast(c.shape, (m, n)) != (m, n):
            raise ConvertError(f"{where}: C {list(c.shape)} does not broadcast to [{m}, {n}]")
        if beta != 1.0:
            out["beta"] = beta
        args.append(c)
    return [where.c.float_op(where, "gemm", args, (m, n), out or None, out=where.out(),
                             logical=a.dt)]


def h_matmul(where, ins, attrs):
    a, b = ins[:2]
    return [where.c.float_op(where, "matmul", [a, b], matmul_shape(a.shape, b.shape),
                             out=where.out(), logical=a.dt)]


def _norm_param(where, p, inner, norm_shape, what):
    """A layernorm scale/bias as muster takes it: numel inner or 1."""
    if p is None:
        return None
    if numel(p.shape) in (inner, 1):
        return p
    if p.const is None:
        raise ConvertError(f"{where}: {what} {list(p.shape)} computed at run time must have "
                           f"{inner} elements (the normalized size) or 1")
    try:
        full = np.broadcast_to(p.const, norm_shape)
    except ValueError:
        raise ConvertError(f"{where}: {what} {list(p.shape)} does not broadcast to the "
                           f"normalized shape {list(norm_shape)}") from None
    return where.c.constant(None, full.copy(), p.dt, name=where.c.fresh(f"{p.name}::broadcast"))


def h_layernorm(where, ins, attrs):
    x = ins[0]
    c = where.c
    axis = norm_axis(int(attrs.get("axis", -1)), x.rank)
    eps = float(attrs.get("epsilon", 1e-5))
    norm_shape = x.shape[axis:]
    inner = numel(norm_shape)
    g = _norm_param(where, ins[1], inner, norm_shape, "scale")
    b = _norm_param(where, _input(ins, 2), inner, norm_shape, "bias")
    y = c.float_op(where, "layernorm", [x, g] + ([b] if b is not None else []), x.shape,
                   {"axis": axis, "epsilon": eps}, out=where.out(), logical=x.dt)
    outs = [y, None, None]
    n = where.node
    if any(o and o in c.needed for o in n.output[1:]):
        # Mean and InvStdDev: the statistics, computed on their own
        axes = list(range(axis, x.rank))
        kept = tuple(1 if i >= axis else d for i, d in enumerate(x.shape))
        red = {"axes": axes, "keepdims": 1}
        mean = c.float_op(where, "reduce_mean", [x], kept, red, name=f"{where.name}/mean",
                          out=where.out(1) if len(n.output) > 1 and n.output[1] else None)
        d = c.float_op(where, "sub", [x, mean], x.shape, name=f"{where.name}/centre")
        var = c.float_op(where, "reduce_mean", [c.float_op(where, "mul", [d, d], x.shape,
                                                           name=f"{where.name}/square")],
                         kept, red, name=f"{where.name}/var")
        e = Value(c.fresh(f"{where.name}::eps"), (), "F32", const=np.float32(eps))
        sd = c.float_op(where, "sqrt", [c.float_op(where, "add", [var, e], kept,
                                                   name=f"{where.name}/var_eps")],
                        kept, name=f"{where.name}/sd")
        inv = c.float_op(where, "reciprocal", [sd], kept, name=f"{where.name}/inv",
                         out=where.out(2) if len(n.output) > 2 and n.output[2] else None)
        outs = [y, mean, inv]
    return outs


def h_batchnorm(where, ins, attrs):
    x = ins[0]
    n = where.node
    if attrs.get("training_mode", 0) or any(o and o in where.c.needed for o in n.output[1:]):
        raise Unsupported(f"{where}: BatchNormalization in training mode (running statistics "
                          "as outputs); muster runs inference")
    return [where.c.float_op(where, "batchnorm", ins[:5], x.shape,
                             {"epsilon": float(attrs.get("epsilon", 1e-5))}, out=where.out(),
                             logical=x.dt)]


def h_instnorm(where, ins, attrs):
    x = ins[0]
    return [where.c.float_op(where, "instance_norm", ins[:3], x.shape,
                             {"epsilon": float(attrs.get("epsilon", 1e-5))}, out=where.out(),
                             logical=x.dt)]


def h_softmax(op):
    def handler(where, ins, attrs):
        x = ins[0]
        c = where.c
        axis = norm_axis(int(attrs.get("axis", -1 if c.opset >= 13 else 1)), x.rank)
        if c.opset >= 13 or axis == x.rank - 1:
            return [c.float_op(where, op, [x], x.shape, {"axis": axis}, out=where.out(),
                               logical=x.dt)]
        # opset < 13: over the 2-D coercion [prod(:axis), prod(axis:)]
        flat = (numel(x.shape[:axis]), numel(x.shape[axis:]))
        h = c.typed_op(where, "reshape", [x], flat, attrs={"shape": list(flat)},
                       name=f"{where.name}/to2d")
        h = c.float_op(where, op, [h], flat, {"axis": 1}, logical=x.dt)
        return [c.typed_op(where, "reshape", [h], x.shape, attrs={"shape": list(x.shape)},
                           name=f"{where.name}/back", out=where.out(), logical=x.dt)]
    return handler


def h_reduce(op, axes_input_since):
    def handler(where, ins, attrs):
        x = ins[0]
        keep = int(attrs.get("keepdims", 1))
        if where.c.opset < axes_input_since:
            axes = attrs.get("axes")
        else:
            axes = _const_ints(where, _input(ins, 1), "axes")
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [where.c.typed_op(where, "reshape", [x], x.shape,
                                         attrs={"shape": list(x.shape)}, out=where.out())]
            axes = list(range(x.rank))
        axes = sorted({norm_axis(int(a), x.rank, "reduce axis") for a in axes})
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep \
            else tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [where.c.float_op(where, op, [x], shape, {"axes": axes, "keepdims": keep},
                                 out=where.out(), logical=x.dt)]
    return handler


def h_arg(op):
    def handler(where, ins, attrs):
        x = ins[0]
        axis = norm_axis(int(attrs.get("axis", 0)), x.rank)
        keep = int(attrs.get("keepdims", 1))
        shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape)) if keep \
            else tuple(d for i, d in enumerate(x.shape) if i != axis)
        extra = {"axis": axis, "keepdims": keep,
                 "select_last_index": int(attrs.get("select_last_index", 0))}
        return [where.c.typed_op(where, op, [x], shape, attrs=extra, out_dt="I64",
                                 out=where.out())]
    return handler


def h_cumsum(where, ins, attrs):
    x = ins[0]
    axis = norm_axis(_const_ints(where, ins[1], "axis")[0], x.rank)
    extra = {"axis": axis, "exclusive": int(attrs.get("exclusive", 0)),
             "reverse": int(attrs.get("reverse", 0))}
    return [where.c.typed_op(where, "cumsum", [x], x.shape, attrs=extra, out=where.out(),
                             logical=x.dt)]


# ---- shapes and data movement (any dtype) ----

def _reshape_to(where, x, shape, out, name=None):
    for i, d in enumerate(shape):   # muster reads a 0 as "keep the input dim"
        if d == 0 and (i >= x.rank or x.shape[i] != 0):
            raise ConvertError(f"{where}: reshape to {list(shape)} has a zero-size dim muster "
                               "cannot express")
    return where.c.typed_op(where, "reshape", [x], shape, attrs={"shape": list(shape)}, out=out,
                            logical=x.dt, name=name)


def h_reshape(where, ins, attrs):
    x = ins[0]
    shape = _const_ints(where, ins[1], "the target shape") if where.c.opset >= 5 \
        else list(attrs["shape"])
    target = reshape_target(x.shape, shape, bool(attrs.get("allowzero", 0)))
    if any(d == 0 for d in target) and numel(x.shape) == 0:
        # an empty tensor to an empty shape: no 0 to misread as "keep"
        return [where.c.typed_op(where, "reshape", [x], target,
                                 attrs={"shape": list(target), "allowzero": 1},
                                 out=where.out(), logical=x.dt)]
    return [_reshape_to(where, x, target, where.out())]


def h_unsqueeze(where, ins, attrs):
    axes = attrs.get("axes") if where.c.opset < 13 else _const_ints(where, ins[1], "axes")
    return [_reshape_to(where, ins[0], unsqueeze_shape(ins[0].shape, axes), where.out())]


def h_squeeze(where, ins, attrs):
    if where.c.opset < 13:
        axes = attrs.get("axes")
    else:
        axes = _const_ints(where, _input(ins, 1), "axes")
    return [_reshape_to(where, ins[0], squeeze_shape(ins[0].shape, axes), where.out())]


def h_flatten(where, ins, attrs):
    x = ins[0]
    axis = norm_axis(int(attrs.get("axis", 1)), x.rank, "flatten axis", allow_end=True)
    shape = (numel(x.shape[:axis]), numel(x.shape[axis:]))
    return [where.c.typed_op(where, "flatten", [x], shape, attrs={"axis": axis},
                             out=where.out(), logical=x.dt)]


def _transpose(where, x, perm, out=None, name=None):
    return where.c.typed_op(where, "transpose", [x], tuple(x.shape[p] for p in perm),
                            attrs={"perm": list(perm)}, out=out, logical=x.dt, name=name)


def h_transpose(where, ins, attrs):
    x = ins[0]
    perm = [int(p) for p in attrs.get("perm", range(x.rank - 1, -1, -1))]
    if sorted(perm) != list(range(x.rank)):
        raise ConvertError(f"{where}: perm {perm} is not a permutation of {x.rank} dims")
    return [_transpose(where, x, perm, out=where.out())]


def _concat(where, parts, axis, out, name=None):
    """concat of Values along axis, chained when over MAX_IO inputs."""
    c = where.c
    dt = c.common_dtype(parts)
    while len(parts) > MAX_IO:
        head = parts[:MAX_IO]
        shape = list(head[0].shape)
        shape[axis] = sum(p.shape[axis] for p in head)
        parts = [c.typed_op(where, "concat", head, shape, dt=dt, attrs={"axis": axis},
                            name=f"{where.name}/part", logical=head[0].dt)] + parts[MAX_IO:]
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    return c.typed_op(where, "concat", parts, shape, dt=dt, attrs={"axis": axis}, out=out,
                      name=name, logical=parts[0].dt)


def h_concat(where, ins, attrs):
    parts = [v for v in ins if v is not None]
    axis = norm_axis(int(attrs["axis"]), parts[0].rank, "concat axis")
    for p in parts[1:]:
        if p.rank != parts[0].rank or any(p.shape[i] != parts[0].shape[i]
                                          for i in range(p.rank) if i != axis):
            raise ConvertError(f"{where}: {p.name!r} {list(p.shape)} does not match "
                               f"{list(parts[0].shape)} off axis {axis}")
    return [_concat(where, parts, axis, where.out())]


def _gather_const(where, x, axis, idx, out=None, name=None):
    """gather along axis by constant indices (an I64 weight)."""
    c = where.c
    iv = Value(c.fresh(f"{where.name}::indices"), np.shape(idx), "I64",
               const=np.asarray(idx, np.int64))
    shape = x.shape[:axis] + iv.shape + x.shape[axis + 1:]
    return c.emit(where, "gather", [c.arg(where, x, x.actual), c.arg(where, iv, "I64")], shape,
                  x.actual, {"axis": axis} if axis else None, out=out, name=name,
                  logical=x.dt, deps=x.deps)


def _slice_node(where, x, plan, out=None, name=None):
    """A muster slice for a plan of ranges; a negative step becomes a gather
    of those indices along its axis."""
    shape = list(x.shape)
    starts, ends, axes, steps = [], [], [], []
    back = [(a, b, e, s) for a, b, e, s in plan if s < 0]
    fwd = [(a, b, e, s) for a, b, e, s in plan if s > 0]
    for a, b, e, s in fwd:
        shape[a] = slice_len(b, e, s)
        starts.append(b)
        ends.append(max(e, b))
        axes.append(a)
        steps.append(s)
    attrs = {"starts": starts, "ends": ends, "axes": axes}
    if any(s != 1 for s in steps):
        attrs["steps"] = steps
    if not back:
        return where.c.typed_op(where, "slice", [x], shape, attrs=attrs, out=out, name=name,
                                logical=x.dt)
    h = x
    if fwd:
        h = where.c.typed_op(where, "slice", [x], shape, attrs=attrs, name=f"{where.name}/fwd",
                             logical=x.dt)
    for k, (a, b, e, s) in enumerate(back):
        last = k == len(back) - 1
        h = _gather_const(where, h, a, list(range(b, e, s)), out=out if last else None,
                          name=name if last else f"{where.name}/rev{k}")
    return h


def h_slice(where, ins, attrs):
    x = ins[0]
    if where.c.opset < 10:
        args = attrs["starts"], attrs["ends"], attrs.get("axes"), None
    else:
        names = ("starts", "ends", "axes", "steps")
        args = [_const_ints(where, _input(ins, i), names[i - 1]) for i in range(1, 5)]
    return [_slice_node(where, x, slice_plan(x.shape, *args), out=where.out())]


def h_split(where, ins, attrs):
    x = ins[0]
    n = where.node
    sizes_in = _const_ints(where, _input(ins, 1), "split sizes") if where.c.opset >= 13 else None
    sizes = where.c.split_sizes(x.shape, [None, sizes_in], attrs, len(n.output))
    axis = norm_axis(attrs.get("axis", 0), x.rank)
    outs, begin = [], 0
    for k, (o, size) in enumerate(zip(n.output, sizes)):
        if o and o in where.c.needed:
            outs.append(_slice_node(where, x, [(axis, begin, begin + size, 1)],
                                    out=where.c.value_name(o), name=f"{where.name}/{k}"))
        else:
            outs.append(None)
        begin += size
    return outs


def h_expand(where, ins, attrs):
    x = ins[0]
    shape = broadcast(x.shape, tuple(_const_ints(where, ins[1], "the shape")))
    return [where.c.typed_op(where, "expand", [x], shape, attrs={"shape": list(shape)},
                             out=where.out(), logical=x.dt)]


def h_tile(where, ins, attrs):
    x = ins[0]
    reps = _const_ints(where, ins[1], "repeats")
    if len(reps) != x.rank:
        raise ConvertError(f"{where}: {len(reps)} repeats for rank {x.rank}")
    shape = tuple(d * r for d, r in zip(x.shape, reps))
    return [where.c.typed_op(where, "tile", [x], shape, attrs={"repeats": reps},
                             out=where.out(), logical=x.dt)]


def h_gather(where, ins, attrs):
    data, idx = ins[0], ins[1]
    axis = norm_axis(int(attrs.get("axis", 0)), data.rank, "gather axis")
    shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
    if len(shape) > MAX_RANK:
        raise ConvertError(f"{where}: the result would have rank {len(shape)} (muster: 8)")
    if idx.dt not in ("I64", "I32"):
        raise ConvertError(f"{where}: indices {idx.name!r} are {idx.dt}, not I64 or I32")
    c = where.c
    args = [c.arg(where, data, data.actual), c.arg(where, idx, idx.actual)]
    return [c.emit(where, "gather", args, shape, data.actual, {"axis": axis} if axis else None,
                   out=where.out(), logical=data.dt, deps=data.deps | idx.deps)]


def h_gather_elements(where, ins, attrs):
    data, idx = ins[0], ins[1]
    axis = norm_axis(int(attrs.get("axis", 0)), data.rank, "axis")
    c = where.c
    args = [c.arg(where, data, data.actual), c.arg(where, idx, idx.actual)]
    return [c.emit(where, "gather_elements", args, idx.shape, data.actual, {"axis": axis},
                   out=where.out(), logical=data.dt, deps=data.deps | idx.deps)]


def h_trilu(where, ins, attrs):
    x = ins[0]
    k = _const_ints(where, _input(ins, 1), "k")
    extra = {"upper": int(attrs.get("upper", 1)), "k": k[0] if k else 0}
    return [where.c.typed_op(where, "trilu", [x], x.shape, attrs=extra, out=where.out(),
                             logical=x.dt)]


def h_pad(where, ins, attrs):
    x = ins[0]
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if where.c.opset < 11:
        pads, value = list(attrs["pads"]), float(attrs.get("value", 0.0))
    else:
        pads = _const_ints(where, ins[1], "pads")
        value = _const(where, _input(ins, 2), "the constant value")
        value = 0.0 if value is None else float(value.reshape(-1)[0])
    if len(pads) != 2 * x.rank:
        raise ConvertError(f"{where}: {len(pads)} pads for rank {x.rank}")
    if mode not in ("constant", "reflect", "edge"):
        raise Unsupported(f"{where}: Pad mode {mode!r} (muster pads constant, reflect, edge)")
    shape = tuple(d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape))
    extra = {"pads": pads, "mode": mode}
    if value:
        extra["value"] = value
    return [where.c.typed_op(where, "pad", [x], shape, attrs=extra, out=where.out(),
                             logical=x.dt)]


def h_depth_space(to_space):
    """DepthToSpace / SpaceToDepth: a reshape, a transpose, a reshape."""
    def handler(where, ins, attrs):
        x = ins[0]
        bs = int(attrs["blocksize"])
        n, ch, h, w = x.shape
        dcr = attrs.get("mode", b"DCR") in (b"DCR", "DCR")
        if to_space and dcr:
            mid, perm = (n, bs, bs, ch // (bs * bs), h, w), (0, 3, 4, 1, 5, 2)
        elif to_space:
            mid, perm = (n, ch // (bs * bs), bs, bs, h, w), (0, 1, 4, 2, 5, 3)
        else:
            mid, perm = (n, ch, h // bs, bs, w // bs, bs), (0, 3, 5, 1, 2, 4)
        final = (n, ch // (bs * bs), h * bs, w * bs) if to_space \
            else (n, ch * bs * bs, h // bs, w // bs)
        a = _reshape_to(where, x, mid, None, name=f"{where.name}/split")
        b = _transpose(where, a, perm, name=f"{where.name}/move")
        return [_reshape_to(where, b, final, where.out())]
    return handler


def h_eyelike(where, ins, attrs):
    x = ins[0]
    dt = mu_dtype(int(attrs["dtype"]), "EyeLike's dtype") if "dtype" in attrs else x.dt
    eye = np.eye(x.shape[0], x.shape[1], int(attrs.get("k", 0)))
    return [where.c.constant(where.node.output[0], eye, dt)]


# ---- convolution, pooling, resize ----

def _pads(where, attrs, spatial, kernel, strides, dilations):
    """Explicit [begin..., end...] pads, auto_pad resolved as ONNX does."""
    k = len(spatial)
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        pads = [int(p) for p in attrs.get("pads", [0] * 2 * k)]
        if len(pads) != 2 * k:
            raise ConvertError(f"{where}: {len(pads)} pads for {k} spatial dims")
        return pads
    if auto == "VALID":
        return [0] * 2 * k
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ConvertError(f"{where}: unknown auto_pad {auto!r}")
    begin, end = [], []
    for d, kk, s, dl in zip(spatial, kernel, strides, dilations):
        out = -(-d // s)
        total = max(0, (out - 1) * s + (kk - 1) * dl + 1 - d)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin + end


def _geometry(where, x, kernel, attrs, ceil_mode=0):
    """strides, dilations, pads and output spatial dims of a conv or pool."""
    k = x.rank - 2
    if not 1 <= k <= 3 or len(kernel) != k:
        raise ConvertError(f"{where}: {k} spatial dims (muster: 1 to 3) or a kernel of "
                           f"{len(kernel)} dims")
    strides = [int(s) for s in attrs.get("strides", [1] * k)]
    dil = [int(d) for d in attrs.get("dilations", [1] * k)]
    pads = _pads(where, attrs, x.shape[2:], kernel, strides, dil)
    out = []
    for i in range(k):
        room = x.shape[2 + i] + pads[i] + pads[k + i] - ((kernel[i] - 1) * dil[i] + 1)
        if room < 0:
            raise ConvertError(f"{where}: the window is larger than the padded input")
        out.append((room + (strides[i] - 1 if ceil_mode else 0)) // strides[i] + 1)
    return strides, dil, pads, out


def h_conv(where, ins, attrs):
    x, w = ins[:2]
    b = _input(ins, 2)
    kernel = list(w.shape[2:])
    strides, dil, pads, out = _geometry(where, x, kernel, attrs)
    group = int(attrs.get("group", 1))
    extra = {"strides": strides, "pads": pads, "dilations": dil}
    if group != 1:
        extra["group"] = group
    shape = (x.shape[0], w.shape[0]) + tuple(out)
    return [where.c.float_op(where, "conv", [x, w] + ([b] if b is not None else []), shape,
                             extra, out=where.out(), logical=x.dt)]


def h_conv_transpose(where, ins, attrs):
    x, w = ins[:2]
    b = _input(ins, 2)
    k = x.rank - 2
    kernel = list(w.shape[2:])
    strides = [int(v) for v in attrs.get("strides", [1] * k)]
    dil = [int(v) for v in attrs.get("dilations", [1] * k)]
    opad = [int(v) for v in attrs.get("output_padding", [0] * k)]
    group = int(attrs.get("group", 1))
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if not 1 <= k <= 3 or len(kernel) != k:
        raise ConvertError(f"{where}: {k} spatial dims (muster: 1 to 3)")
    shape = attrs.get("output_shape")
    if shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = [d * s for d, s in zip(x.shape[2:], strides)]
    if shape is not None:
        shape = [int(v) for v in shape][-k:]
        pads = [0] * 2 * k
        for i in range(k):
            total = (strides[i] * (x.shape[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1
                     - shape[i])
            if total < 0:                 # a larger output: zeros (and bias) at the end
                opad[i] -= total
                continue
            small = total // 2
            pads[i], pads[k + i] = (small, total - small) if auto == "SAME_UPPER" \
                else (total - small, small)
    elif auto == "VALID" or auto in ("NOTSET", ""):
        pads = [int(v) for v in attrs.get("pads", [0] * 2 * k)]
    else:
        raise ConvertError(f"{where}: unknown auto_pad {auto!r}")
    out = [strides[i] * (x.shape[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1
           - pads[i] - pads[k + i] for i in range(k)]
    extra = {"strides": strides, "pads": pads, "dilations": dil}
    if any(opad):
        extra["output_padding"] = opad
    if group != 1:
        extra["group"] = group
    shape = (x.shape[0], w.shape[1] * group) + tuple(out)
    return [where.c.float_op(where, "conv_transpose", [x, w] + ([b] if b is not None else []),
                             shape, extra, out=where.out(), logical=x.dt)]


def h_pool(op):
    def handler(where, ins, attrs):
        x = ins[0]
        c = where.c
        kernel = [int(k) for k in attrs["kernel_shape"]]
        ceil_mode = int(attrs.get("ceil_mode", 0))
        strides, dil, pads, out = _geometry(where, x, kernel, attrs, ceil_mode)
        extra = {"kernel_shape": kernel, "strides": strides, "pads": pads}
        if any(d != 1 for d in dil):
            extra["dilations"] = dil
        if ceil_mode:
            extra["ceil_mode"] = 1
        if op == "avgpool" and attrs.get("count_include_pad", 0):
            extra["count_include_pad"] = 1
        shape = x.shape[:2] + tuple(out)
        n = where.node
        if op != "maxpool" or len(n.output) < 2 or n.output[1] not in c.needed:
            return [c.float_op(where, op, [x], shape, extra, out=where.out(), logical=x.dt),
                    None]
        if attrs.get("storage_order", 0):
            extra["storage_order"] = 1
        y = c.emit(where, op, [c.arg(where, x, "F32")], shape, "F32", extra, out=where.out(),
                   logical=x.dt, deps=x.deps)
        idx = where.out(1)
        y.node["outputs"].append(idx)
        return [y, Value(idx, shape, "I64", node=y.node, deps=x.deps)]
    return handler


def h_global_pool(op):
    def handler(where, ins, attrs):
        x = ins[0]
        axes = list(range(2, x.rank))
        shape = x.shape[:2] + (1,) * len(axes)
        return [where.c.float_op(where, op, [x], shape, {"axes": axes, "keepdims": 1},
                                 out=where.out(), logical=x.dt)]
    return handler


def h_resize(where, ins, attrs):
    x = ins[0]
    c = where.c

    def text(key, default):
        v = attrs.get(key, default)
        return v.decode() if isinstance(v, bytes) else v

    mode = text("mode", "nearest")
    if where.op == "Upsample":
        ct, nm = "asymmetric", "floor"
        mode = "linear" if mode == "bilinear" else mode
        scales = attrs.get("scales") if c.opset < 9 else _const(where, ins[1], "scales")
        sizes = None
    else:
        ct = text("coordinate_transformation_mode", "half_pixel")
        nm = text("nearest_mode", "round_prefer_floor")
        if ct == "tf_half_pixel_for_nn":      # Resize-11's name for it
            ct = "tf_half_pixel_for_nearest"
        if c.opset < 11:
            scales, sizes = _const(where, ins[1], "scales"), None
        else:
            scales = _const(where, _input(ins, 2), "scales")
            sizes = _const(where, _input(ins, 3), "sizes")
    if mode not in ("nearest", "linear", "cubic"):
        raise ConvertError(f"{where}: unknown mode {mode!r}")
    roi = None
    if ct == "tf_crop_and_resize":
        roi = [float(v) for v in _const(where, ins[1], "roi").reshape(-1)]
        if len(roi) != 2 * x.rank:
            raise ConvertError(f"{where}: {len(roi)} roi values for rank {x.rank}")
    if sizes is not None and sizes.size:
        out = [int(s) for s in sizes]
        scales = None
    else:
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        span = [roi[k + x.rank] - roi[k] if roi else 1.0 for k in range(x.rank)]
        out = [int(np.floor(d * s * f)) for d, s, f in zip(x.shape, scales, span)]
    if len(out) != x.rank:
        raise ConvertError(f"{where}: {len(out)} sizes or scales for rank {x.rank}")
    extra = {"sizes": out, "coordinate_transformation_mode": ct, "nearest_mode": nm, "mode": mode}
    if scales is not None:
        extra["scales"] = scales
    if mode == "cubic":
        extra["cubic_coeff_a"] = float(attrs.get("cubic_coeff_a", -0.75))
    if attrs.get("exclude_outside", 0):
        extra["exclude_outside"] = 1
    if roi is not None:
        extra["roi"] = roi
        extra["extrapolation_value"] = float(attrs.get("extrapolation_value", 0.0))
    return [c.typed_op(where, "resize", [x], tuple(out), attrs=extra, out=where.out(),
                       logical=x.dt)]


# ---- losses (as ONNX defines them, from the ops above) ----

def _const_value(where, array, dt):
    c = where.c
    return c.constant(None, np.asarray(array), dt, name=c.fresh(f"{where.name}::const"))


def _nll(where, logp, target, weight, attrs, out):
    """NegativeLogLikelihoodLoss on logp (F32): -logp[n, t, d] weighted by
    weight[t], 0 where t is ignore_index; reduced by sum, mean (over the
    weights of the targets counted) or none."""
    c = where.c
    red = attrs.get("reduction", b"mean")
    red = red.decode() if isinstance(red, bytes) else red
    if red not in ("none", "sum", "mean"):
        raise ConvertError(f"{where}: reduction {red!r}")
    tshape = target.shape
    t = target
    valid = None
    if "ignore_index" in attrs:
        ig = _const_value(where, int(attrs["ignore_index"]), target.dt)
        eq = c.typed_op(where, "equal", [target, ig], tshape, out_dt="BOOL", name=f"{where.name}/ignored")
        valid = c.typed_op(where, "not", [eq], tshape, name=f"{where.name}/counted")
        zero = _const_value(where, 0, target.actual)
        t = c.emit(where, "where", [valid.name, c.arg(where, target, target.actual),
                                    c.arg(where, zero, target.actual)], tshape, target.actual,
                   name=f"{where.name}/safe_target", deps=target.deps)
    idx_shape = (tshape[0], 1) + tshape[1:]
    ti = _reshape_to(where, t, idx_shape, None, name=f"{where.name}/target_1")
    picked = c.emit(where, "gather_elements", [c.arg(where, logp, "F32"), c.arg(where, ti, ti.actual)],
                    idx_shape, "F32", {"axis": 1}, name=f"{where.name}/picked", deps=logp.deps)
    loss = c.float_op(where, "neg", [_reshape_to(where, picked, tshape, None,
                                                 name=f"{where.name}/picked_flat")], tshape,
                      name=f"{where.name}/neg")
    w = None
    if weight is not None:
        w = c.emit(where, "gather", [c.arg(where, weight, "F32"), c.arg(where, t, t.actual)], tshape,
                   "F32", name=f"{where.name}/weight_of_target", deps=weight.deps | t.deps)
    if valid is not None:
        one = _const_value(where, 1.0, "F32")
        zero = _const_value(where, 0.0, "F32")
        w = c.emit(where, "where", [valid.name, c.arg(where, w if w is not None else one, "F32"),
                                    c.arg(where, zero, "F32")], tshape, "F32",
                   name=f"{where.name}/weight_counted", deps=target.deps)
    if w is not None:
        loss = c.float_op(where, "mul", [loss, w], tshape, name=f"{where.name}/weighted")
    if red == "none":
        return _reshape_to(where, loss, tshape, out, name=f"{where.name}/loss")
    every = {"axes": list(range(len(tshape))), "keepdims": 0}
    total = c.float_op(where, "reduce_sum", [loss], (), every, name=f"{where.name}/sum",
                       out=out if red == "sum" else None)
    if red == "sum":
        return total
    if w is None:
        n = _const_value(where, float(numel(tshape)), "F32")
        return c.float_op(where, "div", [total, n], (), out=out, name=f"{where.name}/mean")
    wsum = c.float_op(where, "reduce_sum", [w], (), every, name=f"{where.name}/weight_sum")
    return c.float_op(where, "div", [total, wsum], (), out=out, name=f"{where.name}/mean")


def h_nll(where, ins, attrs):
    x, target = ins[0], ins[1]
    loss = _nll(where, x, target, _input(ins, 2), attrs, where.out())
    return [Value(loss.name, loss.shape, x.dt, node=loss.node, actual=loss.actual,
                  deps=loss.deps)]


def h_sce(where, ins, attrs):
    """SoftmaxCrossEntropyLoss: NLL of log_softmax over the classes (dim 1)."""
    x, labels = ins[0], ins[1]
    n = where.node
    want_logp = len(n.output) > 1 and n.output[1] in where.c.needed
    logp = where.c.float_op(where, "log_softmax", [x], x.shape, {"axis": 1},
                            out=where.out(1) if want_logp else None, logical=x.dt,
                            name=f"{where.name}/log_softmax")
    loss = _nll(where, logp, labels, _input(ins, 2), attrs, where.out())
    return [Value(loss.name, loss.shape, x.dt, node=loss.node, actual=loss.actual, deps=loss.deps),
            logp if want_logp else None]


# ---- more ops made of the ones above ----

def h_onehot(where, ins, attrs):
    """equal(indices, a range along the new axis) chooses on or off."""
    c = where.c
    idx, values = ins[0], ins[2]
    depth = int(np.asarray(_const(where, ins[1], "depth")).reshape(-1)[0])
    rank = idx.rank + 1
    axis = norm_axis(int(attrs.get("axis", -1)), rank, "onehot axis")
    if idx.dt not in INTS:       # float indices are truncated to integers
        idx = c.typed_op(where, "cast", [idx], idx.shape, attrs={"to": "I64"}, out_dt="I64",
                         name=f"{where.name}/to_int")
    it = idx.actual
    neg = c.typed_op(where, "less", [idx, _const_value(where, 0, it)], idx.shape, out_dt="BOOL",
                     name=f"{where.name}/negative")
    wrapped = c.typed_op(where, "add", [idx, _const_value(where, depth, it)], idx.shape,
                         name=f"{where.name}/wrapped")
    idx = c.emit(where, "where", [neg.name, wrapped.name, c.arg(where, idx, it)], idx.shape, it,
                 name=f"{where.name}/index", deps=idx.deps)
    shape = idx.shape[:axis] + (1,) + idx.shape[axis:]
    u = _reshape_to(where, idx, shape, None, name=f"{where.name}/unsqueeze")
    rshape = tuple(depth if i == axis else 1 for i in range(rank))
    r = _const_value(where, np.arange(depth).reshape(rshape), it)
    out_shape = idx.shape[:axis] + (depth,) + idx.shape[axis:]
    hot = c.typed_op(where, "equal", [u, r], out_shape, out_dt="BOOL", name=f"{where.name}/hot")
    off = _reshape_to(where, _slice_node(where, values, [(0, 0, 1, 1)], name=f"{where.name}/off"),
                      (), None, name=f"{where.name}/off0")
    on = _reshape_to(where, _slice_node(where, values, [(0, 1, 2, 1)], name=f"{where.name}/on"),
                     (), None, name=f"{where.name}/on0")
    dt = c.common_dtype([on, off])
    return [c.emit(where, "where", [hot.name, c.arg(where, on, dt), c.arg(where, off, dt)],
                   out_shape, dt, out=where.out(), logical=values.dt,
                   deps=hot.deps | values.deps)]


def h_compress(where, ins, attrs):
    """A constant condition picks indices: a gather."""
    x = ins[0]
    cond = np.asarray(_const(where, ins[1], "the condition")).reshape(-1).astype(bool)
    if "axis" not in attrs:
        x = _reshape_to(where, x, (numel(x.shape),), None, name=f"{where.name}/flat")
        axis = 0
    else:
        axis = norm_axis(int(attrs["axis"]), x.rank, "compress axis")
    picked = [i for i, keep in enumerate(cond[:x.shape[axis]]) if keep]
    return [_gather_const(where, x, axis, picked, out=where.out())]


def h_mvn(where, ins, attrs):
    """MeanVarianceNormalization as ONNX's function defines it."""
    x = ins[0]
    c = where.c
    axes = [norm_axis(int(a), x.rank) for a in attrs.get("axes", [0, 2, 3])]
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    red = {"axes": sorted(axes), "keepdims": 1}
    mean = c.float_op(where, "reduce_mean", [x], kept, red, name=f"{where.name}/mean")
    sq = c.float_op(where, "mul", [x, x], x.shape, name=f"{where.name}/sq")
    msq = c.float_op(where, "reduce_mean", [sq], kept, red, name=f"{where.name}/mean_sq")
    var = c.float_op(where, "sub", [msq, c.float_op(where, "mul", [mean, mean], kept,
                                                    name=f"{where.name}/mean2")], kept,
                     name=f"{where.name}/var")
    sd = c.float_op(where, "add", [c.float_op(where, "sqrt", [var], kept, name=f"{where.name}/sd"),
                                   _const_value(where, 1e-9, "F32")], kept,
                    name=f"{where.name}/sd_eps")
    d = c.float_op(where, "sub", [x, mean], x.shape, name=f"{where.name}/centre")
    return [c.float_op(where, "div", [d, sd], x.shape, out=where.out(), logical=x.dt)]


def h_window(kind):
    """HannWindow, HammingWindow, BlackmanWindow: constants of the size."""
    def handler(where, ins, attrs):
        size = int(np.asarray(_const(where, ins[0], "size")).reshape(-1)[0])
        n = np.arange(size, dtype=np.float64)
        denom = size if attrs.get("periodic", 1) else size - 1
        t = 2 * np.pi * n / denom
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(t)
        elif kind == "hamming":
            w = 25 / 46 - (1 - 25 / 46) * np.cos(t)
        else:
            w = 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)
        dt = mu_dtype(int(attrs.get("output_datatype", 1)), "the window's dtype")
        return [where.c.constant(where.node.output[0], w.astype(np.float32), dt)]
    return handler


def _per_axis(where, v, x, axis, name):
    """A scale or zero point: a scalar, or 1-D along axis (reshaped to
    broadcast there)."""
    if v is None or v.rank == 0 or numel(v.shape) == 1:
        return v
    axis = norm_axis(axis, x.rank, "quantization axis")
    shape = tuple(v.shape[0] if i == axis else 1 for i in range(x.rank))
    return _reshape_to(where, v, shape, None, name=f"{where.name}/{name}")


def _quantize(where, x, scale, zp, zdt, out, axis):
    c = where.c
    lo, hi = {"U8": (0, 255), "I8": (-128, 127)}.get(zdt, (None, None))
    if lo is None:
        raise Unsupported(f"{where}: quantizing to {zdt} (muster quantizes to U8 and I8)")
    q = c.float_op(where, "div", [x, _per_axis(where, scale, x, axis, "scale")], x.shape,
                   name=f"{where.name}/scaled")
    q = c.float_op(where, "round", [q], x.shape, name=f"{where.name}/round")
    if zp is not None:
        q = c.float_op(where, "add", [q, _per_axis(where, zp, x, axis, "zero_point")], x.shape,
                       name=f"{where.name}/shifted")
    q = c.float_op(where, "clip", [q], x.shape, {"min": float(lo), "max": float(hi)},
                   name=f"{where.name}/saturate")
    return c.typed_op(where, "cast", [q], x.shape, dt="F32", attrs={"to": zdt}, out_dt=zdt, out=out)


def h_quantize(where, ins, attrs):
    x, scale, zp = ins[0], ins[1], _input(ins, 2)
    axis = int(attrs.get("axis", 1))
    return [_quantize(where, x, scale, zp, zp.dt if zp is not None else "U8", where.out(), axis)]


def h_dequantize(where, ins, attrs):
    x, scale, zp = ins[0], ins[1], _input(ins, 2)
    c = where.c
    axis = int(attrs.get("axis", 1))
    y = x
    if zp is not None:
        y = c.float_op(where, "sub", [x, _per_axis(where, zp, x, axis, "zero_point")], x.shape,
                       name=f"{where.name}/centred")
    return [c.float_op(where, "mul", [y, _per_axis(where, scale, x, axis, "scale")], x.shape,
                       out=where.out(), logical=scale.dt)]


def h_dynamic_quantize(where, ins, attrs):
    """DynamicQuantizeLinear as ONNX's function defines it: a U8 scale and
    zero point from the range of x (and 0)."""
    x = ins[0]
    c = where.c
    every = {"axes": list(range(x.rank)), "keepdims": 0}
    zero = _const_value(where, 0.0, "F32")
    lo = c.float_op(where, "min", [c.float_op(where, "reduce_min", [x], (), every,
                                              name=f"{where.name}/min"), zero], (),
                    name=f"{where.name}/min0")
    hi = c.float_op(where, "max", [c.float_op(where, "reduce_max", [x], (), every,
                                              name=f"{where.name}/max"), zero], (),
                    name=f"{where.name}/max0")
    scale = c.float_op(where, "div", [c.float_op(where, "sub", [hi, lo], (), name=f"{where.name}/range"),
                                      _const_value(where, 255.0, "F32")], (),
                       out=where.out(1), name=f"{where.name}/scale")
    zp = c.float_op(where, "sub", [zero, c.float_op(where, "div", [lo, scale], (),
                                                    name=f"{where.name}/min_scaled")], (),
                    name=f"{where.name}/zero_fp")
    zp = c.float_op(where, "round", [c.float_op(where, "clip", [zp], (), {"min": 0.0, "max": 255.0},
                                                name=f"{where.name}/zero_clip")], (),
                    name=f"{where.name}/zero_round")
    zpu = c.typed_op(where, "cast", [zp], (), dt="F32", attrs={"to": "U8"}, out_dt="U8",
                     out=where.out(2), name=f"{where.name}/zero_point")
    y = _quantize(where, x, scale, zp, "U8", where.out(0), 0)
    return [y, scale, zpu]


# ---- index ops, topk, lrn, det ----

def _reduction(where, attrs):
    r = attrs.get("reduction", b"none")
    r = r.decode() if isinstance(r, bytes) else r
    if r not in ("none", "add", "mul"):
        raise Unsupported(f"{where}: reduction {r!r} (muster: none, add, mul)")
    return r


def h_scatter_elements(where, ins, attrs):
    data, idx, upd = ins[:3]
    c = where.c
    dt = c.common_dtype([data, upd])
    extra = {"axis": norm_axis(int(attrs.get("axis", 0)), data.rank)}
    if _reduction(where, attrs) != "none":
        extra["reduction"] = _reduction(where, attrs)
    args = [c.arg(where, data, dt), c.arg(where, idx, idx.actual), c.arg(where, upd, dt)]
    return [c.emit(where, "scatter_elements", args, data.shape, dt, extra, out=where.out(),
                   logical=data.dt, deps=data.deps | idx.deps | upd.deps)]


def h_scatter_nd(where, ins, attrs):
    data, idx, upd = ins[:3]
    c = where.c
    dt = c.common_dtype([data, upd])
    extra = {"reduction": _reduction(where, attrs)} if _reduction(where, attrs) != "none" else None
    args = [c.arg(where, data, dt), c.arg(where, idx, idx.actual), c.arg(where, upd, dt)]
    return [c.emit(where, "scatter_nd", args, data.shape, dt, extra, out=where.out(),
                   logical=data.dt, deps=data.deps | idx.deps | upd.deps)]


def h_gather_nd(where, ins, attrs):
    data, idx = ins[:2]
    c = where.c
    b = int(attrs.get("batch_dims", 0))
    k = idx.shape[-1]
    shape = idx.shape[:-1] + data.shape[b + k:]
    args = [c.arg(where, data, data.actual), c.arg(where, idx, idx.actual)]
    return [c.emit(where, "gather_nd", args, shape, data.actual, {"batch_dims": b} if b else None,
                   out=where.out(), logical=data.dt, deps=data.deps | idx.deps)]


def h_reverse_sequence(where, ins, attrs):
    x, lens = ins[:2]
    c = where.c
    extra = {"batch_axis": int(attrs.get("batch_axis", 1)), "time_axis": int(attrs.get("time_axis", 0))}
    args = [c.arg(where, x, x.actual), c.arg(where, lens, lens.actual)]
    return [c.emit(where, "reverse_sequence", args, x.shape, x.actual, extra, out=where.out(),
                   logical=x.dt, deps=x.deps | lens.deps)]


def h_topk(where, ins, attrs):
    x = ins[0]
    c = where.c
    k = _const_ints(where, ins[1], "k")[0] if c.opset >= 10 else int(attrs["k"])
    axis = norm_axis(int(attrs.get("axis", -1)), x.rank)
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    extra = {"k": k, "axis": axis, "largest": int(attrs.get("largest", 1))}
    vals = c.emit(where, "topk", [c.arg(where, x, x.actual)], shape, x.actual, extra,
                  out=where.out(), logical=x.dt, deps=x.deps)
    idx = where.out(1)
    vals.node["outputs"].append(idx)
    return [vals, Value(idx, shape, "I64", node=vals.node, deps=x.deps)]


def h_lrn(where, ins, attrs):
    x = ins[0]
    extra = {"size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
             "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))}
    return [where.c.float_op(where, "lrn", [x], x.shape, extra, out=where.out(), logical=x.dt)]


def h_det(where, ins, attrs):
    x = ins[0]
    return [where.c.float_op(where, "det", [x], x.shape[:-2], out=where.out(), logical=x.dt)]


# ---- RNN, GRU, LSTM: unrolled over the (static) sequence ----

RNN_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _act(where, name, x, alpha, beta, tag):
    """One of ONNX's RNN activation functions on x."""
    c = where.c
    f = lambda op, v, a=None: c.float_op(where, op, [v], v.shape, a, name=f"{where.name}/{tag}")
    k = lambda v: _const_value(where, float(v), "F32")
    name = name.decode() if isinstance(name, bytes) else name
    simple = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu", "Softsign": "softsign",
              "Softplus": "softplus"}
    if name in simple:
        return f(simple[name], x)
    if name == "LeakyRelu":
        return f("leaky_relu", x, {"alpha": alpha if alpha is not None else 0.01})
    if name == "ThresholdedRelu":
        return f("thresholded_relu", x, {"alpha": alpha if alpha is not None else 1.0})
    if name == "Elu":
        return f("elu", x, {"alpha": alpha if alpha is not None else 1.0})
    if name == "HardSigmoid":
        return f("hard_sigmoid", x, {"alpha": alpha if alpha is not None else 0.2,
                                     "beta": beta if beta is not None else 0.5})
    if name == "Affine":
        y = c.float_op(where, "mul", [x, k(alpha if alpha is not None else 1.0)], x.shape,
                       name=f"{where.name}/{tag}")
        return c.float_op(where, "add", [y, k(beta if beta is not None else 0.0)], x.shape,
                          name=f"{where.name}/{tag}")
    if name == "ScaledTanh":
        y = c.float_op(where, "mul", [x, k(beta if beta is not None else 1.0)], x.shape,
                       name=f"{where.name}/{tag}")
        return c.float_op(where, "mul", [f("tanh", y), k(alpha if alpha is not None else 1.0)],
                          x.shape, name=f"{where.name}/{tag}")
    raise Unsupported(f"{where}: activation {name!r}")


class _Rnn:
    """The state of one unrolling: the node, the converter, the sizes."""

    def __init__(self, where, kind, ins, attrs):
        self.w, self.c, self.kind = where, where.c, kind
        self.G = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
        self.H = int(attrs["hidden_size"])
        d = attrs.get("direction", b"forward")
        self.direction = d.decode() if isinstance(d, bytes) else d
        self.layout = int(attrs.get("layout", 0))
        self.clip = attrs.get("clip")
        self.lbr = int(attrs.get("linear_before_reset", 0))
        self.input_forget = int(attrs.get("input_forget", 0))
        nd = 2 if self.direction == "bidirectional" else 1
        acts = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
        self.acts = acts or RNN_DEFAULTS[kind] * nd
        self.alpha = list(attrs.get("activation_alpha", []))
        self.beta = list(attrs.get("activation_beta", []))
        self.nd = nd

    def name(self, tag):
        return f"{self.w.name}/{tag}"

    def op(self, op, ins, shape, attrs=None, tag="op", out=None):
        return self.c.float_op(self.w, op, ins, shape, attrs, name=self.name(tag), out=out)

    def cut(self, v, axis, b, e, tag, shape=None):
        h = _slice_node(self.w, v, [(axis, b, e, 1)], name=self.name(tag))
        return _reshape_to(self.w, h, shape, None, name=self.name(tag + "/r")) if shape else h

    def activate(self, d, k, x, tag):
        i = d * len(RNN_DEFAULTS[self.kind]) + k
        if self.clip is not None:
            x = self.op("clip", [x], x.shape, {"min": -float(self.clip), "max": float(self.clip)},
                        tag=tag + "/clip")
        alpha = self.alpha[i] if i < len(self.alpha) else None
        beta = self.beta[i] if i < len(self.beta) else None
        return _act(self.w, self.acts[i], x, alpha, beta, tag)


def h_rnn(kind):
    def handler(where, ins, attrs):
        r = _Rnn(where, kind, ins, attrs)
        c, G, H = r.c, r.G, r.H
        X, W, R = ins[0], ins[1], ins[2]
        B, lens = _input(ins, 3), _input(ins, 4)
        h0, c0, P = _input(ins, 5), _input(ins, 6), _input(ins, 7)
        if r.layout:
            X = _transpose(where, X, (1, 0, 2), name=r.name("time_major"))
        T, N, _ = X.shape
        outs_y, outs_h, outs_c = [], [], []
        for d in range(r.nd):
            Wd = r.cut(W, 0, d, d + 1, f"W{d}", (G * H, X.shape[2]))
            xw = r.op("matmul", [X, _transpose(where, Wd, (1, 0), name=r.name(f"Wt{d}"))],
                      (T, N, G * H), tag=f"xw{d}")
            Rd = r.cut(R, 0, d, d + 1, f"R{d}", (G * H, H))
            bw = br = None
            if B is not None:
                bd = r.cut(B, 0, d, d + 1, f"B{d}", (2 * G * H,))
                bw, br = r.cut(bd, 0, 0, G * H, f"Wb{d}"), r.cut(bd, 0, G * H, 2 * G * H, f"Rb{d}")
                xw = r.op("add", [xw, bw], xw.shape, tag=f"xwb{d}")
            h = r.cut(h0, 0, d, d + 1, f"h0_{d}", (N, H)) if h0 is not None else \
                _const_value(where, np.zeros((N, H), np.float32), "F32")
            cs = r.cut(c0, 0, d, d + 1, f"c0_{d}", (N, H)) if c0 is not None else \
                _const_value(where, np.zeros((N, H), np.float32), "F32") if kind == "LSTM" else None
            p = r.cut(P, 0, d, d + 1, f"P{d}", (3 * H,)) if P is not None else None
            ys = [None] * T
            for s in range(T):
                t = s if (r.direction == "forward" or (r.direction == "bidirectional" and d == 0)) \
                    else T - 1 - s
                tag = f"d{d}t{t}"
                xt = r.cut(xw, 0, t, t + 1, tag + "/x", (N, G * H))
                hn, cn = _rnn_step(r, d, xt, h, cs, Rd, br, p, tag)
                if lens is not None:    # past a sequence's end: no update, output 0
                    valid = c.typed_op(where, "less", [_const_value(where, t, lens.dt), lens],
                                       lens.shape, out_dt="BOOL", name=r.name(tag + "/valid"))
                    v2 = _reshape_to(where, valid, (N, 1), None, name=r.name(tag + "/valid2"))
                    zero = _const_value(where, 0.0, "F32")
                    y = c.emit(where, "where", [v2.name, c.arg(where, hn, "F32"),
                                                c.arg(where, zero, "F32")], (N, H), "F32",
                               name=r.name(tag + "/y"))
                    hn = c.emit(where, "where", [v2.name, c.arg(where, hn, "F32"),
                                                 c.arg(where, h, "F32")], (N, H), "F32",
                                name=r.name(tag + "/h"))
                    if kind == "LSTM":
                        cn = c.emit(where, "where", [v2.name, c.arg(where, cn, "F32"),
                                                     c.arg(where, cs, "F32")], (N, H), "F32",
                                    name=r.name(tag + "/c"))
                else:
                    y = hn
                h, cs = hn, cn
                ys[t] = _reshape_to(where, y, (1, 1, N, H), None, name=r.name(tag + "/y4"))
            outs_y.append(_concat(where, ys, 0, None, name=r.name(f"Y{d}")))
            outs_h.append(_reshape_to(where, h, (1, N, H), None, name=r.name(f"Yh{d}")))
            if kind == "LSTM":
                outs_c.append(_reshape_to(where, cs, (1, N, H), None, name=r.name(f"Yc{d}")))
        n = where.node
        want = [k < len(n.output) and n.output[k] and n.output[k] in c.needed for k in range(3)]
        res = [None, None, None]
        if want[0]:
            y = _concat(where, outs_y, 1, None if r.layout else where.out(0), name=r.name("Y"))
            res[0] = _transpose(where, y, (2, 0, 1, 3), out=where.out(0)) if r.layout else y
        for k, parts in ((1, outs_h), (2, outs_c)):
            if want[k] and parts:
                v = _concat(where, parts, 0, None if r.layout else where.out(k), name=r.name(f"Y{k}"))
                res[k] = _transpose(where, v, (1, 0, 2), out=where.out(k)) if r.layout else v
        return res
    return handler


def _rnn_step(r, d, xt, h, cs, Rd, br, p, tag):
    """One time step: the new hidden state (and cell state, LSTM)."""
    c, G, H = r.c, r.G, r.H
    N = h.shape[0]
    gate = lambda v, k, name: r.cut(v, 1, k * H, (k + 1) * H, f"{tag}/{name}")
    if r.kind == "GRU" and not r.lbr:
        # z and r from h @ R^T; the h gate from (r * h) @ Rh^T
        rzr = r.cut(Rd, 0, 0, 2 * H, f"{tag}/Rzr")
        rec = r.op("matmul", [h, _transpose(r.w, rzr, (1, 0), name=r.name(f"{tag}/Rzr_t"))],
                   (N, 2 * H), tag=f"{tag}/hr")
    else:
        rec = r.op("matmul", [h, _transpose(r.w, Rd, (1, 0), name=r.name(f"{tag}/Rt"))],
                   (N, G * H), tag=f"{tag}/hr")
    if br is not None:
        rb = br if not (r.kind == "GRU" and not r.lbr) else r.cut(br, 0, 0, 2 * H, f"{tag}/Rb_zr")
        rec = r.op("add", [rec, rb], rec.shape, tag=f"{tag}/hrb")
    if r.kind == "RNN":
        hn = r.activate(d, 0, r.op("add", [xt, rec], (N, H), tag=f"{tag}/pre"), f"{tag}/f")
        return hn, None
    if r.kind == "GRU":
        z = r.activate(d, 0, r.op("add", [gate(xt, 0, "xz"), gate(rec, 0, "hz")], (N, H),
                                  tag=f"{tag}/z_pre"), f"{tag}/z")
        rr = r.activate(d, 0, r.op("add", [gate(xt, 1, "xr"), gate(rec, 1, "hr_")], (N, H),
                                   tag=f"{tag}/r_pre"), f"{tag}/r")
        rh = r.cut(Rd, 0, 2 * H, 3 * H, f"{tag}/Rh")
        rht = _transpose(r.w, rh, (1, 0), name=r.name(f"{tag}/Rh_t"))
        if r.lbr:
            hh = gate(rec, 2, "hh")          # (h @ Rh^T + Rbh), then scaled by r
            hh = r.op("mul", [rr, hh], (N, H), tag=f"{tag}/r_hh")
        else:
            hh = r.op("matmul", [r.op("mul", [rr, h], (N, H), tag=f"{tag}/rh"), rht], (N, H),
                      tag=f"{tag}/rh_R")
            if br is not None:
                hh = r.op("add", [hh, r.cut(br, 0, 2 * H, 3 * H, f"{tag}/Rbh")], (N, H),
                          tag=f"{tag}/rh_Rb")
        hc = r.activate(d, 1, r.op("add", [gate(xt, 2, "xh"), hh], (N, H), tag=f"{tag}/h_pre"),
                        f"{tag}/g")
        one = _const_value(r.w, 1.0, "F32")
        keep = r.op("mul", [z, h], (N, H), tag=f"{tag}/zh")
        new = r.op("mul", [r.op("sub", [one, z], (N, H), tag=f"{tag}/1mz"), hc], (N, H),
                   tag=f"{tag}/zc")
        return r.op("add", [new, keep], (N, H), tag=f"{tag}/h"), None
    # LSTM: gates i, o, f, c; peepholes p = [pi, po, pf]
    pre = r.op("add", [xt, rec], (N, G * H), tag=f"{tag}/gates")
    pi, po, pf = ((r.cut(p, 0, k * H, (k + 1) * H, f"{tag}/p{k}") for k in range(3))
                  if p is not None else (None, None, None))
    gi = gate(pre, 0, "i")
    if pi is not None:
        gi = r.op("add", [gi, r.op("mul", [pi, cs], (N, H), tag=f"{tag}/pic")], (N, H),
                  tag=f"{tag}/ip")
    i = r.activate(d, 0, gi, f"{tag}/ia")
    if r.input_forget:
        f = r.op("sub", [_const_value(r.w, 1.0, "F32"), i], (N, H), tag=f"{tag}/f_coupled")
    else:
        gf = gate(pre, 2, "f")
        if pf is not None:
            gf = r.op("add", [gf, r.op("mul", [pf, cs], (N, H), tag=f"{tag}/pfc")], (N, H),
                      tag=f"{tag}/fp")
        f = r.activate(d, 0, gf, f"{tag}/fa")
    g = r.activate(d, 1, gate(pre, 3, "c"), f"{tag}/ca")
    cn = r.op("add", [r.op("mul", [f, cs], (N, H), tag=f"{tag}/fc"),
                      r.op("mul", [i, g], (N, H), tag=f"{tag}/ig")], (N, H), tag=f"{tag}/cell")
    go = gate(pre, 1, "o")
    if po is not None:
        go = r.op("add", [go, r.op("mul", [po, cn], (N, H), tag=f"{tag}/poc")], (N, H),
                  tag=f"{tag}/op")
    o = r.activate(d, 0, go, f"{tag}/oa")
    hn = r.op("mul", [o, r.activate(d, 2, cn, f"{tag}/ha")], (N, H), tag=f"{tag}/h")
    return hn, cn


def h_maxunpool(where, ins, attrs):
    """MaxUnpool: X's values at the flat positions I names in a zero tensor
    of the output's shape (a scatter into its flattened form)."""
    x, idx = ins[0], ins[1]
    c = where.c
    k = x.rank - 2
    kernel = [int(v) for v in attrs["kernel_shape"]]
    strides = [int(v) for v in attrs.get("strides", [1] * k)]
    pads = [int(v) for v in attrs.get("pads", [0] * 2 * k)]
    out = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i]
                               - pads[k + i] for i in range(k)]
    if _input(ins, 2) is not None:
        # the indices count in the default shape: the same coordinates,
        # placed in the (larger) shape asked for
        default, out = out, [int(v) for v in _const(where, ins[2], "output_shape").reshape(-1)]
        if default != out:
            it = idx.actual
            acc = None
            for d in range(len(out)):
                sd = int(np.prod(default[d + 1:])) if d + 1 < len(out) else 1
                so = int(np.prod(out[d + 1:])) if d + 1 < len(out) else 1
                q = c.typed_op(where, "div", [idx, _const_value(where, sd, it)], idx.shape,
                               name=f"{where.name}/coord{d}")
                q = c.typed_op(where, "mod", [q, _const_value(where, default[d], it)], idx.shape,
                               name=f"{where.name}/coord{d}m")
                q = c.typed_op(where, "mul", [q, _const_value(where, so, it)], idx.shape,
                               name=f"{where.name}/at{d}")
                acc = q if acc is None else c.typed_op(where, "add", [acc, q], idx.shape,
                                                       name=f"{where.name}/at")
            idx = acc
    flat = (numel(out),)
    zeros = _const_value(where, np.zeros(flat, np.float32), "F32")
    xi = _reshape_to(where, idx, (numel(idx.shape),), None, name=f"{where.name}/indices")
    xv = _reshape_to(where, x, (numel(x.shape),), None, name=f"{where.name}/values")
    dt = c.common_dtype([x])
    y = c.emit(where, "scatter_elements", [c.arg(where, zeros, dt), c.arg(where, xi, xi.actual),
                                           c.arg(where, xv, dt)], flat, dt, {"axis": 0},
               name=f"{where.name}/scatter", deps=x.deps | idx.deps)
    return [_reshape_to(where, Value(y.name, flat, x.dt, node=y.node, actual=dt), tuple(out),
                        where.out())]


# ---- Einsum: per operand diagonals and lone sums, then pairwise matmuls ----

def _einsum_terms(where, eq, ins):
    """The operands' label strings (ellipses spelled out with upper-case
    letters, which ONNX equations do not use) and the output's."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins):
        raise ConvertError(f"{where}: {len(terms)} terms for {len(ins)} operands")
    ell = max((v.rank - (len(t) - 3) for t, v in zip(terms, ins) if "..." in t), default=0)
    fill = "ABCDEFGH"[:ell]
    out = []
    for t, v in zip(terms, ins):
        if "..." in t:
            n = v.rank - (len(t) - 3)
            t = t.replace("...", fill[ell - n:])
        if len(t) != v.rank:
            raise ConvertError(f"{where}: term {t!r} for an operand of rank {v.rank}")
        out.append(t)
    if arrow:
        res = rhs.replace("...", fill)
    else:
        counts = {}
        for t in out:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        res = fill + "".join(sorted(ch for ch, k in counts.items() if k == 1 and ch not in fill))
    return out, res


def _einsum_prepare(where, v, t, keep):
    """An operand's repeated labels reduced to their diagonal, and labels
    no other term (nor the output) wants summed away: (Value, labels)."""
    c = where.c
    while len(set(t)) < len(t):
        ch = next(ch for ch in t if t.count(ch) > 1)
        i, j = t.index(ch), t.index(ch, t.index(ch) + 1)
        n = v.shape[i]
        shape = tuple(n if k in (i, j) else 1 for k in range(v.rank))
        eye = _const_value(where, np.eye(n).reshape(shape), "F32")
        v = c.float_op(where, "mul", [v, eye], v.shape, name=f"{where.name}/diag")
        shp = tuple(d for k, d in enumerate(v.shape) if k != j)
        v = c.float_op(where, "reduce_sum", [v], shp, {"axes": [j], "keepdims": 0},
                       name=f"{where.name}/diag_sum")
        t = t[:j] + t[j + 1:]
    lone = [k for k, ch in enumerate(t) if ch not in keep]
    if lone:
        shp = tuple(d for k, d in enumerate(v.shape) if k not in lone)
        v = c.float_op(where, "reduce_sum", [v], shp, {"axes": lone, "keepdims": 0},
                       name=f"{where.name}/sum")
        t = "".join(ch for k, ch in enumerate(t) if k not in lone)
    return v, t


def _einsum_pair(where, a, ta, b, tb, want):
    """a and b contracted into the labels `want` keeps: batch labels (in
    both, kept) broadcast, contracted ones (in both, not kept) multiplied
    out by one matmul."""
    c = where.c
    size = {}
    for v, t in ((a, ta), (b, tb)):
        for ch, d in zip(t, v.shape):
            size[ch] = max(size.get(ch, 1), d)
    batch = [ch for ch in ta if ch in tb and ch in want]
    con = [ch for ch in ta if ch in tb and ch not in want]
    left = [ch for ch in ta if ch not in tb]
    right = [ch for ch in tb if ch not in ta]
    prod = lambda chs, v, t: int(np.prod([v.shape[t.index(ch)] for ch in chs])) if chs else 1
    pa = [ta.index(ch) for ch in batch + left + con]
    pb = [tb.index(ch) for ch in batch + con + right]
    a2 = _transpose(where, a, pa, name=f"{where.name}/a_order")
    b2 = _transpose(where, b, pb, name=f"{where.name}/b_order")
    ab = tuple(a.shape[ta.index(ch)] for ch in batch)
    bb = tuple(b.shape[tb.index(ch)] for ch in batch)
    a3 = _reshape_to(where, a2, ab + (prod(left, a, ta), prod(con, a, ta)), None,
                     name=f"{where.name}/a3")
    b3 = _reshape_to(where, b2, bb + (prod(con, b, tb), prod(right, b, tb)), None,
                     name=f"{where.name}/b3")
    bo = tuple(size[ch] for ch in batch)
    m = c.float_op(where, "matmul", [a3, b3], bo + (a3.shape[-2], b3.shape[-1]),
                   name=f"{where.name}/matmul")
    labels = batch + left + right
    return _reshape_to(where, m, tuple(size[ch] for ch in labels), None,
                       name=f"{where.name}/split"), "".join(labels)


def h_einsum(where, ins, attrs):
    eq = attrs["equation"]
    eq = eq.decode() if isinstance(eq, bytes) else eq
    terms, res = _einsum_terms(where, eq, ins)
    vals = list(ins)
    for k in range(len(vals)):
        others = set(res).union(*(set(t) for j, t in enumerate(terms) if j != k))
        vals[k], terms[k] = _einsum_prepare(where, vals[k], terms[k], others)
    v, t = vals[0], terms[0]
    for k in range(1, len(vals)):
        later = set(res).union(*(set(x) for x in terms[k + 1:]))
        v, t = _einsum_pair(where, v, t, vals[k], terms[k], later)
    if sorted(t) != sorted(res):
        raise ConvertError(f"{where}: cannot reach {res!r} from {t!r}")
    perm = [t.index(ch) for ch in res]
    if perm == list(range(len(perm))):
        r = _reshape_to(where, v, v.shape, where.out(), name=f"{where.name}/out")
    else:
        r = _transpose(where, v, perm, out=where.out())
    return [Value(r.name, r.shape, ins[0].dt, node=r.node, actual=r.actual, deps=r.deps)]


HANDLERS = {
    "Add": h_binary("add"), "Sub": h_binary("sub"), "Mul": h_binary("mul"),
    "Div": h_binary("div"), "Pow": h_pow, "Mod": h_binary("mod"), "PRelu": h_binary("prelu"),
    "Min": h_variadic("Min"), "Max": h_variadic("Max"), "Sum": h_variadic("Sum"),
    "Mean": h_variadic("Mean"),
    "Equal": h_compare("equal"), "Less": h_compare("less"), "Greater": h_compare("greater"),
    "LessOrEqual": h_compare("less_equal"), "GreaterOrEqual": h_compare("greater_equal"),
    "And": h_compare("and"), "Or": h_compare("or"), "Xor": h_compare("xor"),
    "Where": h_where, "Not": h_typed_unary("not"), "BitShift": h_bitshift,
    "Relu": h_typed_unary("relu"), "Neg": h_typed_unary("neg"), "Abs": h_typed_unary("abs"),
    "Sign": h_typed_unary("sign"), "Clip": h_clip, "IsNaN": h_isx("isnan"),
    "IsInf": h_isx("isinf"), "Cast": h_cast, "CastLike": h_cast,
    "Identity": h_identity, "Dropout": h_dropout,
    "Gemm": h_gemm, "MatMul": h_matmul, "LayerNormalization": h_layernorm,
    "BatchNormalization": h_batchnorm, "InstanceNormalization": h_instnorm,
    "Softmax": h_softmax("softmax"), "LogSoftmax": h_softmax("log_softmax"),
    "Hardmax": h_softmax("hardmax"),
    "ReduceMean": h_reduce("reduce_mean", 18), "ReduceSum": h_reduce("reduce_sum", 13),
    "ReduceMax": h_reduce("reduce_max", 18), "ReduceMin": h_reduce("reduce_min", 18),
    "ReduceProd": h_reduce("reduce_prod", 18), "ReduceL1": h_reduce("reduce_l1", 18),
    "ReduceL2": h_reduce("reduce_l2", 18), "ReduceSumSquare": h_reduce("reduce_sum_square", 18),
    "ReduceLogSum": h_reduce("reduce_log_sum", 18),
    "ReduceLogSumExp": h_reduce("reduce_log_sum_exp", 18),
    "ArgMax": h_arg("argmax"), "ArgMin": h_arg("argmin"), "CumSum": h_cumsum,
    "Reshape": h_reshape, "Unsqueeze": h_unsqueeze, "Squeeze": h_squeeze,
    "Flatten": h_flatten, "Transpose": h_transpose, "Concat": h_concat, "Slice": h_slice,
    "Split": h_split, "Expand": h_expand, "Tile": h_tile, "Gather": h_gather,
    "GatherElements": h_gather_elements, "Trilu": h_trilu, "Pad": h_pad,
    "DepthToSpace": h_depth_space(True), "SpaceToDepth": h_depth_space(False),
    "EyeLike": h_eyelike,
    "Conv": h_conv, "ConvTranspose": h_conv_transpose, "MaxPool": h_pool("maxpool"), "AveragePool": h_pool("avgpool"),
    "GlobalAveragePool": h_global_pool("reduce_mean"),
    "GlobalMaxPool": h_global_pool("reduce_max"), "Resize": h_resize, "Upsample": h_resize,
    "NegativeLogLikelihoodLoss": h_nll, "SoftmaxCrossEntropyLoss": h_sce,
    "OneHot": h_onehot, "Compress": h_compress, "MeanVarianceNormalization": h_mvn,
    "HannWindow": h_window("hann"), "HammingWindow": h_window("hamming"),
    "BlackmanWindow": h_window("blackman"), "QuantizeLinear": h_quantize,
    "DequantizeLinear": h_dequantize, "DynamicQuantizeLinear": h_dynamic_quantize,
    "ScatterElements": h_scatter_elements, "Scatter": h_scatter_elements,
    "ScatterND": h_scatter_nd, "GatherND": h_gather_nd, "ReverseSequence": h_reverse_sequence,
    "TopK": h_topk, "LRN": h_lrn, "Det": h_det,
    "RNN": h_rnn("RNN"), "GRU": h_rnn("GRU"), "LSTM": h_rnn("LSTM"), "Einsum": h_einsum,
    "MaxUnpool": h_maxunpool,
}
HANDLERS.update({op: h_float_unary(op) for op in FLOAT_UNARY})
