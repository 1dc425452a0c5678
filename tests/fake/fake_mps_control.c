/* A fake nvidia-cuda-mps-control for hosts without a GPU (CI): the control
 * daemon (-d, or -d -M for multi-user) and its UI client (no argument),
 * modelled on the real one as measured on an H200
 * (docs/gpu-runs/2026-12-02-h200-mps-facts/, users and privileges in
 * docs/gpu-runs/2026-12-03-h200-mps-facts3/). Tests only.
 *
 * Files (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps; CUDA_MPS_LOG_DIRECTORY,
 * default /var/log/nvidia-mps), with the modes the real daemon gives them:
 *   <pipe>/control                      unix stream socket 0666 (UI and CUDA clients)
 *   <pipe>/control_lock                 regular 0666 (the fake holds a flock on it)
 *   <pipe>/control_privileged           unix stream socket 0755 (only root reaches it)
 *   <pipe>/log                          FIFO 0777
 *   <pipe>/nvidia-cuda-mps-control.pid  the daemon's pid, no newline, 0666
 *   <log>/control.log                   appended, 0644
 *   <log>/server.log                    created empty, 0644
 *
 * Wire protocol on control (the fake's own; the real one is private):
 *   the first line names the peer:
 *     "ui"                      a UI session: then one command a line; each
 *                               reply is its lines followed by one empty line;
 *                               after quit the daemon closes (EOF ends the reply)
 *     "client <rest>"           a CUDA client (the fake libcuda's cuInit): the
 *                               daemon logs NEW CLIENT and answers "ok <pct>",
 *                               the client's active thread percentage (below);
 *                               the client keeps the connection for its life,
 *                               and its end (EOF) ends the client
 *     anything else             logged as "User did not send valid credentials", closed
 *
 * Users (measured in docs/gpu-runs/2026-12-03-h200-mps-facts3/): without -M
 * the daemon runs one MPS server per user at a time. The server belongs to
 * the uid (SO_PEERCRED) of the client that started it; a client of another
 * uid that arrives while that server has live clients is queued: it gets no
 * answer until every live client has ended, then the server is its uid's (a
 * new server: it takes the daemon's default percentage) and it is answered.
 * A queued client that disconnects is dropped. With -M one server serves
 * clients of every uid at once. The fake's server keeps the daemon's pid
 * across users (get_server_list).
 *
 * Privileged commands (set_*, quit, terminate_client) are served to root or
 * the daemon's owner only (a peer of another uid gets the real refusal). On
 * control_privileged root may do all of them; on control, as the H200's
 * daemon answered root there (docs/gpu-runs/2026-12-03-h200-mpsshare/), the
 * defaults (set_default_*, and every other set_* but a server's own
 * percentage) get the UID refusal and quit "Not enough privilege to execute
 * quit command", while set_active_thread_percentage <server> and
 * terminate_client are taken. The UI connects to control_privileged when it
 * can, else to control. gpu-quota's container view of the pipe directory
 * (core/src/mps/view.rs) holds control only.
 *
 *
 * Active thread percentage, as NVIDIA documents it: a server takes the
 * daemon's default (set_default_active_thread_percentage) when it starts (at
 * the first client); set_active_thread_percentage <server pid> changes the
 * server's limit for its clients from then on; a client's
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE can only lower it: a client runs at
 * min(its value, the server's limit), at the server's limit without a value
 * (or with one that is no percentage). The fake's one server has the daemon's
 * pid (get_server_list). get_client_list <server pid> lists the live
 * clients' pids; fake_clients (fake-only) lists each live client as
 * "<peer pid> <percentage>", so that tests can add up a container's.
 * terminate_client <server pid> <client pid> ends that client's connection.
 * set_/get_default_device_pinned_mem_limit keep the value given.
 *
 * Hostile peers (a container reaches <pipe>/control): lines are bounded
 * (LINE_MAX_FAKE), logged with control characters replaced, a peer that sends
 * no first line within HELLO_TIMEOUT_S is dropped and at most MAX_CONN
 * connections are served at once. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_FAKE 4096
#define MAX_CONN 64
#define HELLO_TIMEOUT_S 10
/* the real text, typo included (measured) */
#define PRIV_MSG "Insufficient privileges for UID %u. Control deamon settings can only be modified by the user who started it or by the root user."
/* the fake's own: root on the unprivileged socket */
/* root on the client socket, as NVIDIA's daemon answers it (measured on the
   H200, docs/gpu-runs/2026-12-03-h200-mpsshare/) */
