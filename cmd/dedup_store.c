/*
 * dedup_store.c -- the subcommands that make and use snapshots: init, put,
 * get, ls and rm.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedup_cmd.h"

#define PUT_CHUNK (4u << 20)
#define GET_CHUNK (8u << 20)

/* get's I/O buffer, static so that a die() on an error path leaves
 * nothing unreachable behind (LeakSanitizer runs at exit).  put hands a
 * file's byte ranges to the writer, whose workers read them
 * (dd_writer_write_file), and reads pipes straight into the writer's
 * buffer (dd_writer_buffer). */
static char io_buf[GET_CHUNK];
#define HOLE_GRAIN (64u << 10)  /* zero runs skipped when writing a file */

/* ---- init ---------------------------------------------------------------*/

static void parse_compress(const char *arg, dd_create_opts *co)
{
	int rc = parse_compress_spec(arg, &co->compress, &co->compress_level);

	if (rc == -1)
		die_usage("init: --compress takes zstd, zstd:LEVEL or none, "
			  "not '%.100s'", arg);
	if (rc == -2)
		die_usage("init: zstd level must be 1..19, not '%.100s'",
			  arg + 5);
}

static uint32_t parse_block_size(const char *arg)
{
	uint64_t v;

	if (parse_size(arg, &v) != 0)
		die_usage("init: invalid block size '%.100s'", arg);
	if (!block_size_valid(v))
		die_usage("init: block size must be a power of two from "
			  "4 KiB to 1 MiB, not '%.100s'", arg);
	return (uint32_t)v;
}

static int parse_init_chunker(const char *arg)
{
	int c = parse_chunker(arg);

	if (c < 0)
		die_usage("init: --chunker takes fixed or fastcdc, not "
			  "'%.100s'", arg);
	return c;
}

int cmd_init(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"compress", required_argument, NULL, OPT_COMPRESS},
		{"chunker", required_argument, NULL, OPT_CHUNKER},
		{NULL, 0, NULL, 0},
	};
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	dd_store *s = NULL;
	int c, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_HELP:
			usage_exit();
		case OPT_BLOCK_SIZE:
			co.block_size = parse_block_size(optarg);
			break;
		case OPT_VERIFY:
			co.verify = 1;
			break;
		case OPT_COMPRESS:
			parse_compress(optarg, &co);
			break;
		case OPT_CHUNKER:
			co.chunker = parse_init_chunker(optarg);
			break;
		default:
			die_bad_option(dedup_subcmd, c, argv);
		}
	}
	want_args(argc, argv, 1, 1);
	/* fastcdc: --block-size is the average, 4K..256K */
	if (co.block_size && !chunker_size_valid(co.chunker, co.block_size))
		die_usage("init: a fastcdc average block size must be a power "
			  "of two from 4 KiB to 256 KiB, not %u", co.block_size);
	rc = dd_store_create(&s, argv[optind], &co, NULL);
	if (rc != 0)
		die("%s", lib_msg(dd_store_errmsg(NULL), rc));
	dd_store_close(s);
	return 0;
}

/* ---- put ----------------------------------------------------------------*/

struct input {
	int fd;
	const char *label;
	uint64_t size;      /* 0 when unknown (pipes) */
};

static void open_input(struct input *in, const char *path)
{
	struct stat st;

	in->size = 0;
	if (!path || strcmp(path, "-") == 0) {
		in->fd = STDIN_FILENO;
		in->label = "stdin";
	} else {
		in->fd = open(path, O_RDONLY | O_CLOEXEC);
		in->label = path;
		if (in->fd < 0)
			die("%s: %s", path, strerror(errno));
	}
	if (fstat(in->fd, &st) != 0)
		die("%s: %s", in->label, strerror(errno));
	if (S_ISDIR(st.st_mode))
		die("%s: is a directory", in->label);
	if (S_ISREG(st.st_mode)) {
		in->size = (uint64_t)st.st_size;
	} else if (S_ISBLK(st.st_mode)) {
		/* A block device is read as a stream; its size only feeds
		 * the progress meter. */
		off_t end = lseek(in->fd, 0, SEEK_END);

		if (end > 0 && lseek(in->fd, 0, SEEK_SET) == 0)
			in->size = (uint64_t)end;
	}
}

