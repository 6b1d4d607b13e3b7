/*
 * postgres.h - the PostgreSQL backend (postgres.c): session-level advisory
 * locks through libpq (docs/POSTGRES.md). Its one entry: the ops that
 * src/backends.c lists for postgres:// and postgresql:// URLs.
 */
#ifndef DLOCK_POSTGRES_POSTGRES_H
#define DLOCK_POSTGRES_POSTGRES_H

#include "core/backend.h"

extern const dlock__backend_ops dlock__postgres_backend;

#endif