#define CTL_QUIT_MSG "Not enough privilege to execute quit command"

extern char **environ;

static char pipe_dir[256], log_dir[256];
static char p_control[320], p_lock[320], p_priv[320], p_fifo[320], p_pid[320];
static int log_fd = -1;
static pid_t my_pid;
static uid_t my_uid;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static double default_pct = 100.0;
static int server_up; /* a CUDA client has connected: the fake's MPS server exists */
static int multi_user; /* -M: one server for clients of every uid */
static uid_t server_uid; /* without -M: the uid the server serves (server_up) */
/* signalled (under mu) when a live client ends: a queued client may be next */
static pthread_cond_t client_gone = PTHREAD_COND_INITIALIZER;
static double server_pct; /* the server's limit, from default_pct at its start */
static char pinned_limit[64] = ""; /* set_default_device_pinned_mem_limit's value */
#define MAX_CLIENTS MAX_CONN
/* the live clients (under mu): a client is one while it holds its connection */
static struct client { int used; pid_t pid; double pct; int fd; } clients[MAX_CLIENTS];
static int nconn;

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v && *v ? v : dflt;
}

static void paths(void) {
  snprintf(pipe_dir, sizeof pipe_dir, "%s", env_or("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"));
  snprintf(log_dir, sizeof log_dir, "%s", env_or("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"));
  snprintf(p_control, sizeof p_control, "%s/control", pipe_dir);
  snprintf(p_lock, sizeof p_lock, "%s/control_lock", pipe_dir);
  snprintf(p_priv, sizeof p_priv, "%s/control_privileged", pipe_dir);
  snprintf(p_fifo, sizeof p_fifo, "%s/log", pipe_dir);
  snprintf(p_pid, sizeof p_pid, "%s/nvidia-cuda-mps-control.pid", pipe_dir);
}

/* one control.log line: "[YYYY-MM-DD HH:MM:SS.mmm Control %5d] text" (the real
   daemon's layout); control characters of peer-supplied text become '?' */
static void logf_(const char *fmt, ...) {
  char msg[LINE_MAX_FAKE + 256], line[LINE_MAX_FAKE + 320];
  va_list ap; va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
  for (char *p = msg; *p; p++) if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm; localtime_r(&ts.tv_sec, &tm);
  char t[32]; strftime(t, sizeof t, "%Y-%m-%d %H:%M:%S", &tm);
  int n = snprintf(line, sizeof line, "[%s.%03ld Control %5d] %s\n", t, ts.tv_nsec / 1000000, (int)my_pid, msg);
  if (n > (int)sizeof line - 1) { n = sizeof line - 1; line[n - 1] = '\n'; }
  if (log_fd >= 0) write(log_fd, line, n);
}

/* ---------------------------------------------------------------- UI client */
static int connect_control(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) return -1;
  strcpy(a.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
  return fd;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w; n -= (size_t)w;
  }
  return 0;
}

/* buffered line reader over a socket; returns the length, -1 at EOF/error,
   -2 for a line longer than LINE_MAX_FAKE */
