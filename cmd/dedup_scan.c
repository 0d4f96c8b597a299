/*
 * dedup_scan.c -- `dedup scan`: what dedup would save on existing files,
 * trees, devices or stdin, without a store (dd_scan_*).
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedup_cmd.h"

#define SCAN_SKIP_KEEP 1000   /* skipped inputs listed in the report */

struct scan_skip {
	char *path;
	int code;
	char *msg;
};

/* What the report needs besides the library's figures; static so that a
 * die() leaves it reachable (LeakSanitizer runs at exit). */
static struct scan_state {
	struct scan_skip skips[SCAN_SKIP_KEEP];
	size_t nskips;
	struct progress pg;
	dd_scan_result res[DD_SCAN_MAX_RESULTS];
	dd_scan *scan;
} scan_st;

static void scan_warn(void *ctx, const char *path, int code, const char *msg)
{
	struct scan_skip *sk;

	(void)ctx;
	if (scan_st.pg.drawn)
		fputc('\n', stderr);   /* keep the meter off the warning */
	warnmsg("%s: %s", path, msg);
	if (scan_st.nskips == SCAN_SKIP_KEEP)
		return;
	sk = &scan_st.skips[scan_st.nskips];
	sk->path = strdup(path);
	sk->msg = strdup(msg);
	sk->code = code;
	if (sk->path && sk->msg)
		scan_st.nskips++;
	else {
		free(sk->path);
		free(sk->msg);
	}
}

static int scan_progress(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)total;
	progress_update(&scan_st.pg, done);
	return 0;
}

static void scan_free_state(void)
{
	for (size_t i = 0; i < scan_st.nskips; i++) {
		free(scan_st.skips[i].path);
		free(scan_st.skips[i].msg);
	}
	scan_st.nskips = 0;
	dd_scan_free(scan_st.scan);
	scan_st.scan = NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* --block-size 4K,16K,128K: sorted, each a power of two in range. */
static size_t scan_parse_sizes(const char *arg, uint32_t *sizes)
{
	uint64_t v[DD_SCAN_MAX_BLOCK_SIZES];
	const char *bad;
	size_t n, i;

	if (parse_size_list(arg, v, DD_SCAN_MAX_BLOCK_SIZES, &n, &bad) != 0)
		die_usage("scan: invalid block size list '%.100s' (at '%.40s'; "
			  "sizes like 4K,128K, at most %d)", arg, bad,
			  DD_SCAN_MAX_BLOCK_SIZES);
	for (i = 0; i < n; i++) {
		if (!block_size_valid(v[i]))
			die_usage("scan: block size must be a power of two from "
				  "4 KiB to 1 MiB, not %" PRIu64, v[i]);
		sizes[i] = (uint32_t)v[i];
	}
	qsort(sizes, n, sizeof(*sizes), cmp_u32);
	for (i = 1; i < n; i++)
		if (sizes[i] == sizes[i - 1])
			die_usage("scan: block size %" PRIu32 " listed twice",
				  sizes[i]);
	return n;
}

/* --chunker fixed,fastcdc: each once, in the order given (the order of
 * the results). */
static size_t scan_parse_chunkers(const char *arg, int *out)
{
	char buf[64], *tok, *save = NULL;
	size_t n = 0;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int c = parse_chunker(tok);

		if (c < 0)
			die_usage("scan: --chunker takes fixed, fastcdc or "
				  "both, comma-separated, not '%.100s'", arg);
		for (size_t i = 0; i < n; i++)
			if (out[i] == c)
				die_usage("scan: chunker %s listed twice", tok);
		if (n == 2)
			die_usage("scan: at most two chunkers");
		out[n++] = c;
	}
	if (!n)
		die_usage("scan: --chunker needs fixed, fastcdc or both");
	return n;
}

static unsigned scan_parse_rate(const char *arg)
{
	uint64_t v;
	unsigned shift = 0;

	if (parse_size(arg, &v) != 0 || v == 0 || (v & (v - 1)) ||
	    v > (1ull << 32))
		die_usage("scan: --sample-rate takes N, a power of two from 1 "
			  "to 2^32 (keep 1 block content in N), not '%.100s'",
			  arg);
	while (v >>= 1)
		shift++;
	return shift;
}

