/*
 * url.h - what the dlock command needs to know about backend URLs: where the
 * secret sits (to hide it in messages and in argv), the user name (to pair
 * with a password from elsewhere), and the scheme. Pure functions.
 */
#ifndef DLOCK_CLI_URL_H
#define DLOCK_CLI_URL_H

#include <stdbool.h>
#include <stddef.h>

/* The secret part of the URL's userinfo: the password after "user:", or the
 * whole userinfo when it has no ':' (some clients read a lone userinfo as a
 * password, so it is hidden too). False when the URL has no userinfo or the
 * secret is empty. */
bool cli_url_secret_span(const char *url, size_t *off, size_t *len);

/* True when the URL carries a password ("user:password@" with a non-empty
 * password). */
bool cli_url_has_password(const char *url);

/* The URL with its secret replaced by "***"; malloc'd, NULL when out of
 * memory. */
char *cli_url_redact(const char *url);

/* The percent-decoded user name of the URL (the part before ':' in the
 * userinfo, or a lone userinfo); malloc'd; NULL when there is none. */
char *cli_url_user(const char *url);

/* The percent-decoded password of the URL, or NULL; malloc'd. */
char *cli_url_password(const char *url);

/* The URL without its "userinfo@" part; malloc'd, NULL when out of memory.
 * For a password that comes from elsewhere: the library wants either a
 * complete user:password in the URL or none. */
char *cli_url_without_userinfo(const char *url);

/* When `detail` (a library message) starts with the URL's own address,
 * "host:port: " (the port may be the default one the URL leaves out), the
 * number of bytes of that prefix; else 0. Lets a message that leads with
 * the URL avoid naming the address twice. */
size_t cli_url_peer_prefix(const char *url, const char *detail);

/* True for "rediss://" or "etcds://" (TLS), matched without regard to case. */
bool cli_url_is_tls(const char *url);

/* Copies `in` to out[outlen] as one line: the secret of every URL-shaped
 * piece becomes "***" (as cli_redact_urls_in_text, by its position),
 * control bytes become spaces. Never searches for a secret's text.
 * Always NUL-terminates (cuts when out is too small). */
void cli_one_line(const char *in, char *out, size_t outlen);

/* Rewrites text[] in place so that every URL-shaped piece in it
 * ("scheme://userinfo@...") shows "***" for its secret, as
 * cli_url_redact() would. For messages that quote raw arguments (a usage
 * error may quote a URL given where something else was expected). */
void cli_redact_urls_in_text(char *text);

/* The same for one raw argument: a URL in it runs to the argument's end, so
 * its secret reaches to the last '@' even across spaces or quotes. */
void cli_redact_url_arg(char *arg);

#endif /* DLOCK_CLI_URL_H */