struct rd { int fd; char buf[LINE_MAX_FAKE * 2]; size_t len; };
static int read_line(struct rd *r, char *out, size_t cap) {
  for (;;) {
    char *nl = memchr(r->buf, '\n', r->len);
    if (nl) {
      size_t l = (size_t)(nl - r->buf);
      if (l >= cap) return -2;
      memcpy(out, r->buf, l); out[l] = 0;
      memmove(r->buf, nl + 1, r->len - l - 1); r->len -= l + 1;
      if (l && out[l - 1] == '\r') out[--l] = 0;
      return (int)l;
    }
    if (r->len >= cap) return -2;
    ssize_t n = recv(r->fd, r->buf + r->len, sizeof r->buf - r->len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    r->len += (size_t)n;
  }
}

static int ui_main(void) {
  paths();
  /* the privileged socket where this user reaches it (root: 0755), as the
     real UI does (to be confirmed on the H200), else the client socket */
  int fd = connect_control(p_priv);
  if (fd < 0) fd = connect_control(p_control);
  if (fd < 0) { puts("Cannot find MPS control daemon process"); return 1; }
  if (write_all(fd, "ui\n", 3)) { puts("Cannot find MPS control daemon process"); return 1; }
  static struct rd r; r.fd = fd;
  char in[LINE_MAX_FAKE], out[LINE_MAX_FAKE];
  while (fgets(in, sizeof in, stdin)) {
    size_t l = strcspn(in, "\r\n"); in[l] = 0;
    char *c = in; while (*c == ' ' || *c == '\t') c++;
    if (!*c) continue;
    char msg[LINE_MAX_FAKE + 2]; int m = snprintf(msg, sizeof msg, "%s\n", c);
    if (write_all(fd, msg, (size_t)m)) break;
    int n;
    while ((n = read_line(&r, out, sizeof out)) > 0) { puts(out); fflush(stdout); }
    if (n < 0) break; /* the daemon closed (quit) */
  }
  close(fd);
  return 0;
}

/* ---------------------------------------------------------------- daemon */
static int peer(int fd, struct ucred *cr) {
  socklen_t l = sizeof *cr;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &l);
}

static void remove_files(void) {
  unlink(p_control); unlink(p_priv); unlink(p_fifo); unlink(p_pid); unlink(p_lock);
}

/* one command of a UI session: writes the reply lines into rep (no trailing
   newline, "" for none); returns 1 for quit */
/* a client's active thread percentage (under mu): its pct=<value> token,
   which can only lower the server's limit */
static double client_pct(const char *rest) {
  const char *p = strstr(rest, "pct=");
  if (p && (p == rest || p[-1] == ' ')) {
    char tok[64]; size_t n = strcspn(p + 4, " ");
    if (n < sizeof tok) {
      memcpy(tok, p + 4, n); tok[n] = 0;
      char *end; double v = strtod(tok, &end);
      if (end != tok && !*end && v > 0.0 && v <= 100.0) return v < server_pct ? v : server_pct;
    }
  }
  return server_pct;
}

static int is_privileged_command(const char *name) {
  return !strncmp(name, "set_", 4) || !strcmp(name, "quit") || !strcmp(name, "terminate_client");
}

/* "<server pid>" at the start of arg: the server when it is this daemon's
   (the fake's server has the daemon's pid); the rest of arg after it */
static int server_arg(const char *arg, const char **rest) {
  char *end; long v = strtol(arg, &end, 10);
  while (*end == ' ' || *end == '\t') end++;
  *rest = end;
  return end != arg && server_up && v == (long)my_pid;
}

/* one command of a UI session on the socket it came in on (on_priv:
   control_privileged): writes the reply lines into rep (no trailing newline,
   "" for none); returns 1 for quit. Called with mu held. */
