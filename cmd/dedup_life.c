/*
 * dedup_life.c -- the subcommands of a snapshot's life after put: diff
 * (the byte ranges two snapshots differ in) and prune (retention rules).
 * Space per snapshot is `dedup ls` (dedup_store.c).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup_cmd.h"

enum {
	OPT_KEEP_LAST = 1280,
	OPT_KEEP_HOURLY,
	OPT_KEEP_DAILY,
	OPT_KEEP_WEEKLY,
	OPT_KEEP_MONTHLY,
	OPT_KEEP_YEARLY,
	OPT_PREFIX,
	OPT_UTC,
	OPT_DRY_RUN,
	OPT_GC,
};

/* ---- diff ---------------------------------------------------------------*/

/* B of `diff STORE@A B`: a name, or STORE@NAME of the same STORE. */
static char *diff_second(const char *arg, const char *store)
{
	char *s2, *name;

	if (!strchr(arg, '@')) {
		if (dd_name_check(arg) != 0)
			die_usage("diff: invalid snapshot name '%.300s'", arg);
		name = strdup(arg);
		if (!name)
			die("out of memory");
		return name;
	}
	split_snapref_or_die(arg, &s2, &name);
	if (strcmp(s2, store) != 0)
		die_usage("diff: both snapshots must be in one store ('%.300s' "
			  "and '%.300s')", store, s2);
	free(s2);
	return name;
}

int cmd_diff(int argc, char **argv)
{
	static const int allow[] = {OPT_VERBOSE, OPT_JSON, CACHE_ALLOW, 0};
	dd_diff_range r = {.version = DD_DIFF_RANGE_VERSION};
	dd_snapshot_info a, b;
	struct common_opts o;
	char *path, *from, *to;
	uint64_t nranges = 0, changed = 0;
	dd_diff *d = NULL;
	dd_store *s;
	int rc;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 2, 2);
	split_snapref_or_die(argv[optind], &path, &from);
	to = diff_second(argv[optind + 1], path);
	s = open_store(path, 0, 1);
	rc = dd_diff_open(&d, s, from, to);
	if (rc == 0)
		rc = dd_snapshot_stat(s, from, &a);
	if (rc == 0)
		rc = dd_snapshot_stat(s, to, &b);
	if (rc != 0)
		die_store(s, rc);
	if (o.json) {
		fputs("{\"from\": ", stdout);
		json_string(stdout, from);
		fputs(", \"to\": ", stdout);
		json_string(stdout, to);
		printf(", \"from_size\": %" PRIu64 ", \"to_size\": %" PRIu64
		       ", \"ranges\": [", a.size, b.size);
	}
	/* ranges as they come: a diff of large images may have millions */
	while ((rc = dd_diff_next(d, &r)) == 0 && r.length) {
		if (o.json)
			printf("%s\n  {\"offset\": %" PRIu64 ", \"length\": %"
			       PRIu64 "}", nranges ? "," : "", r.offset,
			       r.length);
		else
			printf("%" PRIu64 " %" PRIu64 "\n", r.offset, r.length);
		nranges++;
		changed += r.length;
	}
	if (rc != 0) {
		fflush(stdout);
		die("%s", lib_msg(dd_diff_errmsg(d), rc));
	}
	if (o.json)
		printf("%s], \"range_count\": %" PRIu64 ", \"changed_bytes\": %"
		       PRIu64 "}\n", nranges ? "\n" : "", nranges, changed);
	if (o.verbose) {
		char hs[32];

		fprintf(stderr, "%s: diff %s %s: %" PRIu64 " ranges, %" PRIu64
			" bytes (%s) differ\n", util_prog, from, to, nranges,
			changed, human_size(hs, sizeof(hs), changed));
	}
	dd_diff_close(d);
	cache_cli_close(s);
	free(path);
	free(from);
	free(to);
	return 0;
}

/* ---- prune --------------------------------------------------------------*/

static const char *const rule_names[] = {
	"", "last", "hourly", "daily", "weekly", "monthly", "yearly",
};

/* A keep count: N >= 0, or -1 / "all" for every period.  opt: the
 * option's name without its dashes. */
static int parse_keep(const char *opt, const char *arg)
{
	char *end;
	long v;

	if (strcmp(arg, "all") == 0)
		return DD_PRUNE_ALL;
	v = strtol(arg, &end, 10);
	if (end == arg || *end || v < -1 || v > 1000000)
		die_usage("prune: --%s takes a count, -1 or 'all', not "
			  "'%.100s'", opt, arg);
	return (int)v;
}

static void prune_text(const dd_prune_entry *list, size_t n, int dry_run)
{
	for (size_t i = 0; i < n; i++) {
		const dd_prune_entry *e = &list[i];
		char why[64], when[40];

		if (e->mark.rule == DD_PRUNE_NONE)
			snprintf(why, sizeof(why), "%s",
				 dry_run ? "would prune" : "pruned");
		else
			snprintf(why, sizeof(why), "keep (%s%s #%u)",
				 rule_names[e->mark.rule],
				 e->mark.oldest ? "[oldest]" : "",
				 e->mark.rank);
		printf("%-26s %-20s  ", why,
		       iso8601_utc(when, sizeof(when), e->ctime));
		fputs(e->name, stdout);
		fputc('\n', stdout);
	}
}

