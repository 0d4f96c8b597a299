/*
 * holder.c -- this process's name for lock holders (holder.h).
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/holder.h"

void dd_holder_ident(char *buf, size_t len)
{
	char host[256] = "?", when[32] = "?";
	time_t t = time(NULL);
	struct tm tm;

	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = 0;
	if (gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(buf, len, "pid %ld on %s since %s", (long)getpid(), host,
		 when);
}