static int command(const char *cmd, const struct ucred *cr, int on_priv, char *rep, size_t cap) {
  char name[64] = ""; const char *arg = cmd, *rest;
  size_t k = strcspn(cmd, " \t");
  if (k < sizeof name) { memcpy(name, cmd, k); name[k] = 0; }
  arg = cmd + k; while (*arg == ' ' || *arg == '\t') arg++;
  int privileged = cr->uid == 0 || cr->uid == my_uid;
  rep[0] = 0;
  if (is_privileged_command(name)) {
    if (!privileged) { snprintf(rep, cap, PRIV_MSG, (unsigned)cr->uid); return 0; }
    /* on control, root keeps a server's own percentage and terminate_client
       (the H200's daemon took both there) and loses the defaults and quit */
    if (!on_priv && !strcmp(name, "quit")) { snprintf(rep, cap, CTL_QUIT_MSG); return 0; }
    if (!on_priv && strcmp(name, "set_active_thread_percentage") && strcmp(name, "terminate_client")) {
      snprintf(rep, cap, PRIV_MSG, (unsigned)cr->uid);
      return 0;
    }
  }
  if (!strcmp(name, "get_server_list")) {
    if (server_up) snprintf(rep, cap, "%d", (int)my_pid);
  } else if (!strcmp(name, "get_default_active_thread_percentage")) {
    snprintf(rep, cap, "%.1f", default_pct);
  } else if (!strcmp(name, "set_default_active_thread_percentage")) {
    char *end; double v = strtod(arg, &end);
    while (*end == ' ' || *end == '\t') end++;
    if (end == arg || *end || !(v > 0.0 && v <= 100.0)) { snprintf(rep, cap, "Invalid active thread percentage"); return 0; }
    default_pct = v;
    snprintf(rep, cap, "%.1f", v); /* measured: the set value is echoed */
  } else if (!strcmp(name, "get_active_thread_percentage")) {
    if (!server_arg(arg, &rest)) snprintf(rep, cap, "Server not found");
    else snprintf(rep, cap, "%.1f", server_pct);
  } else if (!strcmp(name, "set_active_thread_percentage")) {
    if (!server_arg(arg, &rest)) { snprintf(rep, cap, "Server not found"); return 0; }
    char *end; double v = strtod(rest, &end);
    while (*end == ' ' || *end == '\t') end++;
    if (end == rest || *end || !(v > 0.0 && v <= 100.0)) { snprintf(rep, cap, "Invalid active thread percentage"); return 0; }
    server_pct = v;
    snprintf(rep, cap, "%.1f", v);
  } else if (!strcmp(name, "get_client_list") || !strcmp(name, "fake_clients")) {
    /* fake_clients (fake-only): every live client as "<pid> <percentage>" */
    int all = !strcmp(name, "fake_clients");
    if (!all && !server_arg(arg, &rest)) { snprintf(rep, cap, "Server not found"); return 0; }
    size_t n = 0;
    for (int i = 0; i < MAX_CLIENTS && server_up; i++) {
      if (!clients[i].used) continue;
      int w = all ? snprintf(rep + n, cap - n, "%s%d %g", n ? "\n" : "", (int)clients[i].pid, clients[i].pct)
                  : snprintf(rep + n, cap - n, "%s%d", n ? "\n" : "", (int)clients[i].pid);
      if (w < 0 || (size_t)w >= cap - n) break;
      n += (size_t)w;
    }
  } else if (!strcmp(name, "terminate_client")) {
    if (!server_arg(arg, &rest)) { snprintf(rep, cap, "Server not found"); return 0; }
    long pid = strtol(rest, 0, 10);
    int found = 0;
    /* its connection ends: the daemon's side of it sees EOF and drops it */
    for (int i = 0; i < MAX_CLIENTS; i++)
      if (clients[i].used && clients[i].pid == pid) { shutdown(clients[i].fd, SHUT_RDWR); clients[i].used = 0; found = 1; }
    if (found) pthread_cond_broadcast(&client_gone);
    else snprintf(rep, cap, "Client not found");
  } else if (!strcmp(name, "set_default_device_pinned_mem_limit")) {
    snprintf(pinned_limit, sizeof pinned_limit, "%s", arg);
  } else if (!strcmp(name, "get_default_device_pinned_mem_limit")) {
    snprintf(rep, cap, "%s", pinned_limit);
  } else if (!strcmp(name, "quit")) {
    return 1;
  } else {
    snprintf(rep, cap, "Unknown command");
  }
  return 0;
}

