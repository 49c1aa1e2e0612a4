/* SPDX-License-Identifier: MIT */
/*
 * kern/avx2_32.c built a second time with MU_KERN_VNNI and kern/vnni.c's
 * flags, for the AVX512-VNNI table: the same source, so the two cannot
 * drift apart (and the same bits: the sums are exact integers).
 */
#define MU_KERN_VNNI 1
#include "kern/avx2_32.c"
