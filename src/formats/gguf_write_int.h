/* SPDX-License-Identifier: MIT */
/*
 * Writing a GGUF v3 file (formats/gguf_write.c) whose metadata is another
 * file's: the layout of formats/gguf_int.h, written in order -- header
 * and metadata (open), one tensor info per tensor (tensor), the padding
 * before the data (begin_data), each tensor's bytes (data, then pad).
 * Tensors are placed in the order their infos were written, each at a
 * multiple of the alignment (general.alignment, or 32).
 */
#ifndef MU_FORMATS_GGUF_WRITE_INT_H
#define MU_FORMATS_GGUF_WRITE_INT_H

#include <stdint.h>
#include <stdio.h>

#include "formats/gguf_int.h"

typedef struct {
	FILE *f;
	char *path;       /* removed on a failed close */
	uint64_t align;
	uint64_t off;     /* the next tensor's offset in the data area */
	uint64_t pos;     /* bytes written */
} mu__gguf_out_t;

/*
 * Create path (it must not exist: O_EXCL) and write the header and g's
 * metadata, without the split keys, with general.quantization_version 2
 * and general.file_type ftype last (as llama.cpp's gguf_set_val puts
 * them). The tensor count is g's. 0, or -errno / MU_ENOMEM with err;
 * on failure nothing is left at path and o holds nothing.
 */
int mu__gguf_out_open(mu__gguf_out_t *o, const char *path, const mu__gguf_t *g,
                      uint32_t ftype, char *err, size_t el);
/* The info of tensor t (its name and shape) as type `type`, bytes long. */
int mu__gguf_out_tensor(mu__gguf_out_t *o, const mu__gguf_tensor_t *t, uint32_t type,
                        uint64_t bytes);
int mu__gguf_out_begin_data(mu__gguf_out_t *o);
int mu__gguf_out_data(mu__gguf_out_t *o, const void *p, size_t n);
/* Zeros up to the next multiple of the alignment. */
int mu__gguf_out_pad(mu__gguf_out_t *o);
/* Finish: with rc 0 flush and close (a write error becomes the result);
 * with rc != 0, or when closing fails, remove the file. Returns the
 * result (rc when it was not 0); err says why for a write error. */
int mu__gguf_out_close(mu__gguf_out_t *o, int rc, char *err, size_t el);

#endif
