# SPDX-License-Identifier: MIT
"""tools/onnx2muster.py's handlers for ONNX ops that become several muster
nodes: the losses, OneHot, Compress, MeanVarianceNormalization, the
quantization ops, the window functions, MaxUnpool, RNN/GRU/LSTM unrolled
over the sequence, and Einsum. The handler contract is
onnx2muster_ops.py's."""

import numpy as np

from onnx2muster_lib import INTS, ConvertError, Unsupported, Value, mu_dtype, norm_axis, numel
from onnx2muster_ops import (_concat, _const, _gather_const, _input, _reshape_to, _slice_node,
                             _transpose)


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
    G, H = r.G, r.H
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
    "NegativeLogLikelihoodLoss": h_nll, "SoftmaxCrossEntropyLoss": h_sce,
    "OneHot": h_onehot, "Compress": h_compress, "MeanVarianceNormalization": h_mvn,
    "HannWindow": h_window("hann"), "HammingWindow": h_window("hamming"),
    "BlackmanWindow": h_window("blackman"), "QuantizeLinear": h_quantize,
    "DequantizeLinear": h_dequantize, "DynamicQuantizeLinear": h_dynamic_quantize,
    "RNN": h_rnn("RNN"), "GRU": h_rnn("GRU"), "LSTM": h_rnn("LSTM"), "Einsum": h_einsum,
    "MaxUnpool": h_maxunpool,
}
