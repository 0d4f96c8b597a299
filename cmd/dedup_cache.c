/*
 * dedup_cache.c -- the block caches on the command line: `dedup cache
 * add|rm|ls|set`, the cache options of the subcommands that open a store
 * (--no-cache, --l1-size, --l2-write-max, --l2-feed-sequential, --stats)
 * and the cache figures in `dedup stat` and in --stats files.
 *
 * The per-command options live in one static struct: every command opens
 * at most one store, through open_store in dedup.c, which applies them.
 * --stats figures are written when the command closes its store, or from
 * an atexit handler when it dies first, so a failed run still reports
 * what it did.  Device problems are said once, at close, from the device
 * list (the library also puts them in the handle's message).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedup_cmd.h"

static struct {
	int no_cache;
	uint64_t l1_size;
	uint64_t l2_write_max;
	int feed_seq;
	const char *stats_path;
	/* the open store, for --stats */
	dd_store *store;
	const char *cmd;
	const char *path;
	double t0;
	int atexit_set;
} cli;

/* ---- options --------------------------------------------------------------*/

static uint64_t cache_parse_size(const char *cmd, const char *opt,
				 const char *arg, int allow_off)
{
	uint64_t v;

	if (allow_off && strcmp(arg, "off") == 0)
		return DD_CACHE_OFF;
	if (parse_size(arg, &v) != 0)
		die_usage("%s: %s: invalid size '%.100s'", cmd, opt, arg);
	return v;
}

int cache_cli_option(const char *cmd, int c, const char *arg)
{
	switch (c) {
	case OPT_NO_CACHE:
		cli.no_cache = 1;
		return 0;
	case OPT_L1_SIZE:
		/* 0 on the command line turns L1 off (0 in the API is
		 * "the store's setting"). */
		cli.l1_size = cache_parse_size(cmd, "--l1-size", arg, 1);
		if (cli.l1_size == 0)
			cli.l1_size = DD_CACHE_OFF;
		return 0;
	case OPT_L2_WRITE_MAX:
		cli.l2_write_max = cache_parse_size(cmd, "--l2-write-max", arg, 0);
		if (cli.l2_write_max == 0)
			die_usage("%s: --l2-write-max must be more than 0", cmd);
		return 0;
	case OPT_L2_FEED_SEQ:
		cli.feed_seq = 1;
		return 0;
	case OPT_STATS:
		if (!*arg)
			die_usage("%s: --stats needs a file or '-'", cmd);
		cli.stats_path = arg;
		return 0;
	}
	return -1;
}

void cache_cli_apply(dd_open_opts *oo)
{
	oo->no_cache = cli.no_cache;
	oo->l1_size = cli.l1_size;
	oo->l2_write_max = cli.l2_write_max;
	oo->l2_feed_sequential = cli.feed_seq;
}

/* ---- figures as JSON --------------------------------------------------------*/

static void json_dev(FILE *f, const dd_cache_dev *d)
{
	fputs("{\"path\": ", f);
	json_string(f, d->path);
	fprintf(f, ", \"size\": %" PRIu64 ", \"entries\": %" PRIu64
		", \"bytes\": %" PRIu64 ", \"state\": \"%s\", \"message\": ",
		d->size, d->entries, d->bytes, dd_cache_state_name(d->state));
	json_string(f, d->message);
	fputs("}", f);
}

