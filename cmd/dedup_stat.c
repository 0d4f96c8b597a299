/*
 * dedup_stat.c -- the subcommands that look after a whole store: stat, gc
 * and scrub; and the refcount histogram, which scan prints too.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dedup_cmd.h"

/* ---- the refcount histogram (stat and scan) -------------------------------*/

#define HIST_BAR_WIDTH 30

/* Adds a histogram row into the table's "Total" row. */
static void hist_add(dd_hist_row *tot, const dd_hist_row *h)
{
	tot->blocks += h->blocks;
	tot->lsize += h->lsize;
	tot->psize += h->psize;
	tot->ref_blocks += h->ref_blocks;
	tot->ref_lsize += h->ref_lsize;
	tot->ref_psize += h->ref_psize;
}

/* A row's share of the largest row's referenced bytes, in '#'s; at least
 * one for a row that has any. */
static void hist_bar(char *buf, uint64_t v, uint64_t max)
{
	size_t n = max ? (size_t)((double)v / (double)max * HIST_BAR_WIDTH +
				  0.5) : 0;

	if (v && n == 0)
		n = 1;
	memset(buf, '#', n);
	buf[n] = '\0';
}

static void hist_row(const char *label, const dd_hist_row *h, const char *bar)
{
	char c[6][16];

	printf("%6s   %6s   %5s   %5s   %6s   %5s   %5s%s%s\n", label,
	       nicenum(c[0], 16, h->blocks), nicenum(c[1], 16, h->lsize),
	       nicenum(c[2], 16, h->psize), nicenum(c[3], 16, h->ref_blocks),
	       nicenum(c[4], 16, h->ref_lsize), nicenum(c[5], 16, h->ref_psize),
	       *bar ? "   " : "", bar);
}

/* The table as `zdb -DD` (stat) and `zdb -S` (scan) print it: a row per
 * non-empty bucket, then "Total"; with bars, each row also gets its share
 * of referenced bytes (scan). */
void print_hist_table(const dd_hist_row *hist, int bars)
{
	char label[16], bar[HIST_BAR_WIDTH + 1] = "";
	uint64_t max = 0;
	dd_hist_row tot;
	int i;

	memset(&tot, 0, sizeof(tot));
	for (i = 0; bars && i < DD_HIST_BUCKETS; i++)
		if (hist[i].ref_lsize > max)
			max = hist[i].ref_lsize;
	printf("bucket              allocated                 referenced\n");
	printf("______   _______________________   _______________________\n");
	printf("refcnt   blocks   LSIZE   PSIZE   blocks   LSIZE   PSIZE\n");
	printf("------   ------   -----   -----   ------   -----   -----\n");
	for (i = 0; i < DD_HIST_BUCKETS; i++) {
		const dd_hist_row *h = &hist[i];

		if (!h->blocks && !h->ref_blocks)
			continue;
		if (bars)
			hist_bar(bar, h->ref_lsize, max);
		hist_row(nicenum(label, sizeof(label), 1ull << i), h, bar);
		hist_add(&tot, h);
	}
	hist_row("Total", &tot, "");
}

/* The refcount histogram as a JSON member "histogram": [...] (rows with
 * blocks only), indented by `ind`; shared by stat and scan. */
void print_hist_json(const dd_hist_row *hist, const char *ind)
{
	int first = 1;

	printf("%s\"histogram\": [", ind);
	for (int i = 0; i < DD_HIST_BUCKETS; i++) {
		const dd_hist_row *h = &hist[i];
		uint64_t lo = 1ull << i;

		if (!h->blocks && !h->ref_blocks)
			continue;
		printf("%s\n%s  {\"refcnt_min\": %" PRIu64
		       ", \"refcnt_max\": %" PRIu64 ", \"blocks\": %" PRIu64
		       ", \"lsize\": %" PRIu64 ", \"psize\": %" PRIu64
		       ", \"ref_blocks\": %" PRIu64 ", \"ref_lsize\": %" PRIu64
		       ", \"ref_psize\": %" PRIu64 "}",
		       first ? "" : ",", ind, lo, 2 * lo - 1, h->blocks,
		       h->lsize, h->psize, h->ref_blocks, h->ref_lsize,
		       h->ref_psize);
		first = 0;
	}
	if (!first)
		printf("\n%s", ind);
	printf("]");
}

