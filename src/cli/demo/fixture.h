/* SPDX-License-Identifier: MIT */
/*
 * Fixtures (fixture.c): generated models and random inputs that
 * `muster model gen|input`, the demo, the benchmarks and the tests build
 * on. The command's own, written on the public API: the library opens
 * and runs models, it does not make them.
 */
#ifndef MU_CLI_DEMO_FIXTURE_H
#define MU_CLI_DEMO_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "muster/tensor.h"

/*
 * Write a generated MLP to dir (created if missing): `layers` gemm layers
 * (weights [out, in] as PyTorch's Linear stores them, plus bias) from
 * widths[0] to widths[layers], an activation ("relu", "gelu", "tanh",
 * "sigmoid", "silu") between them, input "x" of shape [batch, widths[0]],
 * output "y". Weights are seeded pseudo-random, identical for a seed on
 * every host, and streamed to disk a row at a time. 0, or MU_EARG,
 * MU_ENOMEM, -errno with the cause in err.
 */
int cli_gen_mlp(const char *dir, const uint64_t *widths, int layers,
                uint64_t batch, const char *act, uint64_t seed,
                char *err, size_t errlen);
/* A tensor of seeded pseudo-random values in [-1, 1). */
int cli_tensor_random(const char *name, uint32_t rank,
                      const uint64_t *dims, uint64_t seed,
                      mu_tensor_t **out);
/* The same in any dtype: floats random in [-1, 1) (rounded to the
 * dtype), integers and BOOL zeros, which every index (row 0) and mask
 * input accepts. */
int cli_tensor_random_typed(const char *name, mu_dtype_t dtype,
                            uint32_t rank, const uint64_t *dims,
                            uint64_t seed, mu_tensor_t **out);

#endif
