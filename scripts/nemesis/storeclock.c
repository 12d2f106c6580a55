/* The store's wall clock for `st-clock` (scripts/nemesis/schedule.py): an LD_PRELOAD
 * library that adds the whole seconds written in $NEMESIS_CLOCK_FILE ("+60s", "-30s")
 * to CLOCK_REALTIME, for clock_gettime, gettimeofday and time. Monotonic clocks are
 * left alone. The file is re-read at most every 20 ms, with plain syscalls.
 *
 * Why not libfaketime, as for the replicas: libfaketime 0.9.10 cannot start Debian's
 * redis-server ("Unexpected recursive calls to clock_gettime() without proper
 * initialization": jemalloc reads the clock while libfaketime initialises, which
 * allocates). This never allocates. Built by cluster.py with `cc` into the work dir. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile long offset_s;
static volatile long long checked_ns = -1;

static long long monotonic_ns(void) {
    struct timespec t;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long offset(void) {
    long long now = monotonic_ns();
    if (checked_ns >= 0 && now - checked_ns < 20000000LL)
        return offset_s;
    checked_ns = now;
    const char *path = getenv("NEMESIS_CLOCK_FILE");
    if (path == NULL)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return offset_s;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
        buf[n] = 0;
        offset_s = strtol(buf, NULL, 10);
    }
    return offset_s;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        ts->tv_sec += offset();
    return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t != NULL)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