/* Aborts the writer and exits with its message. */
static _Noreturn void put_fail(dd_writer *w, int rc, const char *why)
{
	char msg[1024];

	snprintf(msg, sizeof(msg), "%s", why ? why :
		 lib_msg(dd_writer_errmsg(w), rc));
	dd_writer_abort(w);
	dd_writer_free(w);
	die("%s", msg);
}

/* After the commit, before the writer is freed: what it stored anew. */
static void put_summary(const dd_writer *w, const char *name, uint64_t bytes,
			double secs, int json)
{
	dd_writer_stats ws = {.version = DD_WRITER_STATS_VERSION};
	char hs[32], hn[32];
	int have = dd_writer_stats_get(w, &ws) == 0;

	if (json) {
		fputs("{\"snapshot\": ", stdout);
		json_string(stdout, name);
		printf(", \"bytes\": %" PRIu64, bytes);
		if (have)
			printf(", \"blocks\": %" PRIu64 ", \"zero_blocks\": %"
			       PRIu64 ", \"new_blocks\": %" PRIu64
			       ", \"new_bytes\": %" PRIu64
			       ", \"map_blocks\": %" PRIu64, ws.blocks,
			       ws.zero_blocks, ws.new_blocks, ws.new_bytes,
			       ws.map_blocks);
		printf(", \"seconds\": %.3f}\n", secs);
		return;
	}
	human_size(hs, sizeof(hs), bytes);
	if (have)
		fprintf(stderr, "%s: put %s: %" PRIu64 " bytes (%s), %" PRIu64
			" blocks, %" PRIu64 " zero, %" PRIu64 " new: %" PRIu64
			" bytes stored (%s), %.2f s, %.1f MiB/s\n",
			util_prog, name, bytes, hs, ws.blocks, ws.zero_blocks,
			ws.new_blocks, ws.new_bytes,
			human_size(hn, sizeof(hn), ws.new_bytes), secs,
			secs > 0 ? (double)bytes / secs / 1048576.0 : 0.0);
	else
		fprintf(stderr, "%s: put %s: %" PRIu64 " bytes (%s), %.2f s\n",
			util_prog, name, bytes, hs, secs);
}

/* A regular file or a device of known size: its bytes are handed over as
 * one range and read by the writer's workers (dd_writer_write_file), which
 * report progress as they go.  Leaves the offset at the end of that range,
 * for the read loop to take whatever was appended meanwhile.  Returns the
 * bytes handed over. */
static uint64_t put_known_size(dd_writer *w, struct input *in)
{
	off_t start = lseek(in->fd, 0, SEEK_CUR);
	int rc;

	if (in->size == 0 || start < 0 || (uint64_t)start >= in->size)
		return 0;
	rc = dd_writer_write_file(w, in->fd, (uint64_t)start,
				  in->size - (uint64_t)start);
	if (rc != 0)
		put_fail(w, rc, NULL);
	if (lseek(in->fd, (off_t)in->size, SEEK_SET) < 0) {
		char why[512];

		snprintf(why, sizeof(why), "%s: seek: %s", in->label,
			 strerror(errno));
		put_fail(w, 0, why);
	}
	return in->size - (uint64_t)start;
}

int cmd_put(int argc, char **argv)
{
	static const int allow[] = {OPT_VERBOSE, OPT_WAIT, OPT_JSON, CACHE_ALLOW,
				    0};
	struct common_opts o;
	struct progress pg;
	struct input in;
	char *path, *name;
	dd_writer_opts wo = DD_WRITER_OPTS_INIT;
	dd_writer *w = NULL;
	dd_store *s;
	uint64_t total = 0;
	double t0;
	int rc;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 1, 2);
	split_snapref_or_die(argv[optind], &path, &name);
	open_input(&in, optind + 1 < argc ? argv[optind + 1] : NULL);
	s = open_store(path, o.wait, 0);
	/* the writer reports the bytes it stored, a batch at a time */
	progress_init(&pg, name, in.size, o.verbose);
	wo.progress = progress_lib_cb;
	wo.progress_ctx = &pg;
	wo.progress_total = in.size;
	rc = dd_writer_begin_opts(&w, s, name, &wo);
	if (rc != 0)
		die_store(s, rc);

	t0 = now_seconds();
	total = put_known_size(w, &in);
	for (;;) {
		void *dst;
		size_t room;
		ssize_t n;
		char why[512];

		/* read straight into the writer's buffer: no extra copy */
		rc = dd_writer_buffer(w, &dst, &room);
		if (rc != 0)
			put_fail(w, rc, NULL);
		n = read_full(in.fd, dst, room < PUT_CHUNK ? room : PUT_CHUNK);
		if (n < 0) {
			snprintf(why, sizeof(why), "%s: read: %s", in.label,
				 strerror(errno));
			put_fail(w, 0, why);
		}
		if (n == 0)
			break;
		rc = dd_writer_produce(w, (size_t)n);
		if (rc != 0)
			put_fail(w, rc, NULL);
		total += (uint64_t)n;
	}
	rc = dd_writer_commit(w);
	if (rc != 0)
		put_fail(w, rc, NULL);
	progress_finish(&pg);
	if (o.json || (o.verbose && !util_quiet))
		put_summary(w, name, total, now_seconds() - t0, o.json);
	dd_writer_free(w);
	cache_cli_close(s);
	if (in.fd != STDIN_FILENO)
		close(in.fd);
	free(path);
	free(name);
	return 0;
}