static const char *scan_pct(char *buf, size_t len, double e)
{
	if (!isfinite(e))
		snprintf(buf, len, "unbounded (sample too small)");
	else
		snprintf(buf, len, "%.2f%%", e * 100.0);
	return buf;
}

/* A sample's relative bound past which its figure means nothing: the
 * true ratio could be half or twice it. */
#define SCAN_BOUND_MAX 0.5

/* One ratio of the headline: exact, estimated with its bound, a range
 * when the bound is too wide for a figure, or "unbounded" when the
 * sample held too few blocks to bound it at all. */
static const char *scan_ratio(char *buf, size_t len, const dd_scan_result *r,
			      double v, double e)
{
	if (r->mode != DD_SCAN_SAMPLE)
		snprintf(buf, len, "%.2f", v);
	else if (!isfinite(e))
		snprintf(buf, len, "unbounded");
	else if (e > SCAN_BOUND_MAX)
		snprintf(buf, len, "between %.2f and %.2f",
			 v * (1 - e) > 1 ? v * (1 - e) : 1.0, v * (1 + e));
	else
		snprintf(buf, len, "%.2f (+/- %.1f%%)", v, e * 100.0);
	return buf;
}

static void scan_headline(const dd_scan_result *r)
{
	char d[64], c[64], dc[64];
	double e = r->dedup_error + r->compress_error +
		   r->dedup_error * r->compress_error;

	printf("dedup = %s, compress = %s, dedup * compress = %s\n",
	       scan_ratio(d, sizeof(d), r, r->dedup_ratio, r->dedup_error),
	       scan_ratio(c, sizeof(c), r, r->compress_ratio,
			  r->compress_error),
	       scan_ratio(dc, sizeof(dc), r,
			  r->dedup_ratio * r->compress_ratio, e));
	if (r->mode == DD_SCAN_SAMPLE &&
	    (!isfinite(r->dedup_error) || r->dedup_error > SCAN_BOUND_MAX))
		printf("(the sample, %" PRIu64 " distinct blocks, is too small "
		       "for a figure: give --memory more, or scan exactly)\n",
		       r->sampled_blocks);
}

/* Scales column `off` (a uint64_t of dd_hist_row) of every row by
 * target / its sum, the rounding put on row `big`; returns the factor. */
static double hist_fit_column(dd_hist_row *hist, size_t off, uint64_t target,
			      int big)
{
	uint64_t sum = 0, now = 0;
	double f;

	for (int i = 0; i < DD_HIST_BUCKETS; i++)
		sum += *(uint64_t *)((char *)&hist[i] + off);
	if (sum == 0)
		return 1.0;
	f = (double)target / (double)sum;
	for (int i = 0; i < DD_HIST_BUCKETS; i++) {
		uint64_t *v = (uint64_t *)((char *)&hist[i] + off);

		*v = (uint64_t)((double)*v * f);
		now += *v;
	}
	*(uint64_t *)((char *)&hist[big] + off) += target - now;
	return f;
}

/*
 * In sample mode the histogram's rows are estimates scaled up from the
 * sample, and its totals need not agree with the figures above and below
 * it: the exact referenced counts, and the unique estimates the ratios
 * use (a sample of a few blocks once showed more allocated blocks than
 * referenced ones).  The rows are scaled so that the table's Total is
 * those figures, and its referenced LSIZE over its allocated LSIZE is the
 * headline's dedup ratio.  Rounding is put on the largest row.
 */
