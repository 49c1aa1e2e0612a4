/* SPDX-License-Identifier: MIT */
/*
 * The AVX2 kernels built a second time, with AVX512-VNNI and AVX512-VL
 * (-mavx512vnni -mavx512vl on top of kern/avx2.c's flags): the same
 * arithmetic, bit for bit, with vpdpbusd for the integer block sums and
 * larger integer tiles. kern.c runs it only on a CPU (and OS) with both.
 * The source is kern/avx2.c's, so that the two cannot drift apart.
 */
#define MU_KERN_VNNI 1
#include "kern/avx2.c"