/* ---- get ----------------------------------------------------------------*/

struct output {
	int fd;
	const char *path;   /* NULL for stdout */
	int regular;        /* a regular file: holes allowed */
	int sparse;         /* zero runs were skipped with lseek */
	struct outfile of;  /* FILE: written under a temporary name */
};

static struct output *get_out;

static _Noreturn void get_fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* Exits with one line, first removing the temporary file of a partial
 * FILE: a FILE that existed keeps its bytes. */
static void get_fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (get_out && get_out->path)
		outfile_abort(&get_out->of);
	die("%s", msg);
}

static void open_output(struct output *out, const char *path)
{
	struct stat st;

	memset(out, 0, sizeof(*out));
	if (!path || strcmp(path, "-") == 0) {
		out->fd = STDOUT_FILENO;
		return;
	}
	out->path = path;
	if (outfile_open(&out->of, path, O_WRONLY) != 0)
		die("%s: %s", path, strerror(errno));
	out->fd = out->of.fd;
	if (fstat(out->fd, &st) != 0) {
		outfile_abort(&out->of);
		die("%s: %s", path, strerror(errno));
	}
	out->regular = S_ISREG(st.st_mode);
}

static int all_zero(const char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Writes a chunk; into a regular file, runs of zeros become holes. */
static void write_chunk(struct output *out, const char *p, size_t n)
{
	const char *name = out->path ? out->path : "stdout";

	while (n > 0) {
		size_t k = n < HOLE_GRAIN ? n : HOLE_GRAIN;

		if (out->regular && all_zero(p, k)) {
			if (lseek(out->fd, (off_t)k, SEEK_CUR) < 0)
				get_fail("%s: seek: %s", name, strerror(errno));
			out->sparse = 1;
		} else if (write_all(out->fd, p, k) != 0) {
			get_fail("%s: write: %s", name, strerror(errno));
		}
		p += k;
		n -= k;
	}
}

/* Holes of the snapshot from off on, skipped in a regular output as one
 * seek (dd_reader_next_data: a seek in the block map, not a read of
 * zeros); returns where data starts again, or the size. */
static uint64_t skip_holes(struct output *out, dd_reader *r, uint64_t off)
{
	const char *name = out->path ? out->path : "stdout";
	uint64_t data;
	int rc;

	if (!out->regular)
		return off;
	rc = dd_reader_next_data(r, off, &data);
	if (rc != 0)
		get_fail("%s", lib_msg(dd_reader_errmsg(r), rc));
	if (data > off) {
		if (lseek(out->fd, (off_t)(data - off), SEEK_CUR) < 0)
			get_fail("%s: seek: %s", name, strerror(errno));
		out->sparse = 1;
	}
	return data;
}

static void finish_output(struct output *out, uint64_t size)
{
	const char *name = out->path ? out->path : "stdout";

	if (!out->path)
		return;
	if (out->sparse && ftruncate(out->fd, (off_t)size) != 0)
		get_fail("%s: truncate: %s", name, strerror(errno));
	if (outfile_commit(&out->of) != 0)
		die("%s: %s", name, strerror(errno));
}

/* get --salvage: the damaged ranges, adjacent blocks joined, in order. */
struct salvage {
	struct salvage_range {
		uint64_t off, len;
		int error;
		char msg[160];
	} *r;
	size_t n, cap;
	uint64_t bytes;
};

static int salvage_note(void *ctx, uint64_t off, uint64_t len, int error,
			const char *msg)
{
	struct salvage *sv = ctx;
	struct salvage_range *last = sv->n ? &sv->r[sv->n - 1] : NULL;

	sv->bytes += len;
	if (last && last->off + last->len == off && last->error == error) {
		last->len += len;
		return 0;
	}
	if (sv->n == sv->cap) {
		size_t cap = sv->cap ? sv->cap * 2 : 16;
		struct salvage_range *r = realloc(sv->r, cap * sizeof(*r));

		if (!r)
			return -1;
		sv->r = r;
		sv->cap = cap;
	}
	last = &sv->r[sv->n++];
	last->off = off;
	last->len = len;
	last->error = error;
	snprintf(last->msg, sizeof(last->msg), "%s", msg);
	return 0;
}

/* The damaged ranges: a line each on stderr, or with --json the
 * "damaged" member of the report. */
static void salvage_print(const struct salvage *sv, FILE *json)
{
	char sym[32];

	for (size_t i = 0; i < sv->n; i++) {
		const struct salvage_range *r = &sv->r[i];

		if (json)
			fprintf(json, "%s{\"offset\": %" PRIu64 ", \"length\": "
				"%" PRIu64 ", \"error\": \"%s\"}", i ? ", " : "",
				r->off, r->len,
				err_symbol(sym, sizeof(sym), r->error));
		else
			fprintf(stderr, "%s: damaged: bytes %" PRIu64 "..%"
				PRIu64 " (%" PRIu64 " bytes) written as zeros: "
				"%s\n", util_prog, r->off, r->off + r->len,
				r->len, r->msg);
	}
}

int cmd_get(int argc, char **argv)
{
	static const int allow[] = {OPT_VERBOSE, OPT_JSON, OPT_SALVAGE,
				    CACHE_ALLOW, 0};
	struct salvage sv = {NULL, 0, 0, 0};
	struct common_opts o;
	struct output out;
	struct progress pg;
	char *path, *name, *buf;
	const char *dest;
	dd_reader *r = NULL;
	dd_store *s;
	uint64_t size, off = 0;
	double t0 = now_seconds();
	int rc;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 1, 2);
	split_snapref_or_die(argv[optind], &path, &name);
	dest = optind + 1 < argc ? argv[optind + 1] : NULL;
	/* an image is binary: as ddsend does, never onto a terminal */
	if ((!dest || strcmp(dest, "-") == 0) && isatty(STDOUT_FILENO))
		die("refusing to write a snapshot to a terminal (name a FILE, "
		    "or redirect stdout to a file or a pipe)");
	buf = io_buf;
	s = open_store(path, 0, 1);
	rc = dd_reader_open(&r, s, name);
	if (rc != 0)
		die_store(s, rc);
	size = dd_reader_size(r);

	/* The output is created only once the snapshot is known to exist. */
	open_output(&out, dest);
	get_out = &out;
	progress_init(&pg, name, size, o.verbose);
	while (off < size) {
		size_t want, got = 0;

		off = skip_holes(&out, r, off);
		progress_update(&pg, off);
		if (off >= size)
			break;
		want = size - off < GET_CHUNK ? (size_t)(size - off)
					      : GET_CHUNK;

		rc = o.salvage ? dd_reader_pread_salvage(r, buf, want, off,
							 &got, salvage_note,
							 &sv)
			       : dd_reader_pread(r, buf, want, off, &got);
		if (rc != 0)
			get_fail("%s", lib_msg(dd_reader_errmsg(r), rc));
		if (got == 0 || got > want)
			get_fail("%s@%s: snapshot ended early", path, name);
		write_chunk(&out, buf, got);
		off += got;
		progress_update(&pg, off);
	}
	finish_output(&out, size);
	get_out = NULL;
	progress_finish(&pg);
	if (o.json) {
		/* stdout carries the image when no FILE was named */
		FILE *f = out.path ? stdout : stderr;

		fputs("{\"snapshot\": ", f);
		json_string(f, name);
		fprintf(f, ", \"bytes\": %" PRIu64 ", \"seconds\": %.3f",
			size, now_seconds() - t0);
		if (o.salvage) {
			fprintf(f, ", \"damaged_bytes\": %" PRIu64
				", \"damaged\": [", sv.bytes);
			salvage_print(&sv, f);
			fputc(']', f);
		}
		fputs("}\n", f);
		fflush(f);
	} else if (o.verbose && !util_quiet) {
		fprintf(stderr, "%s: get %s: %" PRIu64 " bytes\n", util_prog,
			name, size);
	}
	dd_reader_close(r);
	cache_cli_close(s);
	if (sv.n && !o.json)
		salvage_print(&sv, NULL);
	free(sv.r);
	if (sv.n) {
		/* the image is whole but for the ranges listed */
		die("%s@%s: %zu damaged range%s (%" PRIu64 " bytes) written "
		    "as zeros", path, name, sv.n, sv.n == 1 ? "" : "s",
		    sv.bytes);
	}
	free(path);
	free(name);
	return 0;
}