/* The figures as JSON members ("key": value,), then "devices". */
static void json_figures(FILE *f, const char *ind, const dd_cache_stats *st,
			 const dd_cache_dev *devs, size_t n)
{
	const struct {
		const char *key;
		uint64_t v;
	} rows[] = {
		{"l1_size", st->l1_size}, {"l1_bytes", st->l1_bytes},
		{"l1_blocks", st->l1_blocks}, {"l1_hits", st->l1_hits},
		{"l1_misses", st->l1_misses}, {"l2_devices", st->l2_devices},
		{"l2_size", st->l2_size}, {"l2_entries", st->l2_entries},
		{"l2_bytes", st->l2_bytes}, {"l2_hits", st->l2_hits},
		{"l2_misses", st->l2_misses},
		{"l2_read_bytes", st->l2_read_bytes},
		{"l2_write_bytes", st->l2_write_bytes},
		{"l2_cksum_errors", st->l2_cksum_errors},
		{"l2_dev_errors", st->l2_dev_errors},
		{"l2_log_errors", st->l2_log_errors},
		{"l2_feed_drops", st->l2_feed_drops},
		{"l2_rebuilds", st->l2_rebuilds},
		{"l2_rebuild_entries", st->l2_rebuild_entries},
		{"l2_rebuild_ms", st->l2_rebuild_ms},
		{"l2_write_max", st->l2_write_max},
		{"pack_read_ops", st->pack_read_ops},
		{"pack_read_bytes", st->pack_read_bytes},
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		fprintf(f, "%s\"%s\": %" PRIu64 ",\n", ind, rows[i].key,
			rows[i].v);
	fprintf(f, "%s\"l2_feed_sequential\": %s,\n", ind,
		st->l2_feed_sequential ? "true" : "false");
	fprintf(f, "%s\"devices\": [", ind);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%s\n%s  ", i ? "," : "", ind);
		json_dev(f, &devs[i]);
	}
	fprintf(f, "%s%s]", n ? "\n" : "", n ? ind : "");
}

static int get_figures(dd_store *s, dd_cache_stats *st, dd_cache_dev **devs,
		       size_t *n, int list)
{
	memset(st, 0, sizeof(*st));
	st->version = DD_CACHE_STATS_VERSION;
	*devs = NULL;
	*n = 0;
	/* The list first: it opens the devices and waits for rebuilds. */
	if (list && dd_cache_list(s, devs, n) != 0)
		return -1;
	return dd_cache_stats_get(s, st);
}

/* ---- --stats and close ---------------------------------------------------------*/

static void write_stats(dd_store *s)
{
	dd_cache_dev *devs;
	dd_cache_stats st;
	size_t n;
	FILE *f;
	int is_stderr = strcmp(cli.stats_path, "-") == 0;

	dd_cache_flush(s);      /* so the figures include the feed's writes */
	if (get_figures(s, &st, &devs, &n, 1) != 0) {
		warnmsg("--stats: %s", dd_store_errmsg(s));
		return;
	}
	f = is_stderr ? stderr : fopen(cli.stats_path, "w");
	if (!f) {
		warnmsg("--stats: %s: cannot write", cli.stats_path);
		dd_cache_list_free(devs);
		return;
	}
	fprintf(f, "{\n  \"command\": \"%s\",\n  \"store\": ", cli.cmd);
	json_string(f, cli.path);
	fprintf(f, ",\n  \"seconds\": %.6f,\n", now_seconds() - cli.t0);
	json_figures(f, "  ", &st, devs, n);
	fputs("\n}\n", f);
	if (is_stderr)
		fflush(f);
	else if (fclose(f) != 0)
		warnmsg("--stats: %s: write failed", cli.stats_path);
	dd_cache_list_free(devs);
}

static void stats_at_exit(void)
{
	if (cli.store && cli.stats_path)
		write_stats(cli.store);
}

void cache_cli_opened(dd_store *s, const char *cmd, const char *path)
{
	cli.store = s;
	cli.cmd = cmd;
	cli.path = path;
	cli.t0 = now_seconds();
	if (cli.stats_path && !cli.atexit_set) {
		atexit(stats_at_exit);
		cli.atexit_set = 1;
	}
}

/* Says once which configured devices the run had to do without. */
static void warn_devices(dd_store *s)
{
	dd_cache_dev *devs;
	size_t n;

	if (dd_cache_list(s, &devs, &n) != 0)
		return;
	for (size_t i = 0; i < n; i++) {
		int st = devs[i].state;

		if (st == DD_CACHE_ONLINE || st == DD_CACHE_REBUILDING ||
		    st == DD_CACHE_OFFLINE)
			continue;
		warnmsg("cache device %s is %s%s%s%s; read from the packs",
			devs[i].path, dd_cache_state_name(st),
			devs[i].message[0] ? " (" : "", devs[i].message,
			devs[i].message[0] ? ")" : "");
	}
	dd_cache_list_free(devs);
}

