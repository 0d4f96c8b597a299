/*
 * util.c -- helpers shared by the commands; see util.h.
 */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dedup.h"

const char *util_prog = "dedup";

void util_set_prog(const char *argv0)
{
	const char *slash;

	if (!argv0 || !*argv0)
		return;
	slash = strrchr(argv0, '/');
	util_prog = slash && slash[1] ? slash + 1 : argv0;
}

/* ---- messages -----------------------------------------------------------*/

/* One line: newlines and other control characters in the text become
 * spaces so that a script reading stderr sees exactly one line. */
static void vmsg(const char *suffix, const char *fmt, va_list ap)
{
	char buf[2048];
	char *p;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	for (p = buf; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
	fflush(stdout);
	fprintf(stderr, "%s: %s%s\n", util_prog, buf, suffix ? suffix : "");
	fflush(stderr);
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(NULL, fmt, ap);
	va_end(ap);
	exit(1);
}

void die_usage(const char *fmt, ...)
{
	char hint[128];
	va_list ap;

	snprintf(hint, sizeof(hint), " (try '%s --help')", util_prog);
	va_start(ap, fmt);
	vmsg(hint, fmt, ap);
	va_end(ap);
	exit(EXIT_USAGE);
}

void warnmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(NULL, fmt, ap);
	va_end(ap);
}

const char *lib_msg(const char *msg, int rc)
{
	if (msg && *msg)
		return msg;
	return dd_strerror(rc);
}

/* ---- parsing ------------------------------------------------------------*/

struct size_suffix {
	const char *s;
	unsigned shift;
};

static const struct size_suffix size_suffixes[] = {
	{"", 0},
	{"K", 10}, {"k", 10}, {"KiB", 10},
	{"M", 20}, {"m", 20}, {"MiB", 20},
	{"G", 30}, {"g", 30}, {"GiB", 30},
	{"T", 40}, {"t", 40}, {"TiB", 40},
};

int parse_wait(const char *arg)
{
	char *end;
	double secs;

	if (!arg)
		return -1;
	errno = 0;
	secs = strtod(arg, &end);
	if (errno || end == arg || *end || !(secs > 0) || secs > 86400)
		die_usage("--wait=%.40s: SECONDS must be a positive number up "
			  "to 86400", arg);
	return secs * 1000 < 1 ? 1 : (int)(secs * 1000);
}

int parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;
	size_t i;

	if (!s || !(*p >= '0' && *p <= '9'))
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	for (i = 0; i < sizeof(size_suffixes) / sizeof(size_suffixes[0]); i++) {
		unsigned sh = size_suffixes[i].shift;

		if (strcmp(p, size_suffixes[i].s) != 0)
			continue;
		if (sh && v > (UINT64_MAX >> sh))
			return -1;
		*out = v << sh;
		return 0;
	}
	return -1;
}

int parse_size_list(const char *s, uint64_t *out, size_t max, size_t *n,
		    const char **bad)
{
	const char *p = s;
	char item[64];

	*n = 0;
	for (;;) {
		size_t len = strcspn(p, ",");

		*bad = p;
		if (*n == max || len == 0 || len >= sizeof(item))
			return -1;
		memcpy(item, p, len);
		item[len] = '\0';
		if (parse_size(item, &out[*n]) != 0)
			return -1;
		(*n)++;
		if (p[len] == '\0')
			return 0;
		p += len + 1;
	}
}

int parse_compress_spec(const char *s, int *codec, int *level)
{
	char *end;
	long lvl;

	if (strcmp(s, "none") == 0 || strcmp(s, "zstd") == 0) {
		*codec = s[0] == 'z' ? DD_COMPRESS_ZSTD : DD_COMPRESS_NONE;
		*level = 0;
		return 0;
	}
	if (strncmp(s, "zstd:", 5) != 0 || !(s[5] >= '0' && s[5] <= '9'))
		return -1;
	errno = 0;
	lvl = strtol(s + 5, &end, 10);
	if (errno || *end || lvl < 1 || lvl > 19)
		return -2;
	*codec = DD_COMPRESS_ZSTD;
	*level = (int)lvl;
	return 0;
}

char *compress_spec_name(char *buf, size_t len, int codec, int level)
{
	if (codec == DD_COMPRESS_NONE)
		snprintf(buf, len, "none");
	else if (codec == DD_COMPRESS_ZSTD)
		snprintf(buf, len, "zstd:%d", level ? level : 1);
	else
		snprintf(buf, len, "unknown(%d)", codec);
	return buf;
}

int block_size_valid(uint64_t v)
{
	return v >= DD_BLOCK_SIZE_MIN && v <= DD_BLOCK_SIZE_MAX &&
	       (v & (v - 1)) == 0;
}