/* ---- stat ---------------------------------------------------------------*/

static void json_u64(const char *key, uint64_t v)
{
	printf("  \"%s\": %" PRIu64 ",\n", key, v);
}

static void stat_json(dd_store *s, const dd_stat *st,
		      const dd_store_info *info)
{
	char comp[32];
	int chunker = DD_CHUNKER_FIXED;

	(void)dd_store_chunker_get(s, &chunker);
	printf("{\n");
	printf("  \"chunker\": \"%s\",\n", chunker_name(chunker));
	json_u64("block_size", info->block_size);
	printf("  \"verify\": %s,\n", info->verify ? "true" : "false");
	printf("  \"compress\": \"%s\",\n",
	       compress_spec_name(comp, sizeof(comp), info->compress,
				  info->compress_level));
	json_u64("format_version", info->format_version);
	json_u64("snapshots", st->snapshots);
	json_u64("logical_bytes", st->logical_bytes);
	json_u64("zero_blocks", st->zero_blocks);
	json_u64("referenced_blocks", st->referenced_blocks);
	json_u64("referenced_bytes", st->referenced_bytes);
	json_u64("unique_blocks", st->unique_blocks);
	json_u64("unique_bytes", st->unique_bytes);
	json_u64("stored_bytes", st->stored_bytes);
	json_u64("unreferenced_blocks", st->unreferenced_blocks);
	json_u64("pack_files", st->pack_files);
	json_u64("pack_bytes", st->pack_bytes);
	json_u64("ddt_entries", st->ddt_entries);
	json_u64("ddt_bytes", st->ddt_bytes);
	json_u64("meta_bytes", st->meta_bytes);
	json_u64("lmdb_file_bytes", st->lmdb_file_bytes);
	json_u64("ddt_runs", st->ddt_runs);
	json_u64("filter_segments", st->filter_segments);
	json_u64("filter_bytes", st->filter_bytes);
	printf("  ");
	json_double(stdout, "filter_bits_per_entry", st->filter_bits_per_entry,
		    ",\n  ");
	json_double(stdout, "dedup_ratio", st->dedup_ratio, ",\n  ");
	json_double(stdout, "compress_ratio", st->compress_ratio, ",\n");
	cache_stat_json(s, stdout);  /* "cache": {...}, dedup_cache.c */
	print_hist_json(st->hist, "  ");
	printf("\n}\n");
}

static void stat_text(dd_store *s, const char *path, const dd_stat *st,
		      const dd_store_info *info)
{
	char a[32], b[32], comp[32];
	double perentry = st->ddt_entries ?
		(double)st->ddt_bytes / (double)st->ddt_entries : 0;
	int chunker = DD_CHUNKER_FIXED;

	(void)dd_store_chunker_get(s, &chunker);
	printf("store %s: format %" PRIu32 ", %s %s, compress %s, "
	       "verify %s\n", path, info->format_version,
	       chunker == DD_CHUNKER_FIXED ? "block size"
					   : "fastcdc, average block",
	       human_size(a, sizeof(a), info->block_size),
	       compress_spec_name(comp, sizeof(comp), info->compress,
				  info->compress_level),
	       info->verify ? "on" : "off");
	printf("snapshots: %" PRIu64 ", logical %s (%" PRIu64 " bytes), "
	       "zero blocks %" PRIu64 "\n", st->snapshots,
	       human_size(a, sizeof(a), st->logical_bytes), st->logical_bytes,
	       st->zero_blocks);
	printf("referenced: %" PRIu64 " blocks, %s; unique: %" PRIu64
	       " blocks, %s, stored %s\n", st->referenced_blocks,
	       human_size(a, sizeof(a), st->referenced_bytes),
	       st->unique_blocks, human_size(b, sizeof(b), st->unique_bytes),
	       human_size(comp, sizeof(comp), st->stored_bytes));
	printf("DDT: %" PRIu64 " entries, %s on disk (%.0f bytes/entry), "
	       "%" PRIu64 " awaiting gc, %" PRIu64 " sorted run%s to fold\n",
	       st->ddt_entries, human_size(a, sizeof(a), st->ddt_bytes),
	       perentry, st->unreferenced_blocks, st->ddt_runs,
	       st->ddt_runs == 1 ? "" : "s");
	if (st->filter_segments)
		printf("key filter: %" PRIu64 " segment%s, %s, %.1f bits/entry"
		       "\n", st->filter_segments,
		       st->filter_segments == 1 ? "" : "s",
		       human_size(a, sizeof(a), st->filter_bytes),
		       st->filter_bits_per_entry);
	else
		printf("key filter: none in force (the next writer builds "
		       "it)\n");
	printf("packs: %" PRIu64 " files, %s; metadata %s, LMDB file %s\n",
	       st->pack_files, human_size(a, sizeof(a), st->pack_bytes),
	       human_size(b, sizeof(b), st->meta_bytes),
	       human_size(comp, sizeof(comp), st->lmdb_file_bytes));
	printf("\n");
	print_hist_table(st->hist, 0);
	printf("\ndedup = %.2f, compress = %.2f, dedup * compress = %.2f\n",
	       st->dedup_ratio, st->compress_ratio,
	       st->dedup_ratio * st->compress_ratio);
}

