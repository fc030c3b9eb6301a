/* Option parsing shared by the commands: strict integer and float parsing with a message naming the
 * option. */
#ifndef DSK_COMMON_CLI_H
#define DSK_COMMON_CLI_H

int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *opt, const char *s, double *out);

#endif
