/* SPDX-License-Identifier: MIT */
/*
 * Error text for muster's own codes and for -errno values.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/error_int.h"

const char *mu_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case MU_EPROTO:
		return "protocol error from peer";
	case MU_EBADMAGIC:
		return "wrong magic number (not the expected protocol)";
	case MU_ETOOBIG:
		return "length or count over the configured limit";
	case MU_EJSON:
		return "invalid JSON";
	case MU_EEOF:
		return "connection closed by peer";
	case MU_EFAIL:
		return "peer answered with failure";
	case MU_EMISMATCH:
		return "session refused: matchkey mismatch";
	case MU_ESTOPPED:
		return "service stopped";
	case MU_EBIND:
		return "cannot bind to any port in the range";
	case MU_EARG:
		return "invalid argument";
	case MU_ENOMEM:
		return "out of memory";
	case MU_ERESOLVE:
		return "host name does not resolve";
	case MU_EAUTH:
		return "authentication failed (shared secret)";
	case MU_ETLS:
		return "TLS failed (a certificate, the handshake, or TLS spoken on one side only)";
	default:
		break;
	}
	if (err < 0 && err > -4096) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
		/* glibc's strerror() formats an unknown number into a buffer
		 * that the next call frees, which breaks the static contract;
		 * strerrordesc_np() gives the same static text, or NULL. */
		const char *d = strerrordesc_np(-err);

		return d != NULL ? d : "unknown error";
#else
		return strerror(-err);
#endif
	}
	return "unknown error";
}

const char *mu_version(void)
{
	return MU_VERSION_STRING;
}

int mu_version_num(void)
{
	return MU_VERSION_NUM;
}

int mu__why(char *why, size_t wl, int rc, const char *fmt, ...)
{
	va_list ap;

	if (why != NULL && wl > 0) {
		va_start(ap, fmt);
		vsnprintf(why, wl, fmt, ap);
		va_end(ap);
	}
	return rc;
}