int cmd_stat(int argc, char **argv)
{
	static const int allow[] = {OPT_JSON, CACHE_ALLOW, 0};
	struct common_opts o;
	dd_store_info info;
	dd_stat st;
	dd_store *s;
	int rc;

	s = open_store_arg(argc, argv, allow, &o, 1);
	memset(&st, 0, sizeof(st));
	st.version = DD_STAT_VERSION;
	rc = dd_store_info_get(s, &info);
	if (rc == 0)
		rc = dd_store_stat(s, &st);
	if (rc != 0)
		die_store(s, rc);
	if (o.json) {
		stat_json(s, &st, &info);
	} else {
		stat_text(s, argv[optind], &st, &info);
		cache_stat_text(s);
	}
	cache_cli_close(s);
	return 0;
}

/* ---- gc -----------------------------------------------------------------*/

int cmd_gc(int argc, char **argv)
{
	static const int allow[] = {OPT_VERBOSE, OPT_WAIT, OPT_JSON,
				    CACHE_ALLOW, 0};
	dd_gc_opts go = DD_GC_OPTS_INIT;
	dd_gc_result res;
	struct common_opts o;
	struct progress pg;
	dd_store *s;
	int rc;

	s = open_store_arg(argc, argv, allow, &o, 0);
	memset(&res, 0, sizeof(res));
	progress_init(&pg, "gc", 0, o.verbose);
	go.progress = progress_lib_cb;
	go.progress_ctx = &pg;
	rc = dd_store_gc(s, &go, &res);
	progress_finish(&pg);
	if (rc != 0)
		die_store(s, rc);
	if (o.json)
		printf("{\"bytes_freed\": %" PRIu64 ", \"ddt_entries_removed\": "
		       "%" PRIu64 ", \"packs_deleted\": %" PRIu64
		       ", \"packs_rewritten\": %" PRIu64 ", \"blocks_moved\": "
		       "%" PRIu64 "}\n", res.bytes_reclaimed,
		       res.ddt_entries_removed, res.packs_deleted,
		       res.packs_rewritten, res.blocks_moved);
	else if (!util_quiet)
		print_gc_result(stdout, &res);
	cache_cli_close(s);
	return 0;
}

void print_gc_result(FILE *f, const dd_gc_result *res)
{
	char hs[32];

	fprintf(f, "gc: reclaimed %s (%" PRIu64 " bytes); %" PRIu64
		" DDT entries removed, %" PRIu64 " packs deleted, %" PRIu64
		" packs rewritten, %" PRIu64 " blocks moved\n",
		human_size(hs, sizeof(hs), res->bytes_reclaimed),
		res->bytes_reclaimed, res->ddt_entries_removed,
		res->packs_deleted, res->packs_rewritten, res->blocks_moved);
}

/* ---- scrub --------------------------------------------------------------*/

