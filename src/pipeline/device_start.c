/* SPDX-License-Identifier: MIT */
/*
 * A device's start, in the one order that is safe: bind the session
 * server with its registration held back, publish the device's metadata
 * under the address the tracker will hand out, and only then register.
 * A coordinator the tracker grants the device to thus always finds its
 * metadata. `muster server` and any C or Python program serving a device
 * call this instead of repeating the steps (device.c has the device).
 */
#include <stdio.h>

#include "muster/pipeline.h"
#include "core/net_int.h"
#include "core/opts_int.h"

int mu_device_start(mu_device_t *d, const mu_server_opts_t *uo, mu_server_t **out, char *err,
                    size_t el)
{
	mu_server_opts_t o;
	mu_server_t *s = NULL;
	char addr[300];
	int rc;

	*out = NULL;
	if (err == NULL)
		el = 0;
	mu_server_opts_init(&o);
	if (d == NULL || mu__opts_read(&o, sizeof(o), uo) != 0) {
		snprintf(err, el, "a device and server options from mu_server_opts_init are needed");
		return MU_EARG;
	}
	o.on_session = mu_device_session;
	o.ud = d;
	o.defer_register = 1;
	rc = mu_server_start(&o, &s);
	if (rc == MU_EBIND) {
		snprintf(err, el, "cannot bind to any port in [%d, %d)", o.port, o.port_end);
		return rc;
	}
	if (rc != 0) {
		snprintf(err, el, "cannot start the session server: %s", mu_strerror(rc));
		return rc;
	}
	/* an address others can dial, never the wildcard bound to */
	mu__hostport_text(mu_server_host(s), mu_server_port(s), addr, sizeof(addr));
	rc = mu_device_publish(d, addr, err, el);
	if (rc == 0 && (rc = mu_server_register(s)) != 0)
		snprintf(err, el, "cannot register with the tracker: %s", mu_strerror(rc));
	if (rc != 0) {
		mu_server_free(s);
		return rc;
	}
	*out = s;
	return 0;
}
