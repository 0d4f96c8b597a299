/*
 * test_prune.c -- the retention selection (prune/select.c,
 * dd_prune_select): against borg 1.2's own prune_split on 600 sets of
 * creation times in four time zones (tests/golden/prune_borg.txt, made by
 * gen_prune_borg.py), by hand on the cases that golden file leaves out
 * (equal times, the order of rules, ISO weeks across New Year), and on
 * bad arguments.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dedup.h"

#define MAXT 512

static const char *const rule_name[] = {
	"-", "secondly", "hourly", "daily", "weekly", "monthly", "yearly",
};

static void set_tz(const char *tz)
{
	setenv("TZ", tz, 1);
	tzset();
}

static dd_prune_opts opts6(const int k[6])
{
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;

	o.keep_last = k[0];
	o.keep_hourly = k[1];
	o.keep_daily = k[2];
	o.keep_weekly = k[3];
	o.keep_monthly = k[4];
	o.keep_yearly = k[5];
	return o;
}

/* "daily:3", "weekly[oldest]:2" or "-" for a mark. */
static void mark_str(char *buf, size_t len, const dd_prune_mark *m)
{
	if (m->rule == DD_PRUNE_NONE)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%s%s:%u", rule_name[m->rule],
			 m->oldest ? "[oldest]" : "", m->rank);
}

/* Reads one whitespace-separated list of numbers after `key `. */
static size_t read_nums(FILE *f, const char *key, int64_t *out, size_t max)
{
	static char line[1 << 16];
	size_t n = 0, klen = strlen(key);
	char *p, *end;

	assert_non_null(fgets(line, sizeof(line), f));
	assert_int_equal(strncmp(line, key, klen), 0);
	p = line + klen;
	for (;;) {
		long long v = strtoll(p, &end, 10);

		if (end == p)
			break;
		assert_true(n < max);
		out[n++] = v;
		p = end;
	}
	return n;
}

static void test_against_borg(void **state)
{
	static char line[1 << 16], tz[128], got[64];
	static int64_t times[MAXT];
	static dd_prune_mark marks[MAXT], marks_utc[MAXT];
	FILE *f = fopen(DD_GOLDEN_DIR "/prune_borg.txt", "r");
	int64_t k64[6];
	int k[6], cases = 0, end = -1, kept = 0, oldest = 0;

	(void)state;
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));  /* comment */
	while (fgets(line, sizeof(line), f)) {
		dd_prune_opts o;
		size_t n;
		char *p;

		if (sscanf(line, "end %d", &end) == 1)
			break;
		assert_int_equal(strncmp(line, "case ", 5), 0);
		assert_non_null(fgets(line, sizeof(line), f));
		assert_int_equal(sscanf(line, "tz %127s", tz), 1);
		assert_int_equal(read_nums(f, "keep", k64, 6), 6);
		for (int i = 0; i < 6; i++)
			k[i] = (int)k64[i];
		n = read_nums(f, "times", times, MAXT);
		o = opts6(k);
		set_tz(tz);
		assert_int_equal(dd_prune_select(&o, times, n, marks), 0);
		if (strcmp(tz, "UTC0") == 0) {
			/* utc = 1 is the same as local time in UTC */
			o.utc = 1;
			set_tz("CET-1CEST,M3.5.0,M10.5.0/3");
			assert_int_equal(dd_prune_select(&o, times, n,
							 marks_utc), 0);
			assert_memory_equal(marks, marks_utc,
					    n * sizeof(*marks));
		}
		assert_non_null(fgets(line, sizeof(line), f));
		assert_int_equal(strncmp(line, "expect", 6), 0);
		p = strtok(line + 6, " \n");
		for (size_t i = 0; i < n; i++) {
			assert_non_null(p);
			mark_str(got, sizeof(got), &marks[i]);
			if (strcmp(got, p) != 0)
				fail_msg("case %d (TZ %s), time %zu (%lld): "
					 "borg %s, got %s", cases, tz, i,
					 (long long)times[i], p, got);
			kept += marks[i].rule != DD_PRUNE_NONE;
			oldest += marks[i].oldest;
			p = strtok(NULL, " \n");
		}
		assert_null(p);
		cases++;
	}
	fclose(f);
	assert_int_equal(end, cases);
	assert_true(cases >= 600);
	/* the golden file exercises both kinds of keep */
	assert_true(kept > 1000);
	assert_true(oldest > 50);
	print_message("%d cases, %d kept (%d as a rule's oldest), as borg\n",
		      cases, kept, oldest);
	set_tz("UTC0");
}

/* UTC times of a calendar moment. */
static int64_t at(int y, int mon, int d, int h, int mi)
{
	struct tm tm = {.tm_year = y - 1900, .tm_mon = mon - 1, .tm_mday = d,
			.tm_hour = h, .tm_min = mi};

	return (int64_t)timegm(&tm);
}

