# SPDX-License-Identifier: MIT
"""tools/onnx2muster.py's handlers for convolution, pooling, resizing and
the index ops (scatters, gather_nd, reverse_sequence, topk), lrn and
det: each an ONNX op that is one muster op, its constant inputs made
attributes. The handler contract is onnx2muster_ops.py's."""

import numpy as np

from onnx2muster_lib import ConvertError, Unsupported, Value, norm_axis
from onnx2muster_ops import _const, _const_ints, _input


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


HANDLERS = {
    "Conv": h_conv, "ConvTranspose": h_conv_transpose, "MaxPool": h_pool("maxpool"),
    "AveragePool": h_pool("avgpool"), "GlobalAveragePool": h_global_pool("reduce_mean"),
    "GlobalMaxPool": h_global_pool("reduce_max"), "Resize": h_resize, "Upsample": h_resize,
    "ScatterElements": h_scatter_elements, "Scatter": h_scatter_elements,
    "ScatterND": h_scatter_nd, "GatherND": h_gather_nd, "ReverseSequence": h_reverse_sequence,
    "TopK": h_topk, "LRN": h_lrn, "Det": h_det,
}
