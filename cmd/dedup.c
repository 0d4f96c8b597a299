/*
 * dedup.c -- the `dedup` command: the subcommand table and `dedup --help`,
 * main, and what most subcommands share: option parsing and opening the
 * store.  The subcommands live in dedup_*.c (dedup_cmd.h lists them).
 *
 * Uses include/dedup.h only.  Exit status: 0 success, 1 an error (one line
 * "dedup: message" on stderr), 2 a usage error.  Data and requested output
 * go to stdout; messages, summaries and progress to stderr.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup_cmd.h"

/*
 * The subcommands, in the order `dedup --help` lists them.  A new one is
 * one entry here, its cmd_ function in dedup_cmd.h and its own
 * dedup_*.c.
 */
static const struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage;          /* its lines of `dedup --help` */
} subcommands[] = {
	{"init", cmd_init,
	 "  dedup init [--chunker fixed|fastcdc] [--block-size N] [--verify]\n"
	 "             [--compress zstd[:LEVEL]|none] STORE\n"},
	{"put", cmd_put,
	 "  dedup put  [-v] [--wait] STORE@NAME [FILE|-]   ingest FILE, a device or stdin\n"},
	{"get", cmd_get,
	 "  dedup get  [-v] STORE@NAME [FILE|-]            restore to FILE or stdout\n"},
	{"ls", cmd_ls,
	 "  dedup ls   [--json] [--no-unique] STORE        list snapshots, the bytes each\n"
	 "                                                 holds alone (UNIQUE)\n"},
	{"rm", cmd_rm,
	 "  dedup rm   [--wait] STORE@NAME                 delete a snapshot\n"},
	{"diff", cmd_diff,
	 "  dedup diff [-v] [--json] STORE@A B             byte ranges where B differs\n"
	 "                                                 from A\n"},
	{"prune", cmd_prune,
	 "  dedup prune [--keep-last N] [--keep-hourly N] [--keep-daily N]\n"
	 "              [--keep-weekly N] [--keep-monthly N] [--keep-yearly N]\n"
	 "              [--prefix P] [--utc] [--dry-run] [--gc] [--json] [--wait] STORE\n"
	 "                                                 delete snapshots no rule keeps\n"},
	{"mount", cmd_mount,
	 "  dedup mount [-f] [-o OPT[,OPT...]] STORE MOUNTPOINT\n"
	 "                                                 snapshots as read-only files\n"
	 "                                                 (FUSE)\n"},
	{"umount", cmd_umount,
	 "  dedup umount MOUNTPOINT                        unmount it\n"},
	{"stat", cmd_stat,
	 "  dedup stat [--json] STORE                      dedup/compress ratios, DDT, histogram\n"},
	{"gc", cmd_gc,
	 "  dedup gc   [--wait] STORE                      reclaim unreferenced space\n"},
	{"scrub", cmd_scrub,
	 "  dedup scrub STORE                              verify every stored block\n"},
	{"repair", cmd_repair,
	 "  dedup repair [-v] [--verify] [--wait] [--json] STORE\n"
	 "                                                 rebuild the catalog from packs\n"
	 "                                                 and snapshot manifests\n"},
	{"cache", cmd_cache,
	 "  dedup cache add [--size N] [--force] STORE PATH  add an L2 cache device\n"
	 "  dedup cache rm STORE PATH                      stop using an L2 cache device\n"
	 "  dedup cache ls [--json] STORE                  cache devices and tunables\n"
	 "  dedup cache set [--l1-size N|off] [--l2-write-max N]\n"
	 "                  [--l2-feed-sequential on|off] STORE  store the tunables\n"},
	{"scan", cmd_scan,
	 "  dedup scan [-v] [--json] [--chunker fixed|fastcdc[,...]] [--block-size N[,N...]]\n"
	 "             [--compress zstd[:L]|none] [--memory SIZE] [--sample]\n"
	 "             [--sample-rate N] [--tmpdir DIR]\n"
	 "             PATH...|-                           what dedup would save on existing\n"
	 "                                                 files, trees, devices or stdin\n"},
};

static const char usage_head[] =
	"usage: dedup COMMAND [OPTIONS] ARGS\n"
	"\n";