static void prune_json(const dd_prune_entry *list, size_t n, int dry_run,
		       size_t kept, const dd_gc_result *gc)
{
	char when[40];

	printf("{\"dry_run\": %s, \"kept\": %zu, \"pruned\": %zu, "
	       "\"snapshots\": [", dry_run ? "true" : "false", kept, n - kept);
	for (size_t i = 0; i < n; i++) {
		const dd_prune_entry *e = &list[i];

		fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", stdout);
		json_string(stdout, e->name);
		printf(", \"ctime\": \"%s\", \"ctime_epoch\": %" PRId64
		       ", \"keep\": %s", iso8601_utc(when, sizeof(when),
						     e->ctime),
		       e->ctime, e->mark.rule ? "true" : "false");
		if (e->mark.rule)
			printf(", \"rule\": \"%s\", \"rank\": %u, \"oldest\": "
			       "%s", rule_names[e->mark.rule], e->mark.rank,
			       e->mark.oldest ? "true" : "false");
		fputc('}', stdout);
	}
	fputs(n ? "\n]" : "]", stdout);
	if (gc)
		printf(", \"gc\": {\"bytes_reclaimed\": %" PRIu64
		       ", \"ddt_entries_removed\": %" PRIu64
		       ", \"packs_deleted\": %" PRIu64
		       ", \"packs_rewritten\": %" PRIu64 "}",
		       gc->bytes_reclaimed, gc->ddt_entries_removed,
		       gc->packs_deleted, gc->packs_rewritten);
	fputs("}\n", stdout);
}

/* --keep-RULE N: where N goes. */
static int *keep_field(dd_prune_opts *po, int c)
{
	switch (c) {
	case OPT_KEEP_LAST:
		return &po->keep_last;
	case OPT_KEEP_HOURLY:
		return &po->keep_hourly;
	case OPT_KEEP_DAILY:
		return &po->keep_daily;
	case OPT_KEEP_WEEKLY:
		return &po->keep_weekly;
	case OPT_KEEP_MONTHLY:
		return &po->keep_monthly;
	case OPT_KEEP_YEARLY:
		return &po->keep_yearly;
	}
	return NULL;
}

int cmd_prune(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"wait", optional_argument, NULL, OPT_WAIT},
		{"json", no_argument, NULL, OPT_JSON},
		{"keep-last", required_argument, NULL, OPT_KEEP_LAST},
		{"keep-hourly", required_argument, NULL, OPT_KEEP_HOURLY},
		{"keep-daily", required_argument, NULL, OPT_KEEP_DAILY},
		{"keep-weekly", required_argument, NULL, OPT_KEEP_WEEKLY},
		{"keep-monthly", required_argument, NULL, OPT_KEEP_MONTHLY},
		{"keep-yearly", required_argument, NULL, OPT_KEEP_YEARLY},
		{"prefix", required_argument, NULL, OPT_PREFIX},
		{"utc", no_argument, NULL, OPT_UTC},
		{"dry-run", no_argument, NULL, OPT_DRY_RUN},
		{"gc", no_argument, NULL, OPT_GC},
		CACHE_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	dd_prune_opts po = DD_PRUNE_OPTS_INIT;
	dd_prune_entry *list = NULL;
	dd_gc_result gr;
	int c, rc, wait = 0, json = 0, gc = 0, *keep;
	size_t n = 0, kept = 0;
	dd_store *s;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hn", longopts, NULL)) != -1) {
		if ((keep = keep_field(&po, c)) != NULL) {
			const struct option *lo = longopts;

			while (lo->val != c)
				lo++;
			*keep = parse_keep(lo->name, optarg);
			continue;
		}
		switch (c) {
		case OPT_HELP:
			usage_exit();
		case OPT_WAIT:
			wait = parse_wait(optarg);
			break;
		case OPT_JSON:
			json = 1;
			break;
		case OPT_PREFIX:
			po.prefix = optarg;
			break;
		case OPT_UTC:
			po.utc = 1;
			break;
		case 'n':
		case OPT_DRY_RUN:
			po.dry_run = 1;
			break;
		case OPT_GC:
			gc = 1;
			break;
		default:
			other_option(c, argv);
		}
	}
	want_args(argc, argv, 1, 1);
	if (!po.keep_last && !po.keep_hourly && !po.keep_daily &&
	    !po.keep_weekly && !po.keep_monthly && !po.keep_yearly)
		die_usage("prune: no --keep-* rule given (it would delete "
			  "every snapshot)");
	if (gc && po.dry_run)
		die_usage("prune: --gc and --dry-run do not go together");
	s = open_store(argv[optind], wait, po.dry_run);
	rc = dd_prune(s, &po, &list, &n);
	if (rc != 0)
		die_store(s, rc);
	for (size_t i = 0; i < n; i++)
		kept += list[i].mark.rule != DD_PRUNE_NONE;
	memset(&gr, 0, sizeof(gr));
	if (gc && n > kept && (rc = dd_store_gc(s, NULL, &gr)) != 0)
		die_store(s, rc);
	if (json) {
		prune_json(list, n, po.dry_run, kept, gc ? &gr : NULL);
	} else {
		prune_text(list, n, po.dry_run);
		fprintf(stderr, "%s: prune: %zu kept, %zu %s\n", util_prog,
			kept, n - kept, po.dry_run ? "would be pruned"
						   : "pruned");
		if (gc)
			print_gc_result(stderr, &gr);
	}
	dd_prune_free(list);
	cache_cli_close(s);
	return 0;
}