static void scan_hist_fit(dd_scan_result *r)
{
	dd_hist_row *h = r->hist;
	uint64_t ref_psize = 0;
	double f;
	int big = 0;

	if (r->mode != DD_SCAN_SAMPLE)
		return;
	for (int i = 0; i < DD_HIST_BUCKETS; i++) {
		ref_psize += h[i].ref_psize;
		if (h[i].ref_blocks > h[big].ref_blocks)
			big = i;
	}
	hist_fit_column(h, offsetof(dd_hist_row, blocks), r->unique_blocks, big);
	hist_fit_column(h, offsetof(dd_hist_row, lsize), r->unique_bytes, big);
	/* unique_bytes over the compress ratio, not stored_bytes: the
	 * library caps unique_bytes at the referenced bytes, not
	 * stored_bytes, and the ratio is the headline's */
	hist_fit_column(h, offsetof(dd_hist_row, psize),
			r->compress_ratio > 0 ? (uint64_t)((double)r->unique_bytes
						/ r->compress_ratio)
					      : r->stored_bytes, big);
	hist_fit_column(h, offsetof(dd_hist_row, ref_blocks),
			r->referenced_blocks, big);
	/* stored bytes have no exact referenced figure: they follow LSIZE */
	f = hist_fit_column(h, offsetof(dd_hist_row, ref_lsize),
			    r->referenced_bytes, big);
	hist_fit_column(h, offsetof(dd_hist_row, ref_psize),
			(uint64_t)((double)ref_psize * f), big);
}

/* "fixed 128 KiB" or "fastcdc 128 KiB" (an average). */
static const char *scan_what(char *buf, size_t len, const dd_scan_result *r)
{
	char a[32];

	snprintf(buf, len, "%s %s", chunker_name(r->chunker),
		 human_size(a, sizeof(a), r->block_size));
	return buf;
}

/* Several results: one line each, side by side, before the details. */
static void scan_text_summary(const dd_scan_info *info)
{
	char w[48], a[32], b[32];

	if (info->nresults < 2)
		return;
	printf("\n%-16s %12s %12s %10s %10s %8s %8s %8s\n", "cutting",
	       "blocks", "unique", "unique B", "stored B", "dedup",
	       "compress", "total");
	for (size_t i = 0; i < info->nresults; i++) {
		const dd_scan_result *r = &scan_st.res[i];

		printf("%-16s %12" PRIu64 " %12" PRIu64 " %10s %9s%c %8.2f "
		       "%7.2f%c %8.2f\n", scan_what(w, sizeof(w), r),
		       r->blocks, r->unique_blocks,
		       human_size(a, sizeof(a), r->unique_bytes),
		       human_size(b, sizeof(b), r->stored_bytes),
		       r->stored_estimated ? '~' : ' ', r->dedup_ratio,
		       r->compress_ratio, r->stored_estimated ? '~' : ' ',
		       r->dedup_ratio * r->compress_ratio);
	}
	for (size_t i = 0; i < info->nresults; i++)
		if (scan_st.res[i].stored_estimated) {
			printf("~ estimated from the fixed blocks' compression "
			       "(--compress-exact compresses these too)\n");
			break;
		}
	for (size_t i = 0; i < info->nresults; i++)
		if (scan_st.res[i].key_fast) {
			printf("fastcdc blocks told apart by XXH3-128, not "
			       "SHA-256 (--compress-exact: SHA-256)\n");
			break;
		}
}

