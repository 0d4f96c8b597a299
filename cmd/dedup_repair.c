/*
 * dedup_repair.c -- `dedup repair`: rebuild a store's catalog from its packs
 * and snapshot manifests (dd_store_repair, format/store.md §9).  What it
 * restores, skips or moves aside is printed as it happens on stdout (one
 * line an event, or JSON with --json), then a summary; exit 1 when a
 * snapshot lacks blocks or a manifest could not be read.
 *
 * With --from SOURCE (another store, or `-`: a ddsend stream on stdin) it
 * heals instead, beside everything else that runs (dd_store_heal_from,
 * format/store.md §9.1): each block healed or still damaged or lost is a
 * line, then a summary; exit 1 when some remain.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dedup_cmd.h"

static const char *const repair_kinds[] = {
	[DD_REPAIR_INCOMPLETE] = "incomplete", [DD_REPAIR_BAD_MANIFEST] = "manifest",
	[DD_REPAIR_BAD_PACK] = "pack", [DD_REPAIR_BAD_RECORDS] = "records",
};

/* Events as they come: text lines on stdout, or JSON objects in an array
 * whose separators this keeps. */
struct repair_out {
	int json;
	int n;
};

static void repair_event(void *ctx, const dd_repair_event *ev)
{
	struct repair_out *ro = ctx;
	const char *kind = ev->kind > 0 && ev->kind <= DD_REPAIR_BAD_RECORDS
				   ? repair_kinds[ev->kind] : "unknown";

	if (ro->json) {
		printf("%s\n    {\"kind\": \"%s\", \"name\": ", ro->n ? "," : "",
		       kind);
		json_string(stdout, ev->name);
		printf(", \"offset\": %" PRIu64 ", \"length\": %" PRIu64
		       ", \"message\": ", ev->offset, ev->length);
		json_string(stdout, ev->message);
		fputs("}", stdout);
	} else if (ev->kind == DD_REPAIR_INCOMPLETE) {
		printf("incomplete: snapshot '%s' lacks %" PRIu64 " block%s, the "
		       "first at byte %" PRIu64 "\n", ev->name, ev->length,
		       ev->length == 1 ? "" : "s", ev->offset);
	} else if (ev->kind == DD_REPAIR_BAD_RECORDS) {
		printf("records: %s: %" PRIu64 " bytes at offset %" PRIu64
		       " skipped: %s\n", ev->name, ev->length, ev->offset,
		       ev->message);
	} else {
		printf("%s: %s moved aside: %s\n", kind, ev->name,
		       ev->message);
	}
	ro->n++;
	fflush(stdout);
}

static void heal_event(void *ctx, const uint8_t hash[32], uint32_t lsize,
		       int healed)
{
	struct repair_out *ro = ctx;
	char hex[65];

	hex_encode(hex, hash, 32);
	if (ro->json)
		printf("%s\n    {\"block\": \"%s\", \"size\": %" PRIu32
		       ", \"healed\": %s}", ro->n ? "," : "", hex, lsize,
		       healed ? "true" : "false");
	else
		printf("%s: block %s (%" PRIu32 " bytes)\n",
		       healed ? "healed" : "missing", hex, lsize);
	ro->n++;
	fflush(stdout);
}

/* dedup repair --from SOURCE STORE */
static int repair_from(const char *from, const char *path, int wait, int json)
{
	dd_heal_opts ho = DD_HEAL_OPTS_INIT;
	dd_heal_result res = {0};
	struct repair_out out = {.json = json};
	dd_store *s = open_store(path, wait, 0);
	int fd = 0, rc;

	if (strcmp(from, "-") != 0) {
		ho.source = from;
	} else {
		ho.read = dd_fd_read;
		ho.read_ctx = &fd;
	}
	ho.report = heal_event;
	ho.report_ctx = &out;
	if (json)
		fputs("{\n  \"blocks\": [", stdout);
	rc = dd_store_heal_from(s, &ho, &res);
	if (rc != 0) {
		if (json)
			fputs("]\n}\n", stdout);
		die_store(s, rc);
	}
	if (json)
		printf("%s],\n  \"wanted\": %" PRIu64 ",\n  \"healed\": %"
		       PRIu64 ",\n  \"missing\": %" PRIu64 "\n}\n",
		       out.n ? "\n  " : "", res.wanted, res.healed,
		       res.missing);
	else
		printf("repair: %" PRIu64 " block%s healed from %s, %" PRIu64
		       " still damaged or lost\n", res.healed,
		       res.healed == 1 ? "" : "s",
		       ho.source ? ho.source : "the stream", res.missing);
	fflush(stdout);
	cache_cli_close(s);
	if (res.missing)
		die("%s: %" PRIu64 " block%s still damaged or lost: %s holds "
		    "no good copy", path, res.missing,
		    res.missing == 1 ? "" : "s",
		    ho.source ? ho.source : "the stream");
	return 0;
}