/* scrub --json: each use of a bad block, kept for the report at the end. */
struct scrub_json {
	FILE *tmp;          /* the "bad" array's elements, as written */
	uint64_t n;
	FILE *snaps;        /* the "damaged_snapshots" array's */
	uint64_t nsnap;
	FILE *pages;        /* the "damaged_pages" array's */
	uint64_t npages;
	FILE *ranges;       /* the "affected_ranges" array's */
	uint64_t nranges;
};

static int scrub_report_json(const dd_scrub_bad *bad, struct scrub_json *j)
{
	char hex[65], sym[32];

	fprintf(j->tmp, "%s\n    {\"hash\": \"%s\", \"pack\": %" PRIu32
		", \"pack_offset\": %" PRIu64 ", \"error\": \"%s\", "
		"\"snapshot\": ", j->n++ ? "," : "",
		hex_encode(hex, bad->hash, sizeof(bad->hash)), bad->pack,
		bad->pack_offset, err_symbol(sym, sizeof(sym), bad->error));
	if (bad->snapshot) {
		json_string(j->tmp, bad->snapshot);
		fprintf(j->tmp, ", \"offset\": %" PRIu64 "}", bad->offset);
	} else {
		fputs("null, \"offset\": null}", j->tmp);
	}
	return ferror(j->tmp) ? -1 : 0;
}

static int scrub_report(const dd_scrub_bad *bad, void *ctx)
{
	char hex[65], sym[32];

	if (ctx)
		return scrub_report_json(bad, ctx);
	printf("bad block %s (pack %" PRIu32 ", off %" PRIu64 "): %s; ",
	       hex_encode(hex, bad->hash, sizeof(bad->hash)), bad->pack,
	       bad->pack_offset, err_symbol(sym, sizeof(sym), bad->error));
	if (bad->snapshot) {
		fputs("used by ", stdout);
		fputs(bad->snapshot, stdout);
		printf(" at offset %" PRIu64 "\n", bad->offset);
	} else {
		fputs("not used by any snapshot\n", stdout);
	}
	fflush(stdout);
	return 0;
}

/* Each snapshot whose catalog records are damaged: a line, or kept for
 * the JSON report. */
static int scrub_snap_report(const char *snap, int error, const char *msg,
			     void *ctx)
{
	struct scrub_json *j = ctx;
	char sym[32];

	j->nsnap++;
	if (!j->tmp) {
		printf("damaged snapshot %s: %s\n", snap, msg);
		fflush(stdout);
		return 0;
	}
	fprintf(j->snaps, "%s\n    {\"snapshot\": ", j->nsnap > 1 ? "," : "");
	json_string(j->snaps, snap);
	fprintf(j->snaps, ", \"error\": \"%s\", \"message\": ",
		err_symbol(sym, sizeof(sym), error));
	json_string(j->snaps, msg);
	fputc('}', j->snaps);
	return ferror(j->snaps) ? -1 : 0;
}

/* Each damaged catalog page, and each run of a snapshot's bytes it
 * affects: a line, or kept for the JSON report. */
static int scrub_page_report(const dd_scrub_page *p, void *ctx)
{
	struct scrub_json *j = ctx;

	if (!p->snapshot)
		j->npages++;
	if (!j->tmp && !p->snapshot) {
		printf("damaged catalog page %" PRIu64 " of table %s: %s\n",
		       p->page, p->table, p->message);
	} else if (!j->tmp) {
		printf("damaged catalog page %" PRIu64 " of table %s affects ",
		       p->page, p->table);
		fputs(p->snapshot, stdout);
		printf(" at offsets %" PRIu64 " to %" PRIu64 "\n", p->offset,
		       p->offset + p->length);
	} else if (!p->snapshot) {
		fprintf(j->pages, "%s\n    {\"table\": ", j->npages > 1 ? ","
								   : "");
		json_string(j->pages, p->table);
		fprintf(j->pages, ", \"page\": %" PRIu64 ", \"error\": "
			"\"DD_ECORRUPT\", \"message\": ", p->page);
		json_string(j->pages, p->message);
		fputc('}', j->pages);
		return ferror(j->pages) ? -1 : 0;
	} else {
		fprintf(j->ranges, "%s\n    {\"table\": ", j->nranges++ ? ","
								     : "");
		json_string(j->ranges, p->table);
		fprintf(j->ranges, ", \"page\": %" PRIu64 ", \"snapshot\": ",
			p->page);
		json_string(j->ranges, p->snapshot);
		fprintf(j->ranges, ", \"offset\": %" PRIu64 ", \"length\": %"
			PRIu64 "}", p->offset, p->length);
		return ferror(j->ranges) ? -1 : 0;
	}
	fflush(stdout);
	return 0;
}