void cache_cli_close(dd_store *s)
{
	dd_cache_stats st = {.version = DD_CACHE_STATS_VERSION};

	/* Only a run that read through the cache has its devices open. */
	if (dd_cache_stats_get(s, &st) == 0 && st.l1_misses && st.l2_devices)
		warn_devices(s);
	if (cli.stats_path)
		write_stats(s);
	cli.store = NULL;
	dd_store_close(s);
}

/* ---- dedup stat ------------------------------------------------------------------*/

void cache_stat_json(dd_store *s, FILE *f)
{
	dd_cache_dev *devs;
	dd_cache_stats st;
	size_t n;

	if (get_figures(s, &st, &devs, &n, 1) != 0)
		die("%s", dd_store_errmsg(s));
	fputs("  \"cache\": {\n", f);
	json_figures(f, "    ", &st, devs, n);
	fputs("\n  },\n", f);
	dd_cache_list_free(devs);
}

void cache_stat_text(dd_store *s)
{
	char a[32], b[32];
	dd_cache_dev *devs;
	dd_cache_stats st;
	size_t n;

	if (get_figures(s, &st, &devs, &n, 1) != 0)
		die("%s", dd_store_errmsg(s));
	printf("cache: L1 %s; L2 %zu device%s, write max %s/s, sequential "
	       "reads %sfed\n", st.l1_size ? human_size(a, sizeof(a),
							  st.l1_size) : "off",
	       n, n == 1 ? "" : "s", human_size(b, sizeof(b), st.l2_write_max),
	       st.l2_feed_sequential ? "" : "not ");
	for (size_t i = 0; i < n; i++) {
		printf("  %s: %s, %s, %" PRIu64 " blocks (%s)", devs[i].path,
		       dd_cache_state_name(devs[i].state),
		       human_size(a, sizeof(a), devs[i].size), devs[i].entries,
		       human_size(b, sizeof(b), devs[i].bytes));
		printf(devs[i].message[0] ? " -- %s\n" : "%s\n",
		       devs[i].message);
	}
	if (n)
		printf("  index rebuilt in %" PRIu64 " ms: %" PRIu64
		       " entries; %" PRIu64 " damaged log blocks\n",
		       st.l2_rebuild_ms, st.l2_rebuild_entries, st.l2_log_errors);
	dd_cache_list_free(devs);
}

/* ---- dedup cache ------------------------------------------------------------------*/

static const char cache_usage[] =
	"usage: dedup cache add [--size N] [--force] STORE PATH\n"
	"       dedup cache rm STORE PATH\n"
	"       dedup cache ls [--json] STORE\n"
	"       dedup cache set [--l1-size N|off] [--l2-write-max N]\n"
	"                       [--l2-feed-sequential on|off] STORE\n";

enum { C_SIZE = 1024, C_FORCE, C_JSON, C_L1, C_L2W, C_SEQ, C_HELP = 'h' };

struct cache_args {
	uint64_t size;
	int force, json, have_l1, have_l2w, seq;
	uint64_t l1, l2w;
};