int cmd_repair(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"wait", optional_argument, NULL, OPT_WAIT},
		{"json", no_argument, NULL, OPT_JSON},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"from", required_argument, NULL, OPT_FROM},
		{NULL, 0, NULL, 0},
	};
	dd_repair_opts ro = DD_REPAIR_OPTS_INIT;
	dd_repair_result res = {.version = DD_REPAIR_RESULT_VERSION};
	struct repair_out out = {0};
	struct progress pg;
	int c, verbose = 0, rc, wait = 0;
	const char *from = NULL;
	char hs[32];

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
		if (c == OPT_HELP)
			usage_exit();
		else if (c == OPT_VERBOSE)
			verbose = 1;
		else if (c == OPT_WAIT) {
			int ms = parse_wait(optarg);

			ro.wait_for_lock = 1;
			ro.lock_timeout_ms = ms > 0 ? (unsigned)ms : 0;
			wait = ms;
		}
		else if (c == OPT_FROM)
			from = optarg;
		else if (c == OPT_JSON)
			out.json = 1;
		else if (c == OPT_VERIFY)
			ro.verify = 1;
		else
			die_bad_option(dedup_subcmd, c, argv);
	}
	want_args(argc, argv, 1, 1);
	if (from && ro.verify)
		die("--from and --verify do not go together: --from heals "
		    "blocks, --verify belongs to a rebuild");
	if (from)
		return repair_from(from, argv[optind], wait, out.json);
	progress_init(&pg, "repair", 0, verbose);
	ro.progress = progress_lib_cb;
	ro.progress_ctx = &pg;
	ro.report = repair_event;
	ro.report_ctx = &out;
	if (out.json)
		fputs("{\n  \"events\": [", stdout);
	rc = dd_store_repair(argv[optind], &ro, &res);
	progress_finish(&pg);
	if (rc != 0) {
		if (out.json)
			fputs("]\n}\n", stdout);
		die("%s", lib_msg(dd_last_errmsg(), rc));
	}
	if (out.json) {
		printf("%s],\n  \"snapshots\": %" PRIu64
		       ",\n  \"incomplete_snapshots\": %" PRIu64
		       ",\n  \"blocks\": %" PRIu64
		       ",\n  \"unreferenced_blocks\": %" PRIu64
		       ",\n  \"missing_blocks\": %" PRIu64
		       ",\n  \"packs\": %" PRIu64 ",\n  \"pack_bytes\": %" PRIu64
		       ",\n  \"records\": %" PRIu64
		       ",\n  \"damaged_records\": %" PRIu64
		       ",\n  \"damaged_bytes\": %" PRIu64
		       ",\n  \"damaged_packs\": %" PRIu64
		       ",\n  \"damaged_manifests\": %" PRIu64 "\n}\n",
		       out.n ? "\n  " : "", res.snapshots,
		       res.incomplete_snapshots, res.blocks,
		       res.unreferenced_blocks, res.missing_blocks, res.packs,
		       res.pack_bytes, res.records, res.damaged_records,
		       res.damaged_bytes, res.damaged_packs,
		       res.damaged_manifests);
	} else {
		printf("repair: %" PRIu64 " snapshot%s restored (%" PRIu64
		       " incomplete); %" PRIu64 " blocks in %" PRIu64
		       " pack%s (%s), %" PRIu64 " unreferenced (left for gc), %"
		       PRIu64 " lost; skipped %" PRIu64 " damaged records (%"
		       PRIu64 " bytes), %" PRIu64 " packs, %" PRIu64
		       " manifests\n", res.snapshots,
		       res.snapshots == 1 ? "" : "s", res.incomplete_snapshots,
		       res.blocks, res.packs, res.packs == 1 ? "" : "s",
		       human_size(hs, sizeof(hs), res.pack_bytes),
		       res.unreferenced_blocks, res.missing_blocks,
		       res.damaged_records, res.damaged_bytes,
		       res.damaged_packs, res.damaged_manifests);
	}
	fflush(stdout);
	if (res.incomplete_snapshots || res.damaged_manifests)
		die("%s: repaired, but %" PRIu64 " snapshot%s lack%s blocks and %"
		    PRIu64 " manifest%s could not be read", argv[optind],
		    res.incomplete_snapshots,
		    res.incomplete_snapshots == 1 ? "" : "s",
		    res.incomplete_snapshots == 1 ? "s" : "",
		    res.damaged_manifests,
		    res.damaged_manifests == 1 ? "" : "s");
	return 0;
}

