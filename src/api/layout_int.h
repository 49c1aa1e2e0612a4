/* SPDX-License-Identifier: MIT */
/*
 * The table behind mu_layout_size and mu_layout_field (core/layout.c),
 * open to the unit test that checks it against the structs.
 */
#ifndef MU_API_LAYOUT_INT_H
#define MU_API_LAYOUT_INT_H

#include <stddef.h>

typedef struct {
	const char *name; /* NULL ends a list */
	size_t offset, size;
} mu__layout_field_t;

typedef struct {
	const char *name; /* the C type's name; NULL ends the table */
	size_t size;
	const mu__layout_field_t *fields; /* in declaration order */
} mu__layout_t;

const mu__layout_t *mu__layouts(void);

#endif