static void scan_text_one(const dd_scan_result *r)
{
	char a[48], b[32], c[32];

	printf("\n%s%s: %" PRIu64 " blocks, %" PRIu64 " zero; "
	       "referenced %" PRIu64 " blocks (%s)\n",
	       r->chunker == DD_CHUNKER_FIXED ? "block size " : "",
	       r->chunker == DD_CHUNKER_FIXED
	       ? human_size(a, sizeof(a), r->block_size)
	       : scan_what(a, sizeof(a), r), r->blocks,
	       r->zero_blocks, r->referenced_blocks,
	       human_size(b, sizeof(b), r->referenced_bytes));
	if (r->mode == DD_SCAN_SAMPLE)
		printf("(estimated from the sample; the totals are the "
		       "figures around the table)\n");
	print_hist_table(r->hist, 1);
	printf("unique blocks: %" PRIu64 "%s; DDT on disk ~ %s (%d bytes per "
	       "entry, compacted)\n", r->unique_blocks,
	       r->sample_shift ? " (estimated)" : "",
	       human_size(c, sizeof(c), r->ddt_bytes),
	       DD_SCAN_DDT_ENTRY_BYTES);
	if (r->sample_shift)
		printf("sample: 1 in %.0f block contents, %" PRIu64 " sampled; "
		       "at %.0f%% confidence dedup within %s, compress "
		       "within %s\n", ldexp(1.0, (int)r->sample_shift),
		       r->sampled_blocks, r->confidence * 100.0,
		       scan_pct(a, sizeof(a), r->dedup_error),
		       scan_pct(b, sizeof(b), r->compress_error));
	if (r->stored_estimated)
		printf("compressed sizes (psize, compress) estimated from the "
		       "fixed blocks' compression of the same bytes\n");
	if (r->key_fast)
		printf("blocks told apart by XXH3-128, not SHA-256\n");
	if (r->spill_runs)
		printf("spilled: %" PRIu64 " sorted runs, %s on disk\n",
		       r->spill_runs, human_size(a, sizeof(a), r->spill_bytes));
	scan_headline(r);
}

static void scan_text(const dd_scan_info *info, const dd_scan_opts *so)
{
	char a[32], comp[32];
	size_t i;

	compress_spec_name(comp, sizeof(comp), so->compress, so->compress_level);
	printf("scan: %" PRIu64 " image%s, %s read; mode %s; compress %s\n",
	       info->images, info->images == 1 ? "" : "s",
	       human_size(a, sizeof(a), info->bytes),
	       so->mode == DD_SCAN_SAMPLE ? "sample" : "exact", comp);
	scan_text_summary(info);
	for (i = 0; i < info->nresults; i++)
		scan_text_one(&scan_st.res[i]);
	if (info->special)
		printf("\nnot read: %" PRIu64 " fifos, sockets or devices "
		       "inside directories\n", info->special);
	if (!info->skipped)
		return;
	printf("\nskipped or partly read: %" PRIu64 "\n", info->skipped);
	for (i = 0; i < scan_st.nskips; i++)
		printf("  %s: %s\n", scan_st.skips[i].path,
		       scan_st.skips[i].msg);
	if (info->skipped > scan_st.nskips)
		printf("  ... and %" PRIu64 " more\n",
		       info->skipped - scan_st.nskips);
}

static void scan_json_hist(const dd_scan_result *r)
{
	print_hist_json(r->hist, "     ");
	printf("}");
}

static void scan_json_one(const dd_scan_result *r)
{
	printf("    {\"chunker\": \"%s\", \"block_size\": %" PRIu32
	       ", \"mode\": \"%s\",\n", chunker_name(r->chunker),
	       r->block_size, r->mode == DD_SCAN_SAMPLE ? "sample" : "exact");
	printf("     \"dedup_ratio\": %.17g, \"compress_ratio\": %.17g, "
	       "\"dedup_compress_ratio\": %.17g,\n", r->dedup_ratio,
	       r->compress_ratio, r->dedup_ratio * r->compress_ratio);
	printf("     \"logical_bytes\": %" PRIu64 ", \"blocks\": %" PRIu64
	       ", \"zero_blocks\": %" PRIu64 ",\n", r->logical_bytes,
	       r->blocks, r->zero_blocks);
	printf("     \"referenced_blocks\": %" PRIu64 ", \"referenced_bytes\": "
	       "%" PRIu64 ",\n", r->referenced_blocks, r->referenced_bytes);
	printf("     \"unique_blocks\": %" PRIu64 ", \"unique_bytes\": %" PRIu64
	       ", \"stored_bytes\": %" PRIu64 ", \"stored_estimated\": %s,\n",
	       r->unique_blocks, r->unique_bytes, r->stored_bytes,
	       r->stored_estimated ? "true" : "false");
	printf("     \"key\": \"%s\",\n", r->key_fast ? "xxh3-128" : "sha256");
	printf("     \"ddt_bytes\": %" PRIu64 ", \"ddt_bytes_per_entry\": %d,\n",
	       r->ddt_bytes, DD_SCAN_DDT_ENTRY_BYTES);
	printf("     \"sample_rate\": %.17g, \"sampled_blocks\": %" PRIu64
	       ", \"confidence\": %.17g, ", ldexp(1.0, -(int)r->sample_shift),
	       r->sampled_blocks, r->confidence);
	json_double(stdout, "dedup_error", r->dedup_error, ", ");
	json_double(stdout, "compress_error", r->compress_error, ",\n");
	printf("     \"spill_runs\": %" PRIu64 ", \"spill_bytes\": %" PRIu64
	       ",\n", r->spill_runs, r->spill_bytes);
	scan_json_hist(r);
}