static void cache_parse(int argc, char **argv, const char *sub,
			const char *allowed, struct cache_args *a)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, C_HELP},
		{"size", required_argument, NULL, C_SIZE},
		{"force", no_argument, NULL, C_FORCE},
		{"json", no_argument, NULL, C_JSON},
		{"l1-size", required_argument, NULL, C_L1},
		{"l2-write-max", required_argument, NULL, C_L2W},
		{"l2-feed-sequential", required_argument, NULL, C_SEQ},
		{NULL, 0, NULL, 0},
	};
	int c, idx;

	memset(a, 0, sizeof(*a));
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, &idx)) != -1) {
		if (c == C_HELP) {
			fputs(cache_usage, stdout);
			exit(0);
		}
		if (c == '?')
			die_usage("cache %s: unknown option '%s'", sub,
				  argv[optind - 1]);
		if (c == ':')
			die_usage("cache %s: option '%s' needs an argument",
				  sub, argv[optind - 1]);
		/* `allowed` names the options of this subcommand by
		 * letter: 'a' for C_SIZE, 'b' for C_FORCE, and so on. */
		if (!strchr(allowed, c - C_SIZE + 'a'))
			die_usage("cache %s: option '--%s' not valid here", sub,
				  longopts[idx].name);
		switch (c) {
		case C_SIZE:
			a->size = cache_parse_size("cache add", "--size", optarg, 0);
			break;
		case C_FORCE:
			a->force = 1;
			break;
		case C_JSON:
			a->json = 1;
			break;
		case C_L1:
			a->l1 = cache_parse_size("cache set", "--l1-size", optarg, 1);
			a->have_l1 = 1;
			break;
		case C_L2W:
			a->l2w = cache_parse_size("cache set", "--l2-write-max",
						  optarg, 0);
			a->have_l2w = 1;
			break;
		case C_SEQ:
			if (strcmp(optarg, "on") && strcmp(optarg, "off"))
				die_usage("cache set: --l2-feed-sequential takes "
					  "on or off");
			a->seq = strcmp(optarg, "on") ? -1 : 1;
			break;
		}
	}
}

static void cache_want(int argc, const char *sub, int n)
{
	if (argc - optind < n)
		die_usage("cache %s: missing argument", sub);
	if (argc - optind > n)
		die_usage("cache %s: unexpected argument", sub);
}

static dd_store *cache_open(const char *path, int readonly)
{
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_store *s = NULL;
	int rc;

	oo.readonly = readonly;
	rc = dd_store_open(&s, path, &oo);
	if (rc)
		die("%s", lib_msg(dd_store_errmsg(NULL), rc));
	return s;
}

/* An absolute form of a device path (the store keeps absolute ones). */
static char *abs_path(const char *p)
{
	char cwd[4096], *out;
	size_t len;

	if (p[0] == '/')
		return strdup(p);
	if (!getcwd(cwd, sizeof(cwd)))
		die("cannot get the current directory");
	len = strlen(cwd) + strlen(p) + 2;
	out = malloc(len);
	if (!out)
		die("out of memory");
	snprintf(out, len, "%s/%s", cwd, p);
	return out;
}

static int cache_add_rm(int argc, char **argv, int add)
{
	struct cache_args a;
	dd_store *s;
	char *dev;
	int rc;

	cache_parse(argc, argv, add ? "add" : "rm", add ? "ab" : "", &a);
	cache_want(argc, add ? "add" : "rm", 2);
	s = cache_open(argv[optind], 0);
	dev = abs_path(argv[optind + 1]);
	rc = add ? dd_cache_add(s, dev, a.size, a.force ? DD_CACHE_ADD_FORCE : 0)
		 : dd_cache_remove(s, dev);
	free(dev);
	if (rc) {
		char msg[1024];

		snprintf(msg, sizeof(msg), "%s", lib_msg(dd_store_errmsg(s), rc));
		dd_store_close(s);
		die("%s", msg);
	}
	dd_store_close(s);
	return 0;
}

static void cache_ls_text(const dd_cache_config *cc, const dd_cache_dev *d,
			  size_t n)
{
	char a[32], b[32];

	if (cc->l1_size == DD_CACHE_OFF)
		printf("l1_size off\n");
	else
		printf("l1_size %s%s\n", human_size(a, sizeof(a), cc->l1_size ?
			cc->l1_size : DD_CACHE_L1_DEFAULT),
		       cc->l1_size ? "" : " (default)");
	printf("l2_write_max %s/s%s\n", human_size(a, sizeof(a),
	       cc->l2_write_max ? cc->l2_write_max
				: DD_CACHE_L2_WRITE_MAX_DEFAULT),
	       cc->l2_write_max ? "" : " (default)");
	printf("l2_feed_sequential %s\n", cc->l2_feed_sequential > 0 ? "on"
									: "off");
	for (size_t i = 0; i < n; i++) {
		printf("device %s: %s, %s, %" PRIu64 " blocks (%s)",
		       d[i].path, dd_cache_state_name(d[i].state),
		       human_size(a, sizeof(a), d[i].size), d[i].entries,
		       human_size(b, sizeof(b), d[i].bytes));
		printf(d[i].message[0] ? " -- %s\n" : "%s\n", d[i].message);
	}
}

