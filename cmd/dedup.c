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
	int store;                  /* opens a store: takes usage_store's */
} subcommands[] = {
	{"init", cmd_init,
	 "  dedup init [--chunker fixed|fastcdc] [--block-size N] [--verify]\n"
	 "             [--compress zstd[:LEVEL]|none] STORE\n", 0},
	{"put", cmd_put,
	 "  dedup put  [-v] [--json] [--wait[=S]] STORE@NAME [FILE|-]\n"
	 "                                                 ingest FILE, a device or stdin\n", 1},
	{"get", cmd_get,
	 "  dedup get  [-v] [--json] [--salvage] STORE@NAME [FILE|-]\n"
	 "                                                 restore to FILE or stdout\n"
	 "                                                 (not a terminal); --salvage:\n"
	 "                                                 damaged blocks as zeros, listed\n", 1},
	{"ls", cmd_ls,
	 "  dedup ls   [--json] [--no-unique] STORE        list snapshots, the bytes each\n"
	 "                                                 holds alone (UNIQUE)\n", 1},
	{"rm", cmd_rm,
	 "  dedup rm   [--json] [--wait[=S]] STORE@NAME    delete a snapshot\n", 1},
	{"diff", cmd_diff,
	 "  dedup diff [-v] [--json] STORE@A B             byte ranges where B differs\n"
	 "                                                 from A\n", 1},
	{"prune", cmd_prune,
	 "  dedup prune [--keep-last N] [--keep-hourly N] [--keep-daily N]\n"
	 "              [--keep-weekly N] [--keep-monthly N] [--keep-yearly N]\n"
	 "              [--prefix P] [--utc] [--dry-run] [--gc] [--json] [--wait[=S]] STORE\n"
	 "                                                 delete snapshots no rule keeps\n", 1},
	{"mount", cmd_mount,
	 "  dedup mount [-f] [-o OPT[,OPT...]] STORE MOUNTPOINT\n"
	 "                                                 snapshots as read-only files\n"
	 "                                                 (FUSE)\n", 1},
	{"umount", cmd_umount,
	 "  dedup umount MOUNTPOINT                        unmount it\n", 0},
	{"stat", cmd_stat,
	 "  dedup stat [--json] STORE                      dedup/compress ratios, DDT, histogram\n", 1},
	{"gc", cmd_gc,
	 "  dedup gc   [-v] [--json] [--wait[=S]] STORE    reclaim unreferenced space\n", 1},
	{"scrub", cmd_scrub,
	 "  dedup scrub [-v] [--json] STORE                verify every stored block\n", 1},
	{"repair", cmd_repair,
	 "  dedup repair [-v] [--verify | --from SOURCE|-] [--wait[=S]] [--json] STORE\n"
	 "                                                 rebuild the catalog from packs\n"
	 "                                                 and snapshot manifests; --from:\n"
	 "                                                 heal damaged and lost blocks from\n"
	 "                                                 another store or a ddsend stream\n", 0},
	{"cache", cmd_cache,
	 "  dedup cache add [--size N] [--force] STORE PATH  add an L2 cache device\n"
	 "  dedup cache rm STORE PATH                      stop using an L2 cache device\n"
	 "  dedup cache ls [--json] STORE                  cache devices and tunables\n"
	 "  dedup cache set [--l1-size N|off] [--l2-write-max N]\n"
	 "                  [--l2-feed-sequential on|off] STORE  store the tunables\n", 0},
	{"scan", cmd_scan,
	 "  dedup scan [-v] [--json] [--chunker fixed|fastcdc[,...]] [--block-size N[,N...]]\n"
	 "             [--compress zstd[:L]|none] [--compress-exact] [--memory SIZE]\n"
	 "             [--sample] [--sample-rate N] [--tmpdir DIR]\n"
	 "             PATH...|-                           what dedup would save on existing\n"
	 "                                                 files, trees, devices or stdin\n", 0},
};

static const char usage_head[] =
	"usage: dedup COMMAND [OPTIONS] ARGS\n"
	"\n";

