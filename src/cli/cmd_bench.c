/* SPDX-License-Identifier: MIT */
#include <stdio.h>

#include "cli/cli_int.h"

int cmd_bench(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "muster bench: not yet\n");
	return 2;
}