static void scan_json(const dd_scan_info *info, const dd_scan_opts *so)
{
	char comp[32];
	size_t i;

	compress_spec_name(comp, sizeof(comp), so->compress, so->compress_level);
	printf("{\n  \"mode\": \"%s\",\n  \"compress\": \"%s\",\n",
	       so->mode == DD_SCAN_SAMPLE ? "sample" : "exact", comp);
	printf("  \"images\": %" PRIu64 ",\n  \"bytes\": %" PRIu64 ",\n"
	       "  \"special_files\": %" PRIu64 ",\n  \"skipped_count\": %"
	       PRIu64 ",\n  \"skipped\": [", info->images, info->bytes,
	       info->special, info->skipped);
	for (i = 0; i < scan_st.nskips; i++) {
		char sym[32];

		printf("%s\n    {\"path\": ", i ? "," : "");
		json_string(stdout, scan_st.skips[i].path);
		printf(", \"error\": \"%s\", \"message\": ",
		       err_symbol(sym, sizeof(sym), scan_st.skips[i].code));
		json_string(stdout, scan_st.skips[i].msg);
		printf("}");
	}
	printf("%s],\n  \"results\": [\n", scan_st.nskips ? "\n  " : "");
	for (i = 0; i < info->nresults; i++) {
		scan_json_one(&scan_st.res[i]);
		printf("%s\n", i + 1 < info->nresults ? "," : "");
	}
	printf("  ]\n}\n");
}

static _Noreturn void scan_die(int rc)
{
	progress_finish(&scan_st.pg);
	die("%s", lib_msg(dd_scan_errmsg(scan_st.scan), rc));
}

static uint64_t scan_total(int argc, char **argv)
{
	uint64_t total = 0, n;

	for (int i = optind; i < argc; i++)
		if (strcmp(argv[i], "-") != 0 &&
		    dd_scan_path_bytes(argv[i], &n) == 0)
			total += n;
	return total;
}

static void scan_inputs(int argc, char **argv)
{
	for (int i = optind; i < argc; i++) {
		int rc = strcmp(argv[i], "-") == 0
			? dd_scan_add_fd(scan_st.scan, STDIN_FILENO, "stdin")
			: dd_scan_add_path(scan_st.scan, argv[i]);

		if (rc != 0)
			scan_die(rc);
	}
}

enum {
	OPT_MEMORY = 512,
	OPT_SAMPLE,
	OPT_SAMPLE_RATE,
	OPT_TMPDIR,
	OPT_COMPRESS_EXACT,
};

/* Every block size must suit every chunker: a FastCDC average is 4K to
 * 256K. */
static void scan_check_sizes(const dd_scan_opts *so)
{
	for (size_t c = 0; c < so->nchunkers; c++)
		for (size_t i = 0; i < so->nblock_sizes; i++)
			if (!chunker_size_valid(so->chunkers[c],
						so->block_sizes[i]))
				die_usage("scan: a fastcdc average block size "
					  "is 4K to 256K, not %" PRIu32,
					  so->block_sizes[i]);
}