/* ---- ls -----------------------------------------------------------------*/

/* Space of each listed snapshot (dd_snapshot_usage_get: a DDT lookup per
 * block reference, about 2 us each); unique_blocks UINT64_MAX when it went
 * away after the listing, or with --no-unique. */
static dd_snapshot_usage *ls_usage(dd_store *s, const dd_snapshot_info *list,
				   size_t count, int skip)
{
	dd_snapshot_usage *u = calloc(count ? count : 1, sizeof(*u));

	if (!u)
		die("out of memory");
	for (size_t i = 0; i < count; i++) {
		int rc;

		u[i].version = DD_SNAPSHOT_USAGE_VERSION;
		u[i].unique_blocks = UINT64_MAX;
		if (skip)
			continue;
		rc = dd_snapshot_usage_get(s, list[i].name, &u[i]);
		if (rc != 0 && rc != DD_ENOENT)
			die_store(s, rc);
	}
	return u;
}

/* The partial receives kept in a store (ddrecv -s), oldest first. */
struct ls_partials {
	char (*name)[DD_NAME_MAX + 1];
	char (*token)[128];
	size_t n;
};

static int ls_partial_add(const char *name, const char *token, void *ctx)
{
	struct ls_partials *p = ctx;
	void *nn = realloc(p->name, (p->n + 1) * sizeof(*p->name));
	void *nt = nn ? realloc(p->token, (p->n + 1) * sizeof(*p->token))
		      : NULL;

	if (nn)
		p->name = nn;
	if (!nt)
		die("out of memory");
	p->token = nt;
	snprintf(p->name[p->n], sizeof(*p->name), "%s", name);
	snprintf(p->token[p->n], sizeof(*p->token), "%s", token);
	p->n++;
	return 0;
}