static void copy_out(FILE **f)
{
	int c;

	rewind(*f);
	while ((c = getc(*f)) != EOF)
		putchar(c);
	fclose(*f);
	*f = NULL;
}

/* The report as one JSON object: the figures, each use of a bad block
 * with its snapshot and offset, the snapshots with damaged metadata, the
 * damaged catalog pages and the runs of snapshots' bytes they affect. */
static void scrub_json_print(const dd_scrub_result *res, struct scrub_json *j)
{
	printf("{\"blocks_checked\": %" PRIu64 ", \"bytes_checked\": %" PRIu64
	       ", \"bad_blocks\": %" PRIu64 ", \"bad\": [",
	       res->blocks_checked, res->bytes_checked, res->bad_blocks);
	copy_out(&j->tmp);
	fputs(j->n ? "\n], \"damaged_snapshots\": [" : "], "
	      "\"damaged_snapshots\": [", stdout);
	copy_out(&j->snaps);
	fputs(j->nsnap ? "\n], \"damaged_pages\": [" : "], "
	      "\"damaged_pages\": [", stdout);
	copy_out(&j->pages);
	fputs(j->npages ? "\n], \"affected_ranges\": [" : "], "
	      "\"affected_ranges\": [", stdout);
	copy_out(&j->ranges);
	fputs(j->nranges ? "\n]}\n" : "]}\n", stdout);
}

int cmd_scrub(int argc, char **argv)
{
	static const int allow[] = {OPT_VERBOSE, OPT_JSON, CACHE_ALLOW, 0};
	dd_scrub_opts so = DD_SCRUB_OPTS_INIT;
	dd_scrub_result res;
	struct scrub_json json = {NULL, 0, NULL, 0, NULL, 0, NULL, 0};
	struct common_opts o;
	struct progress pg;
	dd_store *s;
	char hs[32];
	int rc;

	/* read-write: it records what it finds (dd_store_scrub); a damaged
	 * catalog opens, for scrub to name each damaged page */
	s = open_store_arg(argc, argv, allow, &o, OPEN_DEFER_CHECK);
	memset(&res, 0, sizeof(res));
	if (o.json && (!(json.tmp = tmpfile()) || !(json.snaps = tmpfile()) ||
		       !(json.pages = tmpfile()) || !(json.ranges = tmpfile())))
		die("scrub: cannot make a temporary file: %s", strerror(errno));
	progress_init(&pg, "scrub", 0, o.verbose);
	so.bad = scrub_report;
	so.bad_ctx = o.json ? &json : NULL;
	so.progress = progress_lib_cb;
	so.progress_ctx = &pg;
	so.damaged_snapshot = scrub_snap_report;
	so.damaged_snapshot_ctx = &json;
	so.damaged_page = scrub_page_report;
	so.damaged_page_ctx = &json;
	rc = dd_store_scrub_ext(s, &so, &res);
	progress_finish(&pg);
	if (rc == DD_ECORRUPT && (json.nsnap || json.npages) && o.json)
		scrub_json_print(&res, &json);   /* then the one line */
	if (rc != 0 && rc != DD_ECHECKSUM)
		die_store(s, rc);
	if (o.json)
		scrub_json_print(&res, &json);
	else if (!util_quiet)
		printf("scrub: %" PRIu64 " blocks (%s) checked, %" PRIu64
		       " bad\n", res.blocks_checked,
		       human_size(hs, sizeof(hs), res.bytes_checked),
		       res.bad_blocks);
	fflush(stdout);
	if (rc == DD_ECHECKSUM || res.bad_blocks) {
		cache_cli_close(s);
		die("%s: scrub found %" PRIu64 " bad block%s", argv[optind],
		    res.bad_blocks, res.bad_blocks == 1 ? "" : "s");
	}
	cache_cli_close(s);
	return 0;
}
