/* The git commit a kit is built from (recorded in the manifest's source.git). */
#ifndef DSK_BUILDER_GIT_H
#define DSK_BUILDER_GIT_H

/* The 40-hex commit of the checkout holding dir (malloc'd), or NULL when dir is not in one or git is
 * not installed. git is run without a shell, dir passed as one argument, so no path is ever parsed. */
char *builder_git_commit(const char *dir);

#endif
