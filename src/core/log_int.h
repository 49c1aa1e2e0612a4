/* SPDX-License-Identifier: MIT */
/*
 * Internal logging: formats a line and hands it to the sink installed with
 * mu_log_set_sink(). Cheap when the level is filtered out (the check comes
 * before formatting).
 */
#ifndef MU_CORE_LOG_INT_H
#define MU_CORE_LOG_INT_H

#include "muster/common.h"

int mu__log_enabled(mu_log_level_t level);
void mu__log(mu_log_level_t level, const char *module, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
