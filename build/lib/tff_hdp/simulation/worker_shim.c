/* Preloaded into TFF's worker_binary (LD_PRELOAD) by tff_hdp/simulation/workers.py.
 *
 * worker_binary (TFF 0.87) listens on every interface ([::]:PORT) and has no
 * flag to choose the address, yet it runs any TensorFlow graph it is sent.
 * With TFF_HDP_BIND_ADDRESS set, a bind() to the wildcard address binds to
 * that address instead (an IPv4 address on a dual-stack IPv6 socket becomes
 * its v4-mapped form), so the worker answers on that address only. gRPC's
 * SO_REUSEPORT is not set (yet reported as set, which gRPC checks): with it,
 * a second worker on a port in use would share the port and take some of
 * the first one's connections; without it, that worker fails to start.
 *
 * With TFF_HDP_PARENT_PID set, the worker is killed when the process that
 * started it ends, however it ends (SIGKILL and the OOM killer included):
 * PR_SET_PDEATHSIG, and an exit if that parent is already gone.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

__attribute__((constructor)) static void die_with_parent(void) {
  const char *parent = getenv("TFF_HDP_PARENT_PID");
  if (parent == NULL) return;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != (pid_t)atol(parent)) _exit(1);
}

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  static bind_fn real_bind = NULL;
  if (real_bind == NULL) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
  const char *want = getenv("TFF_HDP_BIND_ADDRESS");
  if (want == NULL || addr == NULL) return real_bind(fd, addr, len);
  struct in_addr v4;
  struct in6_addr v6;
  int is_v4 = inet_pton(AF_INET, want, &v4) == 1;
  int is_v6 = !is_v4 && inet_pton(AF_INET6, want, &v6) == 1;
  if (!is_v4 && !is_v6) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in a = *(const struct sockaddr_in *)addr;
    if (a.sin_addr.s_addr != htonl(INADDR_ANY)) return real_bind(fd, addr, len);
    if (!is_v4) {
      errno = EADDRNOTAVAIL;
      return -1;
    }
    a.sin_addr = v4;
    return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
  }
  if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 a = *(const struct sockaddr_in6 *)addr;
    if (memcmp(&a.sin6_addr, &in6addr_any, sizeof in6addr_any) != 0)
      return real_bind(fd, addr, len);
    if (is_v6) {
      a.sin6_addr = v6;
    } else {
      memset(&a.sin6_addr, 0, sizeof a.sin6_addr);
      a.sin6_addr.s6_addr[10] = 0xff;
      a.sin6_addr.s6_addr[11] = 0xff;
      memcpy(&a.sin6_addr.s6_addr[12], &v4, 4);
    }
    return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
  }
  return real_bind(fd, addr, len);
}

typedef int (*setsockopt_fn)(int, int, int, const void *, socklen_t);
typedef int (*getsockopt_fn)(int, int, int, void *, socklen_t *);

static int is_reuseport(int level, int name) {
  return level == SOL_SOCKET && name == SO_REUSEPORT &&
         getenv("TFF_HDP_BIND_ADDRESS") != NULL;
}

int setsockopt(int fd, int level, int name, const void *value, socklen_t len) {
  static setsockopt_fn real_setsockopt = NULL;
  if (real_setsockopt == NULL)
    real_setsockopt = (setsockopt_fn)dlsym(RTLD_NEXT, "setsockopt");
  if (is_reuseport(level, name)) return 0;
  return real_setsockopt(fd, level, name, value, len);
}

int getsockopt(int fd, int level, int name, void *value, socklen_t *len) {
  static getsockopt_fn real_getsockopt = NULL;
  if (real_getsockopt == NULL)
    real_getsockopt = (getsockopt_fn)dlsym(RTLD_NEXT, "getsockopt");
  if (is_reuseport(level, name) && value != NULL && len != NULL &&
      *len >= sizeof(int)) {
    *(int *)value = 1;
    *len = sizeof(int);
    return 0;
  }
  return real_getsockopt(fd, level, name, value, len);
}
