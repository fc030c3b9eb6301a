#include "builder/git.h"
#include "runtime/common/error.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

char *builder_git_commit(const char *dir)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return NULL;
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0) {
        close(fds[0]);
        close(fds[1]);
        return NULL;
    }
    char *argv[] = {"git", "-C", (char *)dir, "rev-parse", "HEAD", NULL};
    pid_t pid;
    int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) ||
             posix_spawn_file_actions_adddup2(&fa, fds[1], 1) ||
             posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0) ||
             posix_spawnp(&pid, "git", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc) {
        close(fds[0]);
        return NULL;
    }
    char buf[64];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fds[0], buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || (n += (size_t)r) == sizeof buf - 1)
            break;
    }
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || n < 40)
        return NULL;
    for (int i = 0; i < 40; i++)
        if (!isxdigit((unsigned char)buf[i]))
            return NULL;
    buf[40] = 0;
    return dsk_strdup(buf);
}