static const char usage_common[] =
	"\n"
	"  -v, --verbose  progress on stderr (a terminal shows it without -v),\n"
	"                 and a summary\n"
	"  -q, --quiet    no progress and no summaries: errors only\n"
	"  --json         the result as JSON (on stdout, or on stderr where\n"
	"                 stdout carries data)\n"
	"  --help         show this help; 'dedup help COMMAND' or\n"
	"                 'dedup COMMAND --help' shows one command's\n"
	"  --version      show the version\n";

static const char usage_store[] =
	"\n"
	"Commands that open a store (put get ls rm diff prune mount stat gc scrub)\n"
	"also take:\n"
	"  --no-cache            do not use the store's L2 cache devices\n"
	"  --l1-size N           RAM for the L1 block cache (0: none)\n"
	"  --l2-write-max N      bytes per second fed to L2\n"
	"  --l2-feed-sequential  feed blocks of long sequential reads to L2\n"
	"  --stats FILE|-        write this run's I/O and cache figures as JSON\n";

static const char usage_tail[] =
	"\n"
	"Sizes accept K/KiB/M/MiB/G/GiB suffixes (powers of 1024).\n"
	"Exit status: 0 success, 1 error, 2 usage error.  The manual: man dedup\n";

#define NSUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

const char *dedup_subcmd = "";

/* ---- option parsing -----------------------------------------------------*/

static const struct subcommand *find_subcommand(const char *name)
{
	for (size_t i = 0; i < NSUBCOMMANDS; i++)
		if (strcmp(name, subcommands[i].name) == 0)
			return &subcommands[i];
	return NULL;
}

/* One command's help, or every command's (cmd NULL). */
static _Noreturn void help_exit(const struct subcommand *cmd)
{
	fputs(cmd ? "usage:\n" : usage_head, stdout);
	for (size_t i = 0; i < NSUBCOMMANDS; i++)
		if (!cmd || cmd == &subcommands[i])
			fputs(subcommands[i].usage, stdout);
	fputs(usage_common, stdout);
	if (!cmd || cmd->store)
		fputs(usage_store, stdout);
	fputs(usage_tail, stdout);
	exit(0);
}

void usage_exit(void)
{
	help_exit(find_subcommand(dedup_subcmd));
}

/* `dedup help [COMMAND]`. */
static _Noreturn void help_command(int argc, char **argv)
{
	const struct subcommand *cmd;

	if (argc < 3)
		help_exit(NULL);
	if (argc > 3)
		die_usage("help: unexpected argument '%.300s'", argv[3]);
	cmd = find_subcommand(argv[2]);
	if (!cmd)
		die_usage("help: unknown command '%.100s'", argv[2]);
	help_exit(cmd);
}

/* -q and --quiet are taken out of argv before a subcommand parses it: they
 * mean the same to every one.  Arguments after "--" are left alone. */
static int take_quiet(int argc, char **argv)
{
	int n = 0, rest = 0;

	for (int i = 0; i < argc; i++) {
		if (!rest && (strcmp(argv[i], "-q") == 0 ||
			      strcmp(argv[i], "--quiet") == 0)) {
			util_quiet = 1;
			continue;
		}
		if (strcmp(argv[i], "--") == 0)
			rest = 1;
		argv[n++] = argv[i];
	}
	argv[n] = NULL;
	return n;
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
		{"wait", optional_argument, NULL, OPT_WAIT},
		{"json", no_argument, NULL, OPT_JSON},
		{"no-unique", no_argument, NULL, OPT_NO_UNIQUE},
		{"salvage", no_argument, NULL, OPT_SALVAGE},
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
			o->wait = parse_wait(optarg);
		else if (c == OPT_JSON)
			o->json = 1;
		else if (c == OPT_NO_UNIQUE)
			o->no_unique = 1;
		else if (c == OPT_SALVAGE)
			o->salvage = 1;
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

	oo.wait_for_lock = wait != 0;
	oo.lock_timeout_ms = wait > 0 ? (unsigned)wait : 0;
	oo.readonly = readonly & 1;
	oo.defer_catalog_check = (readonly & OPEN_DEFER_CHECK) != 0;
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
	argc = take_quiet(argc, argv);
	if (argc < 2)
		die_usage("missing command");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		help_exit(NULL);
	if (strcmp(argv[1], "help") == 0)
		help_command(argc, argv);
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