int parse_chunker(const char *s)
{
	if (!strcmp(s, "fixed"))
		return DD_CHUNKER_FIXED;
	if (!strcmp(s, "fastcdc"))
		return DD_CHUNKER_FASTCDC;
	return -1;
}

const char *chunker_name(int chunker)
{
	return chunker == DD_CHUNKER_FIXED ? "fixed" :
	       chunker == DD_CHUNKER_FASTCDC ? "fastcdc" : "unknown";
}

int chunker_size_valid(int chunker, uint64_t v)
{
	if (chunker == DD_CHUNKER_FASTCDC)
		return v >= DD_FASTCDC_AVG_MIN && v <= DD_FASTCDC_AVG_MAX &&
		       (v & (v - 1)) == 0;
	return block_size_valid(v);
}

int split_snapref(const char *arg, char **store, char **name,
		  const char **why)
{
	const char *at = strrchr(arg, '@');
	char *s, *n;

	if (!at) {
		*why = "expected STORE@NAME";
		return -1;
	}
	if (at == arg) {
		*why = "empty store path in STORE@NAME";
		return -1;
	}
	if (!at[1]) {
		*why = "empty snapshot name in STORE@NAME";
		return -1;
	}
	if (dd_name_check(at + 1) != 0) {
		*why = "invalid snapshot name (1-255 bytes; no '/', control "
		       "characters, '.' or '..')";
		return -1;
	}
	s = strndup(arg, (size_t)(at - arg));
	n = strdup(at + 1);
	if (!s || !n) {
		free(s);
		free(n);
		*why = "out of memory";
		return -1;
	}
	*store = s;
	*name = n;
	return 0;
}

/* The last split, kept reachable so a die() after it is not a leak. */
static char *volatile snapref_store, *volatile snapref_name;

void split_snapref_or_die(const char *arg, char **store, char **name)
{
	const char *why = NULL;

	if (split_snapref(arg, store, name, &why) != 0)
		die_usage("'%.300s': %s", arg, why);
	snapref_store = *store;
	snapref_name = *name;
}

/* ---- formatting ---------------------------------------------------------*/

char *human_size(char *buf, size_t len, uint64_t bytes)
{
	static const char *const units[] = {
		"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"
	};
	double v = (double)bytes;
	unsigned u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%u B", (unsigned)bytes);
		return buf;
	}
	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	if ((bytes & ((1ull << (10 * u)) - 1)) == 0)
		snprintf(buf, len, "%.0f %s", v, units[u]);
	else if (v < 10.0)
		snprintf(buf, len, "%.2f %s", v, units[u]);
	else if (v < 100.0)
		snprintf(buf, len, "%.1f %s", v, units[u]);
	else
		snprintf(buf, len, "%.0f %s", v, units[u]);
	return buf;
}

char *nicenum(char *buf, size_t len, uint64_t n)
{
	static const char units[] = "KMGTPE";
	double v = (double)n;
	unsigned u = 0;

	if (n < 1024) {
		snprintf(buf, len, "%u", (unsigned)n);
		return buf;
	}
	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	/* Whole multiples print without decimals, as zfs_nicenum does. */
	if ((n & ((1ull << (10 * u)) - 1)) == 0)
		snprintf(buf, len, "%.0f%c", v, units[u - 1]);
	else if (v < 10.0)
		snprintf(buf, len, "%.2f%c", v, units[u - 1]);
	else if (v < 100.0)
		snprintf(buf, len, "%.1f%c", v, units[u - 1]);
	else
		snprintf(buf, len, "%.0f%c", v, units[u - 1]);
	return buf;
}

/* Length of the valid UTF-8 sequence at p, or 0 when it is not one. */
static size_t utf8_seq_len(const unsigned char *p)
{
	unsigned char c = p[0];
	size_t n, i;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	for (i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

void json_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputc('"', f);
	while (*p) {
		size_t n;

		switch (*p) {
		case '"':  fputs("\\\"", f); p++; continue;
		case '\\': fputs("\\\\", f); p++; continue;
		case '\n': fputs("\\n", f); p++; continue;
		case '\r': fputs("\\r", f); p++; continue;
		case '\t': fputs("\\t", f); p++; continue;
		case '\b': fputs("\\b", f); p++; continue;
		case '\f': fputs("\\f", f); p++; continue;
		default:
			break;
		}
		if (*p < 0x20 || *p == 0x7f) {
			fprintf(f, "\\u%04x", *p);
			p++;
			continue;
		}
		n = utf8_seq_len(p);
		if (n == 0) {
			fputs("\\ufffd", f);
			p++;
			continue;
		}
		fwrite(p, 1, n, f);
		p += n;
	}
	fputc('"', f);
}

void json_double(FILE *f, const char *key, double v, const char *sep)
{
	/* JSON has no NaN or infinity: an undefined ratio is null. */
	if (isfinite(v))
		fprintf(f, "\"%s\": %.17g%s", key, v, sep);
	else
		fprintf(f, "\"%s\": null%s", key, sep);
}

char *hex_encode(char *out, const uint8_t *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
	return out;
}

char *iso8601_utc(char *buf, size_t len, int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!gmtime_r(&tt, &tm) ||
	    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, len, "@%lld", (long long)t);
	return buf;
}

