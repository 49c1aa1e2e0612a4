/* SPDX-License-Identifier: MIT */
#include <stdio.h>

#include "cli/cli_int.h"

int cmd_demo(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "muster demo: not yet\n");
	return 2;
}