static int live_clients(void) {
  int n = 0;
  for (int i = 0; i < MAX_CLIENTS; i++) n += clients[i].used;
  return n;
}

/* whether a queued client's connection has ended (EOF, reset): it is dropped */
static int peer_gone(int fd) {
  struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) return 1;
  char b;
  return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Without -M, a client of a uid other than the server's waits (under mu,
   which the wait lets go) until the server has no live client; the server is
   then its uid's. Returns 0 when the client has left while it waited. */
static int admit(int fd, const struct ucred *cr) {
  if (multi_user) return 1;
  int logged = 0;
  while (server_up && server_uid != cr->uid && live_clients() > 0) {
    if (!logged) {
      logf_("Client %d of uid %u waits: the server serves uid %u", (int)cr->pid, (unsigned)cr->uid, (unsigned)server_uid);
      logged = 1;
    }
    /* woken when a client ends; every 200 ms to see whether it left */
    struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&client_gone, &mu, &ts);
    if (peer_gone(fd)) { logf_("Client %d left while it waited", (int)cr->pid); return 0; }
  }
  /* a server for another uid than the last: a new server, at the default */
  if (server_up && server_uid != cr->uid) server_pct = default_pct;
  server_uid = cr->uid;
  return 1;
}

static void *serve(void *arg) {
  int fd = (int)((long)arg >> 1), on_priv = (int)((long)arg & 1);
  static __thread struct rd r; r.fd = fd; r.len = 0;
  char line[LINE_MAX_FAKE], rep[LINE_MAX_FAKE + 256];
  struct ucred cr = {0};
  struct timeval tv = {HELLO_TIMEOUT_S, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  pthread_mutex_lock(&mu); logf_("Accepting connection..."); pthread_mutex_unlock(&mu);
  int n = read_line(&r, line, sizeof line);
  if (n < 0 || peer(fd, &cr) != 0) {
    pthread_mutex_lock(&mu); logf_("User did not send valid credentials"); pthread_mutex_unlock(&mu);
  } else if (!strncmp(line, "client ", 7)) {
    pthread_mutex_lock(&mu);
    logf_("NEW CLIENT peer_pid=%d uid=%u %s", (int)cr.pid, (unsigned)cr.uid, line + 7);
    if (!admit(fd, &cr)) { pthread_mutex_unlock(&mu); goto out; }
    if (!server_up) { server_up = 1; server_pct = default_pct; }
    double pct = client_pct(line + 7);
    int slot = -1;
    for (int i = 0; i < MAX_CLIENTS && slot < 0; i++) if (!clients[i].used) slot = i;
    if (slot >= 0) clients[slot] = (struct client){1, cr.pid, pct, fd};
    logf_("Client %d runs at active thread percentage %g", (int)cr.pid, pct);
    pthread_mutex_unlock(&mu);
    char ok[64]; int m = snprintf(ok, sizeof ok, "ok %g\n", pct);
    write_all(fd, ok, (size_t)m);
    /* a client is one for as long as it holds its connection */
    tv.tv_sec = 0; setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[256];
    while (recv(fd, b, sizeof b, 0) > 0) {}
    pthread_mutex_lock(&mu);
    /* still this connection's slot (terminate_client may have freed it) */
    if (slot >= 0 && clients[slot].used && clients[slot].fd == fd) clients[slot].used = 0;
    pthread_cond_broadcast(&client_gone);
    logf_("Client %d disconnected", (int)cr.pid);
    pthread_mutex_unlock(&mu);
  } else if (!strcmp(line, "ui")) {
    tv.tv_sec = 0; setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* a UI may idle */
    pthread_mutex_lock(&mu); logf_("NEW UI"); pthread_mutex_unlock(&mu);
    while ((n = read_line(&r, line, sizeof line)) >= 0) {
      if (!n) { if (write_all(fd, "\n", 1)) break; continue; }
      pthread_mutex_lock(&mu);
      logf_("Cmd:%s", line);
      int quit = command(line, &cr, on_priv, rep, sizeof rep - 2);
      pthread_mutex_unlock(&mu);
      if (quit) {
        /* the files go before the daemon does: once the UI returns, a new
           daemon may start on this pipe directory */
        pthread_mutex_lock(&mu);
        remove_files();
        logf_("Control daemon exiting");
        _exit(0); /* closes the UI's connection: its EOF ends the reply */
      }
      pthread_mutex_lock(&mu);
      if (rep[0]) logf_("%s", rep);
      pthread_mutex_unlock(&mu);
      size_t l = strlen(rep);
      if (l) rep[l++] = '\n';
      rep[l++] = '\n'; /* the empty line ends a reply */
      if (write_all(fd, rep, l)) break;
    }
    pthread_mutex_lock(&mu); logf_("UI closed"); pthread_mutex_unlock(&mu);
  } else {
    pthread_mutex_lock(&mu); logf_("User did not send valid credentials"); pthread_mutex_unlock(&mu);
  }
out:
  close(fd);
  __atomic_fetch_sub(&nconn, 1, __ATOMIC_SEQ_CST);
  return 0;
}

static int listen_on(const char *path, mode_t mode) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) { fprintf(stderr, "socket path too long: %s\n", path); return -1; }
  strcpy(a.sun_path, path);
  unlink(path); /* a stale socket of a daemon that died (we hold control_lock) */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || chmod(path, mode) != 0 || listen(fd, 64) != 0) {
    fprintf(stderr, "cannot listen on %s: %s\n", path, strerror(errno));
    return -1;
  }
  return fd;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* the daemon's start, in the child: every failure is reported on stderr
   (still the caller's) and the ready pipe closes without a byte */
static int daemon_main(int ready, int lock_fd) {
  if (setsid() < 0) return 1;
  my_pid = getpid(); my_uid = getuid();
  umask(0);
  int c = listen_on(p_control, 0666), p = listen_on(p_priv, 0755);
  if (c < 0 || p < 0) return 1;
  unlink(p_fifo);
  if (mkfifo(p_fifo, 0777) != 0 || chmod(p_fifo, 0777) != 0) { fprintf(stderr, "cannot create %s: %s\n", p_fifo, strerror(errno)); return 1; }
  char path[320];
  snprintf(path, sizeof path, "%s/control.log", log_dir);
  log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) { fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno)); return 1; }
  snprintf(path, sizeof path, "%s/server.log", log_dir);
  int s = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (s < 0) { fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno)); return 1; }
  close(s);
  int pf = open(p_pid, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (pf < 0) { fprintf(stderr, "cannot write %s: %s\n", p_pid, strerror(errno)); return 1; }
  fchmod(pf, 0666);
  dprintf(pf, "%d", (int)my_pid); /* measured: 3 bytes for pid 505, no newline */
  close(pf);

  logf_("Starting control daemon using socket %s", p_control);
  logf_("To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir);
  logf_("CUDA MPS Control binary version: 13000");
  /* fake-only: which user model this daemon runs (-M or not) */
  logf_("Starting control daemon (%s)", multi_user ? "multi-user" : "one user at a time");
  /* fake-only lines: tests prove the daemon's environment (names only: values
     may be secrets) and its GPU */
  size_t ne = 0; for (char **e = environ; *e; e++) ne++;
  char **names = calloc(ne + 1, sizeof *names);
  size_t tot = 0;
  for (size_t i = 0; i < ne; i++) { names[i] = strndup(environ[i], strcspn(environ[i], "=")); tot += strlen(names[i]) + 1; }
  qsort(names, ne, sizeof *names, cmp_str);
  char *lst = calloc(tot + 1, 1), *q = lst;
  for (size_t i = 0; i < ne; i++) q += sprintf(q, "%s%s", i ? " " : "", names[i]);
  logf_("Environment: %s", lst);
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) logf_("CUDA_VISIBLE_DEVICES=%s", cvd); else logf_("CUDA_VISIBLE_DEVICES unset");

  if (chdir("/") != 0) return 1;
  int nul = open("/dev/null", O_RDWR);
  if (nul < 0) return 1;
  dup2(nul, 0); dup2(nul, 1); dup2(nul, 2);
  if (nul > 2) close(nul);
  signal(SIGPIPE, SIG_IGN);
  (void)lock_fd; /* held (flock) for the daemon's life */
  write(ready, "1", 1);
  close(ready);

  struct pollfd pfd[2] = {{c, POLLIN, 0}, {p, POLLIN, 0}};
  for (;;) {
    if (poll(pfd, 2, -1) < 0) continue;
    for (int i = 0; i < 2; i++) {
      if (!(pfd[i].revents & POLLIN)) continue;
      int fd = accept4(pfd[i].fd, 0, 0, SOCK_CLOEXEC);
      if (fd < 0) continue;
      if (__atomic_add_fetch(&nconn, 1, __ATOMIC_SEQ_CST) > MAX_CONN) {
        __atomic_fetch_sub(&nconn, 1, __ATOMIC_SEQ_CST); close(fd); continue;
      }
      pthread_t t; pthread_attr_t at; pthread_attr_init(&at);
      pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
      /* the socket it came in on travels with it: pfd[1] is control_privileged */
      if (pthread_create(&t, &at, serve, (void *)(((long)fd << 1) | i)) != 0) { __atomic_fetch_sub(&nconn, 1, __ATOMIC_SEQ_CST); close(fd); }
      pthread_attr_destroy(&at);
    }
  }
}

