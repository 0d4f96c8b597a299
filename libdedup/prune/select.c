/*
 * select.c -- which snapshots retention rules keep (dd_prune_select): a
 * pure function of the rules and the creation times, with the semantics
 * of borg prune.  It needs no store; store/prune.c applies it to one.
 *
 * Snapshots are taken newest first.  Each rule in turn -- last, hourly,
 * daily, weekly, monthly, yearly -- walks them with the period of the
 * previous one in hand: a snapshot whose period differs from it is the
 * newest of a new period, and the rule keeps it unless an earlier rule
 * did.  Such a period is spent either way (the older snapshots of the same
 * period are not kept in its place), but only snapshots this rule keeps
 * count towards its N.  A rule that ran out of snapshots before N keeps
 * the oldest one too, unless it is kept already (borg's "[oldest]").
 *
 * Periods are calendar fields of local time (localtime_r: the TZ
 * variable) or UTC; weeks are ISO 8601 weeks (the ISO year and week of
 * strftime's %G-%V), so the days around New Year fall in the week they
 * share.  "last" has a period per snapshot: borg's per-second rule on
 * its microsecond times, where ours are whole seconds and may be equal.
 */
#include <stdlib.h>
#include <time.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/err.h"

typedef struct dd_prune_item {
	int64_t pi_time;
	size_t pi_index;
} dd_prune_item;

/* Newest first; of equal times, the later index first. */
static int dd_prune_item_cmp(const void *pa, const void *pb)
{
	const dd_prune_item *a = pa, *b = pb;

	if (a->pi_time != b->pi_time)
		return a->pi_time > b->pi_time ? -1 : 1;
	return a->pi_index > b->pi_index ? -1 : a->pi_index < b->pi_index;
}

static int64_t dd_floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* ISO 8601: weeks of a year, 53 when it ends on a Thursday or its
 * predecessor on a Wednesday (Dec 31 weekday, Sunday = 0). */
static int dd_iso_weeks(int64_t y)
{
	int64_t p = (y + dd_floor_div(y, 4) - dd_floor_div(y, 100) +
		     dd_floor_div(y, 400)) % 7;
	int64_t q = ((y - 1) + dd_floor_div(y - 1, 4) -
		     dd_floor_div(y - 1, 100) + dd_floor_div(y - 1, 400)) % 7;

	return 52 + ((p + 7) % 7 == 4 || (q + 7) % 7 == 3);
}

/* The ISO year * 100 + week of a calendar date. */
static int64_t dd_iso_week(const struct tm *tm)
{
	int64_t y = (int64_t)tm->tm_year + 1900;
	int wd = (tm->tm_wday + 6) % 7;           /* Monday = 0 */
	int w = (tm->tm_yday - wd + 10) / 7;

	if (w < 1) {
		y--;
		w = dd_iso_weeks(y);
	} else if (w > dd_iso_weeks(y)) {
		y++;
		w = 1;
	}
	return y * 100 + w;
}

/* The period of rule that time t falls in, as one number. */
static int dd_prune_period(int rule, int64_t t, int utc, int64_t *out)
{
	time_t tt = (time_t)t;
	struct tm tm;
	int64_t y;

	if ((int64_t)tt != t || !(utc ? gmtime_r(&tt, &tm)
				      : localtime_r(&tt, &tm)))
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "time %lld out of range", (long long)t);
	y = (int64_t)tm.tm_year + 1900;
	switch (rule) {
	case DD_PRUNE_HOURLY:
		*out = ((y * 100 + tm.tm_mon) * 100 + tm.tm_mday) * 100 +
		       tm.tm_hour;
		break;
	case DD_PRUNE_DAILY:
		*out = (y * 100 + tm.tm_mon) * 100 + tm.tm_mday;
		break;
	case DD_PRUNE_WEEKLY:
		*out = dd_iso_week(&tm);
		break;
	case DD_PRUNE_MONTHLY:
		*out = y * 100 + tm.tm_mon;
		break;
	default:
		*out = y;
	}
	return 0;
}

/* One rule over the items (newest first). */
static int dd_prune_rule(const dd_prune_item *it, size_t n, int rule,
			 int keep, int utc, dd_prune_mark *marks)
{
	unsigned kept = 0;
	int64_t last = 0, p = 0;
	size_t i;
	int rc;

	for (i = 0; i < n; i++) {
		dd_prune_mark *m = &marks[it[i].pi_index];

		if (rule == DD_PRUNE_LAST)
			p = (int64_t)i;
		else if ((rc = dd_prune_period(rule, it[i].pi_time, utc,
					       &p)) != 0)
			return rc;
		if (i > 0 && p == last)
			continue;
		last = p;
		if (m->rule != DD_PRUNE_NONE)
			continue;
		*m = (dd_prune_mark){.rule = rule, .rank = ++kept};
		if (keep != DD_PRUNE_ALL && kept == (unsigned)keep)
			return 0;
	}
	if (keep != DD_PRUNE_ALL && n > 0 &&
	    marks[it[n - 1].pi_index].rule == DD_PRUNE_NONE)
		marks[it[n - 1].pi_index] = (dd_prune_mark){
			.rule = rule, .rank = kept + 1, .oldest = 1};
	return 0;
}

int dd_prune_select(const dd_prune_opts *opts, const int64_t *times, size_t n,
		    dd_prune_mark *marks)
{
	dd_err *err = dd_thread_err();
	dd_prune_item *it;
	int keep[7] = {0}, any = 0, rc = 0;

	if (!opts || (n && (!times || !marks)))
		return dd_err_set(err, DD_EINVAL,
				  "dd_prune_select: NULL argument");
	if (opts->version == 0 || opts->version > DD_PRUNE_OPTS_VERSION)
		return dd_err_set(err, DD_EINVAL, "dd_prune_opts version %u not "
				  "supported (use DD_PRUNE_OPTS_INIT)",
				  opts->version);
	keep[DD_PRUNE_LAST] = opts->keep_last;
	keep[DD_PRUNE_HOURLY] = opts->keep_hourly;
	keep[DD_PRUNE_DAILY] = opts->keep_daily;
	keep[DD_PRUNE_WEEKLY] = opts->keep_weekly;
	keep[DD_PRUNE_MONTHLY] = opts->keep_monthly;
	keep[DD_PRUNE_YEARLY] = opts->keep_yearly;
	for (int r = DD_PRUNE_LAST; r <= DD_PRUNE_YEARLY; r++) {
		if (keep[r] < DD_PRUNE_ALL)
			return dd_err_set(err, DD_EINVAL, "keep count %d: must "
					  "be positive, 0 (off) or -1 (all)",
					  keep[r]);
		any |= keep[r] != 0;
	}
	if (!any)
		return dd_err_set(err, DD_EINVAL, "no keep rule given: it "
				  "would delete every snapshot");
	for (size_t i = 0; i < n; i++)
		marks[i] = (dd_prune_mark){.rule = DD_PRUNE_NONE};
	if (n == 0)
		return 0;
	it = dd_malloc(n * sizeof(*it));
	if (!it)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		it[i] = (dd_prune_item){times[i], i};
	qsort(it, n, sizeof(*it), dd_prune_item_cmp);
	for (int r = DD_PRUNE_LAST; !rc && r <= DD_PRUNE_YEARLY; r++)
		if (keep[r])
			rc = dd_prune_rule(it, n, r, keep[r], opts->utc, marks);
	dd_free(it);
	return rc;
}
