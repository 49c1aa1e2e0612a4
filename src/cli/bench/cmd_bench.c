/* SPDX-License-Identifier: MIT */
/*
 * `muster bench <part>`: load generators. Each benchmark lives in its own
 * bench_<part>.c; this file only dispatches.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli_int.h"

int cmd_bench(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "tracker") == 0)
		return bench_tracker(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "store") == 0)
		return bench_store(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "md") == 0)
		return bench_md(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "pipeline") == 0)
		return bench_pipeline(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "kern") == 0)
		return bench_kern(argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: muster bench tracker|store|md|pipeline|kern [options]\n\n"
		       "Benchmarks:\n"
		       "  tracker   any TVM-protocol tracker (muster bench tracker --help)\n"
		       "  store     any TCPStore, either dialect (muster bench store --help)\n"
		       "  md        metadata exchange through etcd, a TCPStore or P2P\n"
		       "  pipeline  tensor frames, pipelined stages, the executor\n"
		       "  kern      the decoder's matrix products per weight type, against OpenBLAS\n");
		return 0;
	}
	fprintf(stderr, "usage: muster bench tracker|store|md|pipeline|kern [options] (see muster bench --help)\n");
	return 2;
}