static void select_ok(const dd_prune_opts *o, const int64_t *t, size_t n,
		      dd_prune_mark *m)
{
	assert_int_equal(dd_prune_select(o, t, n, m), 0);
}

static void test_keep_last(void **state)
{
	int64_t t[5] = {at(2024, 5, 1, 10, 0), at(2024, 5, 3, 10, 0),
			at(2024, 5, 2, 10, 0), at(2024, 5, 5, 10, 0),
			at(2024, 5, 4, 10, 0)};
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;
	dd_prune_mark m[5];

	(void)state;
	o.keep_last = 2;
	select_ok(&o, t, 5, m);
	/* the two newest, newest first; no "oldest": two were there */
	assert_int_equal(m[3].rule, DD_PRUNE_LAST);
	assert_int_equal(m[3].rank, 1);
	assert_int_equal(m[4].rule, DD_PRUNE_LAST);
	assert_int_equal(m[4].rank, 2);
	assert_int_equal(m[0].rule + m[1].rule + m[2].rule, DD_PRUNE_NONE);
	/* more than there are: all, none as "oldest" (each is a period) */
	o.keep_last = 9;
	select_ok(&o, t, 5, m);
	for (int i = 0; i < 5; i++)
		assert_int_equal(m[i].oldest, 0);
	o.keep_last = DD_PRUNE_ALL;
	select_ok(&o, t, 5, m);
	for (int i = 0; i < 5; i++)
		assert_int_equal(m[i].rule, DD_PRUNE_LAST);
}

/* Equal times: the later in the array is the newer, and keep_last counts
 * snapshots, not seconds. */
static void test_equal_times(void **state)
{
	int64_t t[4] = {1000, 1000, 1000, 999};
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;
	dd_prune_mark m[4];

	(void)state;
	o.keep_last = 2;
	select_ok(&o, t, 4, m);
	assert_int_equal(m[2].rule, DD_PRUNE_LAST);
	assert_int_equal(m[2].rank, 1);
	assert_int_equal(m[1].rule, DD_PRUNE_LAST);
	assert_int_equal(m[1].rank, 2);
	assert_int_equal(m[0].rule, DD_PRUNE_NONE);
	assert_int_equal(m[3].rule, DD_PRUNE_NONE);
	/* daily: the newest of the day is the last of the equal ones */
	o = (dd_prune_opts)DD_PRUNE_OPTS_INIT;
	o.keep_daily = 1;
	o.utc = 1;
	select_ok(&o, t, 4, m);
	assert_int_equal(m[2].rule, DD_PRUNE_DAILY);
	assert_int_equal(m[0].rule + m[1].rule + m[3].rule, DD_PRUNE_NONE);
}

/* A snapshot an earlier rule kept spends its period for a later rule
 * without counting for it; the rule then keeps its oldest. */
static void test_rule_order(void **state)
{
	int64_t t[3] = {at(2024, 5, 1, 8, 0), at(2024, 5, 2, 8, 0),
			at(2024, 5, 2, 20, 0)};
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;
	dd_prune_mark m[3];

	(void)state;
	o.keep_last = 1;
	o.keep_daily = 1;
	o.utc = 1;
	select_ok(&o, t, 3, m);
	assert_int_equal(m[2].rule, DD_PRUNE_LAST);
	/* May 2 is spent by the one keep_last kept, so the daily rule's
	 * one day is May 1 -- not the morning of May 2 */
	assert_int_equal(m[1].rule, DD_PRUNE_NONE);
	assert_int_equal(m[0].rule, DD_PRUNE_DAILY);
	assert_int_equal(m[0].rank, 1);
	assert_int_equal(m[0].oldest, 0);
	/* daily 2 over two days: only one day is left for it, then the
	 * oldest snapshot is already kept: nothing more */
	o.keep_daily = 2;
	select_ok(&o, t, 3, m);
	assert_int_equal(m[1].rule, DD_PRUNE_NONE);
	/* weekly 3 alone, one week: the newest, then the oldest as such */
	o = (dd_prune_opts)DD_PRUNE_OPTS_INIT;
	o.keep_weekly = 3;
	o.utc = 1;
	select_ok(&o, t, 3, m);
	assert_int_equal(m[2].rule, DD_PRUNE_WEEKLY);
	assert_int_equal(m[2].rank, 1);
	assert_int_equal(m[1].rule, DD_PRUNE_NONE);
	assert_int_equal(m[0].rule, DD_PRUNE_WEEKLY);
	assert_int_equal(m[0].rank, 2);
	assert_int_equal(m[0].oldest, 1);
}

/* ISO weeks: Dec 29 2025 .. Jan 4 2026 is week 1 of 2026; Jan 1 2021
 * (a Friday) is in week 53 of 2020, with Dec 28 2020. */