static void scan_parse(int argc, char **argv, dd_scan_opts *so,
		       uint32_t *sizes, int *chunkers, int *json,
		       int *verbose)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"json", no_argument, NULL, OPT_JSON},
		{"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
		{"chunker", required_argument, NULL, OPT_CHUNKER},
		{"compress", required_argument, NULL, OPT_COMPRESS},
		{"compress-exact", no_argument, NULL, OPT_COMPRESS_EXACT},
		{"memory", required_argument, NULL, OPT_MEMORY},
		{"sample", no_argument, NULL, OPT_SAMPLE},
		{"sample-rate", required_argument, NULL, OPT_SAMPLE_RATE},
		{"tmpdir", required_argument, NULL, OPT_TMPDIR},
		{NULL, 0, NULL, 0},
	};
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_HELP:
			usage_exit();
		case OPT_VERBOSE:
			*verbose = 1;
			break;
		case OPT_JSON:
			*json = 1;
			break;
		case OPT_BLOCK_SIZE:
			so->nblock_sizes = scan_parse_sizes(optarg, sizes);
			break;
		case OPT_CHUNKER:
			so->nchunkers = scan_parse_chunkers(optarg, chunkers);
			break;
		case OPT_COMPRESS:
			if (parse_compress_spec(optarg, &so->compress,
						&so->compress_level) != 0)
				die_usage("scan: --compress takes zstd, "
					  "zstd:LEVEL (1..19) or none, not "
					  "'%.100s'", optarg);
			break;
		case OPT_COMPRESS_EXACT:
			so->compress_exact = 1;
			break;
		case OPT_MEMORY:
			if (parse_size(optarg, &so->mem_limit) != 0 ||
			    so->mem_limit < (64u << 10))
				die_usage("scan: --memory takes a size of at "
					  "least 64K, not '%.100s'", optarg);
			break;
		case OPT_SAMPLE:
			so->mode = DD_SCAN_SAMPLE;
			break;
		case OPT_SAMPLE_RATE:
			so->mode = DD_SCAN_SAMPLE;
			so->sample_shift = scan_parse_rate(optarg);
			break;
		case OPT_TMPDIR:
			so->tmpdir = optarg;
			break;
		default:
			die_bad_option(dedup_subcmd, c, argv);
		}
	}
	if (optind >= argc)
		die_usage("scan: missing PATH (use - for stdin)");
	so->block_sizes = sizes;
	so->chunkers = chunkers;
	scan_check_sizes(so);
}

int cmd_scan(int argc, char **argv)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_info info = {DD_SCAN_INFO_VERSION, 0, 0, 0, 0, 0, 0};
	uint32_t sizes[DD_SCAN_MAX_BLOCK_SIZES];
	int chunkers[2];
	int json = 0, verbose = 0, rc;
	uint64_t total = 0;

	scan_parse(argc, argv, &so, sizes, chunkers, &json, &verbose);
	progress_init(&scan_st.pg, "scan", 0, verbose);
	if (scan_st.pg.enabled)
		total = scan_total(argc, argv);
	scan_st.pg.total = total;
	so.progress = scan_progress;
	so.progress_total = total;
	so.warn = scan_warn;
	rc = dd_scan_new(&scan_st.scan, &so);
	if (rc != 0)
		die("scan: %s", lib_msg(dd_last_errmsg(), rc));
	scan_inputs(argc, argv);
	rc = dd_scan_finish(scan_st.scan);
	if (rc != 0)
		scan_die(rc);
	progress_finish(&scan_st.pg);
	dd_scan_info_get(scan_st.scan, &info);
	for (size_t i = 0; i < info.nresults; i++) {
		scan_st.res[i].version = DD_SCAN_RESULT_VERSION;
		rc = dd_scan_result_get(scan_st.scan, i, &scan_st.res[i]);
		if (rc != 0)
			scan_die(rc);
		scan_hist_fit(&scan_st.res[i]);
	}
	if (json)
		scan_json(&info, &so);
	else
		scan_text(&info, &so);
	fflush(stdout);
	scan_free_state();
	if (info.images == 0 && info.skipped == 0)
		warnmsg("scan: nothing to scan (no files in the input)");
	if (info.skipped) {
		warnmsg("scan: %" PRIu64 " input%s skipped or partly read "
			"(listed in the report)", info.skipped,
			info.skipped == 1 ? "" : "s");
		return 1;
	}
	return 0;
}