/* Each kept partial receive (ddrecv -s) is one more element, after the
 * snapshots, with no name: {"name": null, "partial": true, "snapshot":
 * "the name it will have", "resume_token": "..."}. */
static void ls_json(const dd_snapshot_info *list,
		    const dd_snapshot_usage *u, size_t count,
		    const struct ls_partials *pa)
{
	char hex[65], when[40];
	size_t i;

	fputs("[", stdout);
	for (i = 0; i < count; i++) {
		const dd_snapshot_info *si = &list[i];

		fputs(i ? ",\n  {" : "\n  {", stdout);
		fputs("\"name\": ", stdout);
		json_string(stdout, si->name);
		printf(", \"size\": %" PRIu64 ", \"blocks\": %" PRIu64
		       ", \"zero_blocks\": %" PRIu64 ", \"ctime\": \"%s\""
		       ", \"ctime_epoch\": %" PRId64 ", \"digest\": \"%s\"",
		       si->size, si->blocks, si->zero_blocks,
		       iso8601_utc(when, sizeof(when), si->ctime), si->ctime,
		       hex_encode(hex, si->digest, sizeof(si->digest)));
		if (u[i].unique_blocks == UINT64_MAX)
			fputs(", \"unique_bytes\": null, \"unique_blocks\": "
			      "null}", stdout);
		else
			printf(", \"unique_bytes\": %" PRIu64 ", "
			       "\"unique_blocks\": %" PRIu64 "}",
			       u[i].unique_bytes, u[i].unique_blocks);
	}
	for (i = 0; i < pa->n; i++) {
		fputs(count || i ? ",\n  {" : "\n  {", stdout);
		fputs("\"name\": null, \"partial\": true, \"snapshot\": ",
		      stdout);
		json_string(stdout, pa->name[i]);
		fputs(", \"resume_token\": ", stdout);
		json_string(stdout, pa->token[i]);
		fputs("}", stdout);
	}
	fputs(count || pa->n ? "\n]\n" : "]\n", stdout);
}

