/*
 * version.c -- the run-time version, so a program can tell the header it
 * was built with (DD_VERSION_NUMBER) from the library it runs against.
 */
#include "dedup.h"

#define DD_STR_(x) #x
#define DD_STR(x) DD_STR_(x)

DD_API unsigned dd_version_number(void)
{
	return DD_VERSION_NUMBER;
}

DD_API const char *dd_version_string(void)
{
	return DD_STR(DD_VERSION_MAJOR) "." DD_STR(DD_VERSION_MINOR) "."
		DD_STR(DD_VERSION_PATCH);
}