static int start_daemon(void) {
  paths();
  if (mkdir(pipe_dir, 0755) != 0 && errno != EEXIST) { fprintf(stderr, "cannot create %s: %s\n", pipe_dir, strerror(errno)); return 1; }
  if (mkdir(log_dir, 0755) != 0 && errno != EEXIST) { fprintf(stderr, "cannot create %s: %s\n", log_dir, strerror(errno)); return 1; }
  /* one daemon per pipe directory: one that holds the lock, or (checked
     second, so that a fake daemon's log shows no probe) one that answers */
  mode_t old = umask(0);
  int lock_fd = open(p_lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  umask(old);
  if (lock_fd < 0) { fprintf(stderr, "cannot open %s: %s\n", p_lock, strerror(errno)); return 1; }
  int probe = -1;
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0 || (probe = connect_control(p_control)) >= 0) {
    if (probe >= 0) close(probe);
    fputs("An instance of this daemon is already running\n", stderr);
    return 1;
  }
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) != 0) return 1;
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); return 1; }
  if (pid == 0) { close(pp[0]); _exit(daemon_main(pp[1], lock_fd)); }
  close(pp[1]); close(lock_fd);
  char b; ssize_t n;
  while ((n = read(pp[0], &b, 1)) < 0 && errno == EINTR) {}
  if (n != 1) { fputs("the MPS control daemon failed to start\n", stderr); return 1; }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 1) return ui_main();
  if (argc == 2 && !strcmp(argv[1], "-d")) return start_daemon();
  if (argc == 3 && ((!strcmp(argv[1], "-d") && !strcmp(argv[2], "-M")) || (!strcmp(argv[1], "-M") && !strcmp(argv[2], "-d")))) {
    multi_user = 1;
    return start_daemon();
  }
  fprintf(stderr, "usage: %s [-d [-M]]\n", argv[0]);
  return 1;
}
