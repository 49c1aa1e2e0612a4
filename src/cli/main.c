/* SPDX-License-Identifier: MIT */
/*
 * `muster`: one command, one subcommand per job.
 */
#include <stdio.h>
#include <string.h>

#include <cblas.h>

#include "muster/common.h"
#include "cli/cli_int.h"
#include "cli/progress_int.h"

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *help;
} commands[] = {
	{"tracker", cmd_tracker, "run a TVM-compatible RPC tracker (device pool)"},
	{"query", cmd_query, "show a tracker's servers and queues"},
	{"top", cmd_top, "a live table: devices, keys, queues, per-stage load"},
	{"server", cmd_server, "run on a device: register with a tracker, serve sessions"},
	{"request", cmd_request, "get a device from a tracker and open a session on it"},
	{"store", cmd_store, "run a TCPStore-compatible rendezvous store (torch 1.13 and 2.x)"},
	{"store-cli", cmd_store_cli, "get, set, add, wait ... on any TCPStore"},
	{"md", cmd_md, "publish, fetch, invalidate, list agents' metadata (NIXL-style)"},
	{"model", cmd_model, "generate a model or inputs for one; quantize a GGUF checkpoint"},
	{"plan", cmd_plan, "show how a model splits into stages"},
	{"stage", cmd_stage, "serve one stage of a split model"},
	{"generate", cmd_generate, "generate text with an LLM, here or split over stages"},
	{"serve", cmd_serve, "serve an LLM over HTTP with the OpenAI API"},
	{"run", cmd_run, "run a model through its stages (or in this process)"},
	{"tokenize", cmd_tokenize, "text to an LLM's token ids and back"},
	{"demo", cmd_demo, "show the system working on this machine"},
	{"bench", cmd_bench, "measure a part under load (bench tracker ...)"},
};

/* The manual's pages: a command with subcommands has one per subcommand
 * (its own --help only lists them). */
static const cli_page_t pages[] = {
	{"muster-tracker", "tracker", NULL, cmd_tracker, NULL},
	{"muster-query", "query", NULL, cmd_query, NULL},
	{"muster-top", "top", NULL, cmd_top, NULL},
	{"muster-server", "server", NULL, cmd_server, NULL},
	{"muster-request", "request", NULL, cmd_request, NULL},
	{"muster-store", "store", NULL, cmd_store, NULL},
	{"muster-store-cli", "store-cli", NULL, cmd_store_cli, NULL},
	{"muster-md", "md", NULL, cmd_md, NULL},
	{"muster-model-gen", "model", "gen", cmd_model, "write a generated MLP with seeded random weights"},
	{"muster-model-input", "model", "input", cmd_model, "write random inputs of the right shapes for a model"},
	{"muster-model-quantize", "model", "quantize", cmd_model, "write a GGUF checkpoint in another type"},
	{"muster-plan", "plan", NULL, cmd_plan, NULL},
	{"muster-stage", "stage", NULL, cmd_stage, NULL},
	{"muster-generate", "generate", NULL, cmd_generate, NULL},
	{"muster-serve", "serve", NULL, cmd_serve, NULL},
	{"muster-run", "run", NULL, cmd_run, NULL},
	{"muster-tokenize", "tokenize", NULL, cmd_tokenize, NULL},
	{"muster-demo", "demo", NULL, cmd_demo, NULL},
	{"muster-bench-tracker", "bench", "tracker", cmd_bench, "load a TVM-protocol tracker"},
	{"muster-bench-store", "bench", "store", cmd_bench, "load a TCPStore"},
	{"muster-bench-md", "bench", "md", cmd_bench, "measure metadata exchange"},
	{"muster-bench-pipeline", "bench", "pipeline", cmd_bench, "measure the pipeline's costs"},
	{"muster-bench-kern", "bench", "kern", cmd_bench, "measure the decoder's matrix products"},
};

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: muster <command> [options]   (muster <command> --help for more)\n\n"
	           "muster gathers devices, lets jobs rendezvous and runs models across machines.\n\n"
	           "commands:\n");
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "  %-10s %s\n", "version", "print the version");
}

/* The pages, each top-level one described as in `muster --help`. */
static int help_man(int argc, char **argv)
{
	cli_page_t p[sizeof(pages) / sizeof(pages[0])];

	for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
		p[i] = pages[i];
		for (size_t j = 0; p[i].whatis == NULL && j < sizeof(commands) / sizeof(commands[0]); j++)
			if (strcmp(commands[j].name, p[i].cmd) == 0)
				p[i].whatis = commands[j].help;
	}
	return cli_help_man(argc, argv, p, sizeof(p) / sizeof(p[0]), usage);
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("muster %s\n", mu_version());
		return 0;
	}
	if (strcmp(argv[1], "help-man") == 0)
		return help_man(argc - 1, argv + 1);
	/* The command splits a graph's products over its own threads
	 * (--threads); OpenBLAS's own stay off, which is what makes a split
	 * run's bits the whole run's (the contract in muster/model.h). The
	 * count is the program's to set, and this is the program. */
	openblas_set_num_threads(1);
	/* status lines for long steps, when stderr is a terminal then */
	cli_progress_install();
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "muster: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