static void test_iso_weeks(void **state)
{
	int64_t a[2] = {at(2025, 12, 29, 12, 0), at(2026, 1, 4, 12, 0)};
	int64_t b[2] = {at(2020, 12, 28, 12, 0), at(2021, 1, 1, 12, 0)};
	int64_t c[2] = {at(2026, 1, 4, 12, 0), at(2026, 1, 5, 12, 0)};
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;
	dd_prune_mark m[2];
	char buf[32];
	struct tm tm;
	time_t tt;

	(void)state;
	o.keep_weekly = DD_PRUNE_ALL;
	o.utc = 1;
	select_ok(&o, a, 2, m);
	assert_int_equal(m[0].rule, DD_PRUNE_NONE);  /* same week */
	select_ok(&o, b, 2, m);
	assert_int_equal(m[0].rule, DD_PRUNE_NONE);
	select_ok(&o, c, 2, m);                      /* Sunday, Monday */
	assert_int_equal(m[0].rule, DD_PRUNE_WEEKLY);
	assert_int_equal(m[1].rule, DD_PRUNE_WEEKLY);
	/* and the year rule is the calendar year: two years here */
	o = (dd_prune_opts)DD_PRUNE_OPTS_INIT;
	o.keep_yearly = DD_PRUNE_ALL;
	o.utc = 1;
	select_ok(&o, b, 2, m);
	assert_int_equal(m[0].rule, DD_PRUNE_YEARLY);
	/* the week the selection used is strftime's %G-%V, every day for
	 * 40 years: consecutive days in one week share it, and a new week
	 * starts exactly on Mondays */
	o = (dd_prune_opts)DD_PRUNE_OPTS_INIT;
	o.keep_weekly = DD_PRUNE_ALL;
	o.utc = 1;
	for (int64_t d = at(2000, 1, 1, 12, 0); d < at(2040, 1, 1, 12, 0);
	     d += 86400) {
		int64_t pair[2] = {d, d + 86400};

		tt = (time_t)(d + 86400);
		gmtime_r(&tt, &tm);
		strftime(buf, sizeof(buf), "%a", &tm);
		select_ok(&o, pair, 2, m);
		if ((m[0].rule == DD_PRUNE_WEEKLY) !=
		    (strcmp(buf, "Mon") == 0))
			fail_msg("day %lld: week change %d, weekday %s",
				 (long long)d, m[0].rule, buf);
	}
}

/* Local time: 23:30 UTC is the next day in Berlin. */
static void test_local_time(void **state)
{
	int64_t t[2] = {at(2024, 5, 1, 21, 0), at(2024, 5, 1, 23, 30)};
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;
	dd_prune_mark m[2];

	(void)state;
	o.keep_daily = DD_PRUNE_ALL;
	set_tz("CET-1CEST,M3.5.0,M10.5.0/3");
	select_ok(&o, t, 2, m);
	assert_int_equal(m[0].rule, DD_PRUNE_DAILY);  /* May 1 and May 2 */
	o.utc = 1;
	select_ok(&o, t, 2, m);
	assert_int_equal(m[0].rule, DD_PRUNE_NONE);   /* both May 1 */
	set_tz("UTC0");
}

static void test_bad_arguments(void **state)
{
	int64_t t[1] = {1};
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;
	dd_prune_mark m[1];

	(void)state;
	/* no rule: would delete everything */
	assert_int_equal(dd_prune_select(&o, t, 1, m), DD_EINVAL);
	assert_non_null(strstr(dd_last_errmsg(), "DD_EINVAL: no keep rule"));
	o.keep_daily = -2;
	assert_int_equal(dd_prune_select(&o, t, 1, m), DD_EINVAL);
	o.keep_daily = 1;
	assert_int_equal(dd_prune_select(NULL, t, 1, m), DD_EINVAL);
	assert_int_equal(dd_prune_select(&o, NULL, 1, m), DD_EINVAL);
	assert_int_equal(dd_prune_select(&o, t, 1, NULL), DD_EINVAL);
	assert_int_equal(dd_prune_select(&o, NULL, 0, NULL), 0);
	o.version = 0;
	assert_int_equal(dd_prune_select(&o, t, 1, m), DD_EINVAL);
	o.version = DD_PRUNE_OPTS_VERSION + 1;
	assert_int_equal(dd_prune_select(&o, t, 1, m), DD_EINVAL);
	/* a time no calendar holds */
	o.version = DD_PRUNE_OPTS_VERSION;
	t[0] = INT64_MAX;
	assert_int_equal(dd_prune_select(&o, t, 1, m), DD_EINVAL);
	/* but keep_last needs no calendar */
	o.keep_daily = 0;
	o.keep_last = 1;
	assert_int_equal(dd_prune_select(&o, t, 1, m), 0);
	assert_int_equal(m[0].rule, DD_PRUNE_LAST);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_borg),
		cmocka_unit_test(test_keep_last),
		cmocka_unit_test(test_equal_times),
		cmocka_unit_test(test_rule_order),
		cmocka_unit_test(test_iso_weeks),
		cmocka_unit_test(test_local_time),
		cmocka_unit_test(test_bad_arguments),
	};

	set_tz("UTC0");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