static void cache_ls_json(const dd_cache_config *cc, const dd_cache_dev *d,
			  size_t n)
{
	printf("{\n  \"l1_size\": %" PRIu64 ",\n  \"l2_write_max\": %" PRIu64
	       ",\n  \"l2_feed_sequential\": %s,\n  \"devices\": [",
	       cc->l1_size == DD_CACHE_OFF ? 0 : cc->l1_size ? cc->l1_size
							     : DD_CACHE_L1_DEFAULT,
	       cc->l2_write_max ? cc->l2_write_max
				: DD_CACHE_L2_WRITE_MAX_DEFAULT,
	       cc->l2_feed_sequential > 0 ? "true" : "false");
	for (size_t i = 0; i < n; i++) {
		fputs(i ? ",\n    " : "\n    ", stdout);
		json_dev(stdout, &d[i]);
	}
	printf("%s]\n}\n", n ? "\n  " : "");
}

static int cache_ls(int argc, char **argv)
{
	dd_cache_config cc = DD_CACHE_CONFIG_INIT;
	struct cache_args a;
	dd_cache_dev *devs;
	dd_store *s;
	size_t n;
	int rc;

	cache_parse(argc, argv, "ls", "c", &a);
	cache_want(argc, "ls", 1);
	s = cache_open(argv[optind], 1);
	rc = dd_cache_config_get(s, &cc);
	if (!rc)
		rc = dd_cache_list(s, &devs, &n);
	if (rc)
		die("%s", lib_msg(dd_store_errmsg(s), rc));
	if (a.json)
		cache_ls_json(&cc, devs, n);
	else
		cache_ls_text(&cc, devs, n);
	dd_cache_list_free(devs);
	dd_store_close(s);
	return 0;
}

static int cache_set(int argc, char **argv)
{
	dd_cache_config cc = DD_CACHE_CONFIG_INIT;
	struct cache_args a;
	dd_store *s;
	int rc;

	cache_parse(argc, argv, "set", "def", &a);
	cache_want(argc, "set", 1);
	if (a.have_l2w && a.l2w == 0)
		die_usage("cache set: --l2-write-max must be more than 0");
	s = cache_open(argv[optind], 0);
	rc = dd_cache_config_get(s, &cc);
	if (!rc) {
		if (a.have_l1)
			cc.l1_size = a.l1 ? a.l1 : DD_CACHE_OFF;
		if (a.have_l2w)
			cc.l2_write_max = a.l2w;
		if (a.seq)
			cc.l2_feed_sequential = a.seq;
		rc = dd_cache_config_set(s, &cc);
	}
	if (rc)
		die("%s", lib_msg(dd_store_errmsg(s), rc));
	dd_store_close(s);
	return 0;
}

int cmd_cache(int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : "";

	if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
		fputs(cache_usage, stdout);
		return 0;
	}
	if (!strcmp(sub, "add"))
		return cache_add_rm(argc - 1, argv + 1, 1);
	if (!strcmp(sub, "rm"))
		return cache_add_rm(argc - 1, argv + 1, 0);
	if (!strcmp(sub, "ls"))
		return cache_ls(argc - 1, argv + 1);
	if (!strcmp(sub, "set"))
		return cache_set(argc - 1, argv + 1);
	if (!*sub)
		die_usage("cache: missing subcommand (add, rm, ls, set)");
	die_usage("cache: unknown subcommand '%.100s'", sub);
}
