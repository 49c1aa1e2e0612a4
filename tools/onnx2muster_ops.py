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
}
HANDLERS.update({op: h_float_unary(op) for op in FLOAT_UNARY})
