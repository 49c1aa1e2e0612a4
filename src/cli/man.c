/* SPDX-License-Identifier: MIT */
/*
 * Manual pages from the option tables that --help prints, so the two
 * never drift: `muster CMD --help-man` writes CMD's page in roff (man(7))
 * on stdout, and `muster help-man DIR` writes muster.1 and one page per
 * subcommand into DIR by running each one's --help-man (the build does,
 * for `cmake --install` to put them in share/man/man1).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "muster/common.h"
#include "cli/cli_int.h"

/* NAME's description of the page help-man is writing (else: the first
 * sentence of the command's about text). */
static const char *man_whatis;

/* Text safe in roff: backslashes escaped, no line starting a request. */
static void roff_text(FILE *f, const char *s, size_t n)
{
	int bol = 1;

	for (size_t i = 0; i < n; i++) {
		if (bol && (s[i] == '.' || s[i] == '\''))
			fputs("\\&", f);
		bol = s[i] == '\n';
		if (s[i] == '\\')
			fputs("\\e", f);
		else if (s[i] == '-' && (i == 0 || s[i - 1] == '-' || s[i - 1] == ' ' || s[i - 1] == '['))
			fputs("\\-", f); /* an option's dashes, not hyphens */
		else
			fputc(s[i], f);
	}
}

void cli_print_man(const cli_cmd_t *cmd)
{
	size_t nl = cli_cmd_name_len(cmd->usage);
	const char *about = cmd->about, *dot = strstr(about, ". ");
	const char *dotnl = strstr(about, ".\n");
	int aliases = 0;

	if (dot == NULL || (dotnl != NULL && dotnl < dot))
		dot = dotnl;
	printf(".TH \"");
	for (size_t i = 0; i < nl; i++)
		putchar(cmd->usage[i] == ' ' ? '-' : cmd->usage[i] >= 'a' && cmd->usage[i] <= 'z'
		        ? cmd->usage[i] - 'a' + 'A' : cmd->usage[i]);
	printf("\" 1 \"\" \"muster %s\" \"muster manual\"\n.SH NAME\n", mu_version());
	for (size_t i = 0; i < nl; i++)
		putchar(cmd->usage[i] == ' ' ? '-' : cmd->usage[i]);
	fputs(" \\- ", stdout);
	if (man_whatis != NULL)
		roff_text(stdout, man_whatis, strlen(man_whatis));
	else { /* the first sentence, on one line */
		char first[512];
		size_t n = dot != NULL ? (size_t)(dot - about) : strlen(about);

		n = n < sizeof(first) ? n : sizeof(first) - 1;
		for (size_t i = 0; i < n; i++)
			first[i] = about[i] == '\n' ? ' ' : about[i];
		roff_text(stdout, first, n);
	}
	printf("\n.SH SYNOPSIS\n.nf\n");
	roff_text(stdout, cmd->usage, strlen(cmd->usage));
	printf("\n.fi\n.SH DESCRIPTION\n.nf\n");
	roff_text(stdout, about, strlen(about));
	printf("\n.fi\n.SH OPTIONS\n");
	for (int i = 0; i < cmd->nopts; i++) {
		const cli_opt_t *o = &cmd->opts[i];

		if (o->kind == OPT_ALIAS) {
			aliases++;
			continue;
		}
		/* the tag: --name in bold, then its value's name in italics */
		printf(".TP\n%s \"\\-\\-", o->metavar != NULL ? ".BI" : ".B");
		roff_text(stdout, o->name, strlen(o->name));
		if (o->metavar != NULL) {
			printf(" \" \"");
			roff_text(stdout, o->metavar, strlen(o->metavar));
		}
		printf("\"\n");
		roff_text(stdout, o->help, strlen(o->help));
		putchar('\n');
	}
	printf(".TP\n.B \"\\-\\-help\"\nshow this help and exit\n");
	if (aliases > 0) {
		/* what --help's last line lists: old spellings kept for scripts */
		printf(".SH ALIASES\nOld spellings of options, still accepted: each works as the "
		       "option it names.\n");
		for (int i = 0; i < cmd->nopts; i++) {
			const cli_opt_t *o = &cmd->opts[i];

			if (o->kind != OPT_ALIAS)
				continue;
			printf(".TP\n.B \"\\-\\-");
			roff_text(stdout, o->name, strlen(o->name));
			printf("\"\nthe same as \\fB\\-\\-");
			roff_text(stdout, o->metavar, strlen(o->metavar));
			printf("\\fR\n");
		}
	}
	printf(".SH SEE ALSO\n.BR muster (1)\n");
}

/* Run fn(argv) with stdout going to DIR/NAME.1; 0 when it wrote a page. */
static int write_page(const char *dir, const char *name, int (*fn)(int, char **), int argc,
                      char **argv, const char *whatis)
{
	char path[4096];
	int fd, saved, rc;
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s.1", dir, name);
	fflush(stdout);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	saved = dup(STDOUT_FILENO);
	if (fd < 0 || saved < 0 || dup2(fd, STDOUT_FILENO) < 0) {
		fprintf(stderr, "muster help-man: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	close(fd);
	man_whatis = whatis;
	rc = fn(argc, argv);
	man_whatis = NULL;
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	if (rc != 0 || stat(path, &st) != 0 || st.st_size == 0) {
		fprintf(stderr, "muster help-man: %s --help-man wrote no page\n", name);
		return 1;
	}
	return 0;
}

int cli_help_man(int argc, char **argv, const cli_page_t *pages, size_t n,
                 void (*overview)(FILE *f))
{
	char path[4096];
	FILE *f;
	int bad = 0;

	if (argc != 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: muster help-man DIR   (write muster.1 and a page per "
		        "subcommand into DIR)\n");
		return argc == 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
	}
	if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "muster help-man: cannot create %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/muster.1", argv[1]);
	if ((f = fopen(path, "w")) == NULL) {
		fprintf(stderr, "muster help-man: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(f, ".TH MUSTER 1 \"\" \"muster %s\" \"muster manual\"\n.SH NAME\nmuster \\- "
	        "gather devices, let jobs rendezvous and run models across machines\n"
	        ".SH SYNOPSIS\n.B muster\n.I command\n[options]\n.SH DESCRIPTION\n.nf\n",
	        mu_version());
	overview(f);
	fprintf(f, ".fi\nEach command's options are in its own page, and in\n"
	        ".B muster\n.I command\n\\-\\-help.\n.SH SEE ALSO\n");
	for (size_t i = 0; i < n; i++)
		fprintf(f, ".BR %s (1)%s\n", pages[i].page, i + 1 < n ? "," : "");
	fclose(f);
	for (size_t i = 0; i < n; i++) {
		char *args[3];
		int na = 0;

		args[na++] = (char *)pages[i].cmd;
		if (pages[i].sub != NULL)
			args[na++] = (char *)pages[i].sub;
		args[na++] = "--help-man";
		bad |= write_page(argv[1], pages[i].page, pages[i].fn, na, args, pages[i].whatis);
	}
	return bad;
}
