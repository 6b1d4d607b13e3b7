/*
 * mysql.h - the MySQL/MariaDB backend (mysql.c): user-level locks
 * (GET_LOCK) through MariaDB Connector/C (docs/MYSQL.md). Its one entry:
 * the ops that src/backends.c lists for mysql:// and mariadb:// URLs.
 */
#ifndef DLOCK_MYSQL_MYSQL_H
#define DLOCK_MYSQL_MYSQL_H

#include "core/backend.h"

extern const dlock__backend_ops dlock__mysql_backend;

#endif