double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- I/O ----------------------------------------------------------------*/

ssize_t read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- progress -----------------------------------------------------------*/

#define PROGRESS_INTERVAL 0.25

int util_quiet;

void progress_init(struct progress *p, const char *label, uint64_t total,
		   int force)
{
	memset(p, 0, sizeof(*p));
	p->tty = isatty(STDERR_FILENO);
	p->enabled = !util_quiet && (force || p->tty);
	p->label = label ? label : "";
	p->total = total;
	p->start = now_seconds();
	p->last_draw = p->start;
}

static void fmt_eta(char *buf, size_t len, double secs)
{
	unsigned long s = secs > 0 && secs < 1e9 ? (unsigned long)secs : 0;

	if (s >= 3600)
		snprintf(buf, len, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60,
			 s % 60);
	else
		snprintf(buf, len, "%lu:%02lu", s / 60, s % 60);
}

static void progress_draw(struct progress *p, double now, int final)
{
	char line[256], done[32], total[32], eta[32];
	double elapsed = now - p->start;
	double rate = elapsed > 0 ? (double)p->done / elapsed / 1048576.0 : 0;
	int n;

	human_size(done, sizeof(done), p->done);
	if (p->total) {
		double frac = (double)p->done / (double)p->total;

		human_size(total, sizeof(total), p->total);
		if (final || rate <= 0 || p->done >= p->total)
			fmt_eta(eta, sizeof(eta), final ? elapsed : 0);
		else
			fmt_eta(eta, sizeof(eta), (double)(p->total - p->done)
				/ (rate * 1048576.0));
		n = snprintf(line, sizeof(line),
			     "%s%s%s / %s (%3.0f%%)  %.1f MiB/s  %s %s",
			     p->label, *p->label ? ": " : "", done, total,
			     frac > 1 ? 100.0 : frac * 100.0, rate,
			     final ? "in" : "ETA", eta);
	} else {
		fmt_eta(eta, sizeof(eta), elapsed);
		n = snprintf(line, sizeof(line), "%s%s%s  %.1f MiB/s  %s",
			     p->label, *p->label ? ": " : "", done, rate, eta);
	}
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = (int)sizeof(line) - 1;
	/* A log gets whole lines; a terminal one line redrawn, padded with
	 * spaces to erase the tail of a longer previous one. */
	if (!p->tty)
		fprintf(stderr, "%s\n", line);
	else
		fprintf(stderr, "\r%s%*s", line,
			p->last_width > (size_t)n
				? (int)(p->last_width - (size_t)n) : 0, "");
	fflush(stderr);
	p->last_width = (size_t)n;
	p->last_draw = now;
	p->drawn = 1;
}

void progress_update(struct progress *p, uint64_t done)
{
	double now;

	p->done = done;
	if (!p->enabled)
		return;
	now = now_seconds();
	if (now - p->last_draw < (p->tty ? PROGRESS_INTERVAL
				     : PROGRESS_LOG_SECONDS))
		return;
	progress_draw(p, now, 0);
}

void progress_finish(struct progress *p)
{
	if (!p->enabled)
		return;
	progress_draw(p, now_seconds(), 1);
	if (p->tty)
		fputc('\n', stderr);
	fflush(stderr);
	p->enabled = 0;
}

int progress_lib_cb(void *ctx, uint64_t done, uint64_t total)
{
	struct progress *p = ctx;

	if (total)
		p->total = total;
	progress_update(p, done);
	return 0;
}

FILE *summary_open(const char *path)
{
	FILE *f;

	if (!path)
		return stderr;
	if (strcmp(path, "-") == 0)
		return stdout;
	f = fopen(path, "we");
	if (!f)
		die("cannot create '%.300s': %s", path, strerror(errno));
	return f;
}

void summary_close(FILE *f, const char *path)
{
	int bad = fflush(f) != 0 || ferror(f);

	if (f != stderr && f != stdout && fclose(f) != 0)
		bad = 1;
	if (bad)
		die("write '%.300s': %s", path ? path : "stderr",
		    strerror(errno));
}

