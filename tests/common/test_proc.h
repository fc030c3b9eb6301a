/* Running a program or a function in a child process with bounded time and memory, for tests of
 * hostile inputs: a hang becomes a kill after timeout_s seconds, a runaway allocation a failure under
 * RLIMIT_AS (not set under AddressSanitizer, which reserves terabytes of address space). */
#ifndef DSK_TEST_PROC_H
#define DSK_TEST_PROC_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_HAVE_ASAN 1
#endif
#endif
#ifndef TEST_HAVE_ASAN
#define TEST_HAVE_ASAN 0
#endif

/* The time limit of a child: a guard against a hang, far above what a run takes even under the
 * sanitizers on a loaded 2-core machine. */
#define TEST_HANG_S 300

/* What a child did: its exit status, or the signal that ended it (SIGALRM for a timeout). */
typedef struct {
    int exited; /* 1: exit_code is valid */
    int exit_code;
    int signal;
} test_status;

static inline void test_child_limits(unsigned timeout_s, size_t as_bytes)
{
    if (as_bytes && !TEST_HAVE_ASAN) {
        struct rlimit rl = {as_bytes, as_bytes};
        setrlimit(RLIMIT_AS, &rl);
    }
    alarm(timeout_s); /* SIGALRM's default action ends the child */
}

static inline test_status test_wait(pid_t pid)
{
    test_status s = {0, -1, 0};
    int st;
    while (waitpid(pid, &st, 0) < 0)
        ;
    if (WIFEXITED(st)) {
        s.exited = 1;
        s.exit_code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        s.signal = WTERMSIG(st);
    }
    return s;
}

/* Run argv (argv[0] a path) with stdin from /dev/null (or in_path), stdout and stderr together into
 * out (NUL-terminated, cut at cap - 1 bytes). */
static inline test_status test_run_in(char *const argv[], const char *in_path, char *out, size_t cap,
                                      unsigned timeout_s, size_t as_bytes)
{
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        abort();
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        abort();
    }
    if (pid == 0) {
        int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
        if (in >= 0)
            dup2(in, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        test_child_limits(timeout_s, as_bytes);
        execv(argv[0], argv);
        perror(argv[0]);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    char sink[4096];
    for (;;) {
        ssize_t r = n + 1 < cap ? read(fds[0], out + n, cap - 1 - n) : read(fds[0], sink, sizeof sink);
        if (r <= 0)
            break;
        if (n + 1 < cap)
            n += (size_t)r;
    }
    out[n] = 0;
    close(fds[0]);
    return test_wait(pid);
}

static inline test_status test_run(char *const argv[], char *out, size_t cap, unsigned timeout_s, size_t as_bytes)
{
    return test_run_in(argv, NULL, out, cap, timeout_s, as_bytes);
}

/* Run fn(arg) in a child; its return value is the child's exit code. */
static inline test_status test_run_fn(int (*fn)(void *), void *arg, unsigned timeout_s, size_t as_bytes)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        abort();
    }
    if (pid == 0) {
        test_child_limits(timeout_s, as_bytes);
        _exit(fn(arg));
    }
    return test_wait(pid);
}

#endif