static const char usage_tail[] =
	"\n"
	"  --help       show this help\n"
	"  --version    show the version\n"
	"\n"
	"Commands that open a store (put get ls rm diff prune mount stat gc scrub)\n"
	"also take:\n"
	"  --no-cache            do not use the store's L2 cache devices\n"
	"  --l1-size N           RAM for the L1 block cache (0: none)\n"
	"  --l2-write-max N      bytes per second fed to L2\n"
	"  --l2-feed-sequential  feed blocks of long sequential reads to L2\n"
	"  --stats FILE|-        write this run's I/O and cache figures as JSON\n"
	"\n"
	"Sizes accept K/KiB/M/MiB/G/GiB suffixes (powers of 1024).\n"
	"Exit status: 0 success, 1 error, 2 usage error.\n";

#define NSUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

const char *dedup_subcmd = "";

/* ---- option parsing -----------------------------------------------------*/

void usage_exit(void)
{
	fputs(usage_head, stdout);
	for (size_t i = 0; i < NSUBCOMMANDS; i++)
		fputs(subcommands[i].usage, stdout);
	fputs(usage_tail, stdout);
	exit(0);
}

void other_option(int c, char **argv)
{
	if (c == '?' || c == ':' ||
	    cache_cli_option(dedup_subcmd, c, optarg) != 0)
		die_bad_option(dedup_subcmd, c, argv);
}

void want_args(int argc, char **argv, int min, int max)
{
	int n = argc - optind;

	if (n < min)
		die_usage("%s: missing argument", dedup_subcmd);
	if (n > max)
		die_usage("%s: unexpected argument '%.300s'", dedup_subcmd,
			  argv[optind + max]);
}

void parse_common(int argc, char **argv, const int *allow,
		  struct common_opts *o)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"wait", no_argument, NULL, OPT_WAIT},
		{"json", no_argument, NULL, OPT_JSON},
		{"no-unique", no_argument, NULL, OPT_NO_UNIQUE},
		CACHE_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(o, 0, sizeof(*o));
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
		const int *a;

		if (c == OPT_HELP)
			usage_exit();
		if (c == '?' || c == ':')
			die_bad_option(dedup_subcmd, c, argv);
		for (a = allow; *a && *a != c; a++)
			;
		if (!*a)
			die_usage("%s: option '%s' not valid here", dedup_subcmd,
				  argv[optind - 1]);
		if (c == OPT_VERBOSE)
			o->verbose = 1;
		else if (c == OPT_WAIT)
			o->wait = 1;
		else if (c == OPT_JSON)
			o->json = 1;
		else if (c == OPT_NO_UNIQUE)
			o->no_unique = 1;
		else
			cache_cli_option(dedup_subcmd, c, optarg);
	}
}

/* ---- the store ----------------------------------------------------------*/

dd_store *open_store(const char *path, int wait, int readonly)
{
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_store *s = NULL;
	int rc;

	oo.wait_for_lock = wait;
	oo.readonly = readonly;
	cache_cli_apply(&oo);         /* --no-cache, --l1-size, ... */
	rc = dd_store_open(&s, path, &oo);
	if (rc != 0)
		die("%s", lib_msg(dd_store_errmsg(NULL), rc));
	cache_cli_opened(s, dedup_subcmd, path);   /* for --stats */
	return s;
}

dd_store *open_store_arg(int argc, char **argv, const int *allow,
			 struct common_opts *o, int readonly)
{
	parse_common(argc, argv, allow, o);
	want_args(argc, argv, 1, 1);
	return open_store(argv[optind], o->wait, readonly);
}

void die_store(dd_store *s, int rc)
{
	die("%s", lib_msg(dd_store_errmsg(s), rc));
}

const char *err_symbol(char *buf, size_t len, int code)
{
	const char *s = dd_strerror(code);
	size_t n = strcspn(s, ":");

	if (n >= len)
		n = len - 1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	return buf;
}

/* ---- main ---------------------------------------------------------------*/

int main(int argc, char **argv)
{
	util_set_prog("dedup");
	if (argc < 2)
		die_usage("missing command");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0)
		usage_exit();
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
		print_tool_version("dedup");
	for (size_t i = 0; i < NSUBCOMMANDS; i++) {
		if (strcmp(argv[1], subcommands[i].name) == 0) {
			dedup_subcmd = subcommands[i].name;
			return subcommands[i].run(argc - 1, argv + 1);
		}
	}
	if (argv[1][0] == '-')
		die_usage("unknown option '%.100s'", argv[1]);
	die_usage("unknown command '%.100s'", argv[1]);
}