void die_bad_option(const char *subcmd, int c, char **argv)
{
	const char *arg = argv[optind - 1];
	const char *sep = subcmd ? ": " : "";
	char shortopt[3] = {'-', 0, 0};

	if (!subcmd)
		subcmd = "";
	/* For a short option, argv[optind - 1] may be a group like "-vx". */
	if (optopt > 0 && optopt < 256 && arg[1] != '-') {
		shortopt[1] = (char)optopt;
		arg = shortopt;
	}
	if (c == ':')
		die_usage("%s%soption '%s' needs an argument", subcmd, sep, arg);
	die_usage("%s%sunknown option '%s'", subcmd, sep, arg);
}

const char *best_errmsg(const char *handle_msg, int rc)
{
	if (handle_msg && *handle_msg && strcmp(handle_msg, "no error") != 0)
		return handle_msg;
	if (strcmp(dd_last_errmsg(), "no error") != 0)
		return dd_last_errmsg();
	return dd_strerror(rc);
}

_Noreturn void print_tool_version(const char *prog)
{
	printf("%s (libdedup) %d.%d.%d\n", prog, DD_VERSION_MAJOR,
	       DD_VERSION_MINOR, DD_VERSION_PATCH);
	if (dd_version_number() != DD_VERSION_NUMBER)
		printf("running with library %s\n", dd_version_string());
	exit(0);
}

/* ---- outputs that look whole only once they are ----------------------------*/

/* Removes the temporary files ".NAME.ddtmp.PID" of earlier writes of
 * this output whose process is gone (killed before it could remove its
 * own): only regular files of this user, named for this output, whose
 * PID names no running process (kill(2) says ESRCH; a PID reused since
 * keeps its file, and so does one of another host or PID namespace that
 * happens to run).  Best effort: a failure leaves the file. */
static void outfile_clean_stale(const char *path, size_t dlen)
{
	char dirpath[4096], prefix[512];
	struct dirent *de;
	size_t plen;
	DIR *d;

	if (dlen >= sizeof(dirpath) ||
	    snprintf(prefix, sizeof(prefix), ".%s.ddtmp.", path + dlen) >=
		    (int)sizeof(prefix))
		return;
	if (dlen)
		snprintf(dirpath, sizeof(dirpath), "%.*s", (int)dlen, path);
	else
		snprintf(dirpath, sizeof(dirpath), ".");
	plen = strlen(prefix);
	d = opendir(dirpath);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		const char *num = de->d_name + plen;
		char *end;
		long pid;
		struct stat st;

		if (strncmp(de->d_name, prefix, plen) != 0 || !*num ||
		    *num == '-' || *num == '+')
			continue;
		errno = 0;
		pid = strtol(num, &end, 10);
		if (errno || *end || pid <= 0 || pid == (long)getpid())
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode) || st.st_uid != geteuid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}

int outfile_open(struct outfile *of, const char *path, int flags)
{
	const char *slash = strrchr(path, '/');
	size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
	struct stat st;
	size_t len;

	memset(of, 0, sizeof(*of));
	of->fd = -1;
	of->path = path;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		/* a device or a FIFO: in place, as the caller documents */
		of->fd = open(path, flags | O_CLOEXEC);
		return of->fd < 0 ? -1 : 0;
	}
	outfile_clean_stale(path, dlen);
	len = strlen(path) + 32;
	of->tmp = malloc(len);
	if (!of->tmp)
		return -1;
	snprintf(of->tmp, len, "%.*s.%s.ddtmp.%ld", (int)dlen, path,
		 path + dlen, (long)getpid());
	of->fd = open(of->tmp, flags | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (of->fd < 0) {
		free(of->tmp);
		of->tmp = NULL;
		return -1;
	}
	of->regular = 1;
	return 0;
}

int outfile_commit(struct outfile *of)
{
	int fd = of->fd, rc = 0, e;

	of->fd = -1;
	if (fsync(fd) != 0 && errno != EINVAL)
		rc = -1;
	if (close(fd) != 0)
		rc = -1;
	if (!rc && of->tmp && rename(of->tmp, of->path) != 0)
		rc = -1;
	if (rc) {
		e = errno;
		outfile_abort(of);
		errno = e;
		return -1;
	}
	free(of->tmp);
	of->tmp = NULL;
	return 0;
}

void outfile_abort(struct outfile *of)
{
	if (of->fd >= 0)
		close(of->fd);
	of->fd = -1;
	if (of->tmp)
		unlink(of->tmp);
	free(of->tmp);
	of->tmp = NULL;
}
