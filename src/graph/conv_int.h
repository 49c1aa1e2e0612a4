/* SPDX-License-Identifier: MIT */
/*
 * What the convolution and pooling ops share (ops_conv.c, ops_pool.c):
 * the spatial geometry of a window sliding over [N, C, D1..Dk], k = 1..3,
 * always held as 3-D with leading dims of 1, its attributes (strides,
 * pads, dilations, kernel_shape) read and checked, and the ranges of
 * kernel taps and output positions that fall inside the input.
 */
#ifndef MU_GRAPH_CONV_INT_H
#define MU_GRAPH_CONV_INT_H

#include "graph/ops_int.h"

/* Spatial geometry, always 3-D (unused leading dims are 1 wide). */
typedef struct {
	int k;                        /* spatial dims in the graph: 1..3 */
	uint64_t n, c, m, group;
	uint64_t in[3], ker[3], out[3];
	int64_t str[3], pad[3], pend[3], dil[3];   /* pad: begin, pend: end */
} mu__geom_t;

static inline uint64_t mu__prod3(const uint64_t *d)
{
	return d[0] * d[1] * d[2];
}

/* An int list attr of length want (absent: every entry dflt); -1 when it
 * is there with another length. */
int mu__conv_ints(const mu__node_t *n, const char *key, int want, int64_t dflt, int64_t *out);
/* The attribute check of conv, conv_transpose and the pools. */
int mu__conv_check(const mu__node_t *n, char *why, size_t wl);
/*
 * The geometry of node n over input x (and kernel dims kd, from the
 * weights or kernel_shape): strides, pads, dilations, output dims. ceil:
 * pooling's ceil_mode. MU_EPROTO when the attributes do not fit.
 */
int mu__conv_geometry(const mu__node_t *n, const mu__shape_t *x, const uint64_t *kd, int ceil_,
                      mu__geom_t *g);
/* [N, channels, output dims] */
void mu__conv_out_shape(const mu__geom_t *g, uint64_t channels, mu__shape_t *out);
/* The kernel offsets k in [*k0, *k1) of a window starting at base (with
 * dilation dil, ker taps) whose positions base + k * dil lie in [lo, hi). */
void mu__krange(int64_t base, int64_t dil, uint64_t ker, int64_t lo, int64_t hi, int64_t *k0,
                int64_t *k1);
/* The output positions o in [*o0, *o1) of one kernel tap (offset
 * k * dil - pad) that read inside [0, in): o * str + off in range. */
void mu__orange(int64_t off, int64_t str, uint64_t in, uint64_t out, uint64_t *o0, uint64_t *o1);

#endif