static void ls_text(const dd_snapshot_info *list,
		    const dd_snapshot_usage *u, size_t count)
{
	char hex[65], when[40], uniq[32];
	int wname = 4, wsize = 4, wblocks = 6, wuniq = 6;
	size_t i;

	for (i = 0; i < count; i++) {
		char num[32];
		int n = (int)strlen(list[i].name);

		wname = n > wname ? n : wname;
		n = snprintf(num, sizeof(num), "%" PRIu64, list[i].size);
		wsize = n > wsize ? n : wsize;
		n = snprintf(num, sizeof(num), "%" PRIu64, list[i].blocks);
		wblocks = n > wblocks ? n : wblocks;
		n = snprintf(num, sizeof(num), "%" PRIu64, u[i].unique_bytes);
		wuniq = n > wuniq ? n : wuniq;
	}
	printf("%-*s  %*s  %*s  %*s  %-20s  %s\n", wname, "NAME", wsize,
	       "SIZE", wblocks, "BLOCKS", wuniq, "UNIQUE", "CTIME", "DIGEST");
	for (i = 0; i < count; i++) {
		const dd_snapshot_info *si = &list[i];

		if (u[i].unique_blocks == UINT64_MAX)
			snprintf(uniq, sizeof(uniq), "-");
		else
			snprintf(uniq, sizeof(uniq), "%" PRIu64,
				 u[i].unique_bytes);
		hex_encode(hex, si->digest, 8);
		printf("%-*s  %*" PRIu64 "  %*" PRIu64 "  %*s  %-20s  %s\n",
		       wname, si->name, wsize, si->size, wblocks, si->blocks,
		       wuniq, uniq, iso8601_utc(when, sizeof(when), si->ctime),
		       hex);
	}
}

int cmd_ls(int argc, char **argv)
{
	static const int allow[] = {OPT_JSON, OPT_NO_UNIQUE, CACHE_ALLOW, 0};
	struct common_opts o;
	dd_snapshot_info *list = NULL;
	dd_snapshot_usage *u;
	struct ls_partials pa = {NULL, NULL, 0};
	size_t count = 0;
	dd_store *s;
	int rc;

	s = open_store_arg(argc, argv, allow, &o, 1);
	rc = dd_snapshot_list(s, &list, &count);
	if (rc != 0)
		die_store(s, rc);
	u = ls_usage(s, list, count, o.no_unique);
	rc = dd_recv_partial_walk(s, ls_partial_add, &pa);
	if (rc != 0)
		die_store(s, rc);
	if (o.json) {
		ls_json(list, u, count, &pa);
	} else {
		ls_text(list, u, count);
		/* each kept partial receive (ddrecv -s) and how to finish it */
		for (size_t i = 0; i < pa.n; i++)
			printf("partial receive of %s: resume with "
			       "'ddsend -t %s STORE@SNAP | ddrecv -s %s', "
			       "or drop it with 'ddrecv -A %s'\n",
			       pa.name[i], pa.token[i], argv[optind],
			       argv[optind]);
	}
	free(pa.name);
	free(pa.token);
	free(u);
	dd_snapshot_list_free(list);
	cache_cli_close(s);
	return 0;
}

/* ---- rm -----------------------------------------------------------------*/

int cmd_rm(int argc, char **argv)
{
	static const int allow[] = {OPT_WAIT, OPT_JSON, CACHE_ALLOW, 0};
	struct common_opts o;
	char *path, *name;
	dd_store *s;
	int rc;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 1, 1);
	split_snapref_or_die(argv[optind], &path, &name);
	s = open_store(path, o.wait, 0);
	rc = dd_snapshot_delete(s, name);
	if (rc != 0)
		die_store(s, rc);
	if (o.json) {
		fputs("{\"snapshot\": ", stdout);
		json_string(stdout, name);
		fputs(", \"removed\": true}\n", stdout);
	}
	cache_cli_close(s);
	free(path);
	free(name);
	return 0;
}
