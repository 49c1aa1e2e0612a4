/* SPDX-License-Identifier: MIT */
/*
 * OpenBLAS's thread count, borrowed for the length of a forward. The count
 * is one setting per process, shared with everything else there that uses
 * OpenBLAS (numpy, under the Python binding): the library never leaves it
 * changed. The first forward to start saves the count and sets its own;
 * forwards that overlap it run at that count; the last one to end puts
 * the saved count back. Any thread.
 */
#ifndef MU_KERN_BLAS_INT_H
#define MU_KERN_BLAS_INT_H

/* Before a forward that calls OpenBLAS: threads >= 1. */
void mu__blas_enter(int threads);
/* After it, once for each mu__blas_enter. */
void mu__blas_leave(void);

#endif
