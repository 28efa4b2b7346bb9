// How long a woken thread waits for a CPU while another process keeps
// every CPU busy (docs/coherence.md, "What limits promptness").
//   cc -O2 -pthread -o /tmp/wakeup-latency scripts/wakeup-latency.c
//   /tmp/wakeup-latency MODE SECONDS
// MODE: samesession (the woken thread in the busy process's session),
// setsid (in a session, so an autogroup, of its own, as the opfs daemon),
// setsid-nice (that autogroup at nice -5), setsid-fifo (SCHED_FIFO 1),
// setsid-slice (a 0.1 ms EEVDF slice request).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static volatile int stop;
static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
static void *spin(void *a) { struct stat st; while (!stop) stat("/tmp", &st); return a; }
static void *poll_(void *a) { while (!stop) usleep(200); return a; }
static int cmp(const void *a, const void *b) { uint64_t x = *(uint64_t *)a, y = *(uint64_t *)b; return x < y ? -1 : x > y; }
struct attr { uint32_t size, policy; uint64_t flags; int32_t nice; uint32_t prio; uint64_t runtime, deadline, period; uint32_t umin, umax; };
int main(int argc, char **argv) {
  const char *mode = argv[1]; double secs = atof(argv[2]);
  int a[2], b[2]; pipe(a); pipe(b);
  pid_t pid = fork();
  if (pid == 0) {
    close(a[1]); close(b[0]);
    if (!strncmp(mode, "setsid", 6)) setsid();
    if (!strcmp(mode, "setsid-nice")) { FILE *f = fopen("/proc/self/autogroup", "w"); fprintf(f, "-5"); if (fclose(f)) perror("autogroup"); }
    if (!strcmp(mode, "setsid-fifo")) { struct sched_param p = { .sched_priority = 1 }; if (sched_setscheduler(0, SCHED_FIFO, &p)) perror("fifo"); }
    if (!strcmp(mode, "setsid-slice")) { struct attr at = { .size = sizeof at, .policy = SCHED_OTHER, .runtime = 100000 }; if (syscall(SYS_sched_setattr, 0, &at, 0)) perror("setattr"); }
    static uint64_t lat[100000]; int n = 0; uint64_t t;
    while (read(a[0], &t, 8) == 8) { if (n < 100000) lat[n++] = now() - t; write(b[1], "x", 1); }
    qsort(lat, n, 8, cmp); int over = 0; for (int i = 0; i < n; i++) over += lat[i] > 100000000ull;
    printf("%-13s %5d wakes, p50 %.2f ms, p99 %.2f ms, max %.1f ms, over 100 ms: %d\n", mode, n, lat[n/2]/1e6, lat[n*99/100]/1e6, lat[n-1]/1e6, over);
    return 0;
  }
  pthread_t th[3]; long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 0; i < ncpu && i < 2; i++) pthread_create(&th[i], 0, spin, 0);
  pthread_create(&th[2], 0, poll_, 0);
  uint64_t end = now() + secs * 1e9; char c;
  while (now() < end) { uint64_t t = now(); write(a[1], &t, 8); read(b[0], &c, 1); usleep(5000); }
  stop = 1; close(a[1]); waitpid(pid, 0, 0);
  return 0;
}
