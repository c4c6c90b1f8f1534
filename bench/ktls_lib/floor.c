/* bench/ktls_lib/floor.c — what the kernel alone costs, for bench/ktls.
 *
 * Owns the "floor" of the kTLS benchmark and its plain backend:
 *   floor serve PORT FILE CIPHER N
 *       accept N connections one after another; for each: read the request
 *       (one read), put kTLS TX on the socket with a fixed key (no handshake),
 *       one blocking sendfile() loop of FILE, then wait for the peer to close.
 *   floor proxy-down PORT BACKEND CIPHER N
 *       per connection: kTLS TX on the client socket, ask the backend for its
 *       file ("D\n"), splice() backend -> pipe -> client until the backend's EOF.
 *   floor proxy-up PORT BACKEND CIPHER N BYTES
 *       per connection: kTLS RX on the client socket (the client sends records
 *       made with the same fixed key), announce BYTES to the backend
 *       ("U BYTES\n"), splice() client -> pipe -> backend for BYTES bytes, then
 *       relay the backend's one-line answer to the client in the clear.
 *   floor backend PORT FILE N
 *       the plain TCP backend behind every proxy: per connection it reads one
 *       line: "D" sends FILE (sendfile) and half-closes; "U n" reads n bytes
 *       and answers "n\n"; then it waits for the peer to close.
 * Every loop is bounded (N connections; a transfer by the file's size or
 * BYTES). Errors end the program with a message and status 1.
 * CIPHER: aes128 | aes256 | chacha (TLS 1.3 record format, sequence 0).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

static void die(const char *what) {
  fprintf(stderr, "floor: %s: %s\n", what, errno ? strerror(errno) : "failed");
  exit(1);
}

/* The fixed key material: bench/ktls_lib/guest.py builds the same bytes. */
static void fill(unsigned char *p, size_t n, unsigned char base) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(base + i);
}

static void set_ktls(int fd, int optname, const char *cipher) {
  if (setsockopt(fd, SOL_TCP, TCP_ULP, "tls", 3) < 0) die("setsockopt TCP_ULP tls");
  union {
    struct tls12_crypto_info_aes_gcm_128 a128;
    struct tls12_crypto_info_aes_gcm_256 a256;
    struct tls12_crypto_info_chacha20_poly1305 chacha;
  } u;
  memset(&u, 0, sizeof u);
  socklen_t len;
  if (!strcmp(cipher, "aes128")) {
    u.a128.info.version = TLS_1_3_VERSION;
    u.a128.info.cipher_type = TLS_CIPHER_AES_GCM_128;
    fill(u.a128.key, sizeof u.a128.key, 0x10);
    fill(u.a128.iv, sizeof u.a128.iv, 0x40);
    fill(u.a128.salt, sizeof u.a128.salt, 0x60);
    len = sizeof u.a128;
  } else if (!strcmp(cipher, "aes256")) {
    u.a256.info.version = TLS_1_3_VERSION;
    u.a256.info.cipher_type = TLS_CIPHER_AES_GCM_256;
    fill(u.a256.key, sizeof u.a256.key, 0x10);
    fill(u.a256.iv, sizeof u.a256.iv, 0x40);
    fill(u.a256.salt, sizeof u.a256.salt, 0x60);
    len = sizeof u.a256;
  } else if (!strcmp(cipher, "chacha")) {
    u.chacha.info.version = TLS_1_3_VERSION;
    u.chacha.info.cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
    fill(u.chacha.key, sizeof u.chacha.key, 0x10);
    fill(u.chacha.iv, sizeof u.chacha.iv, 0x40);
    len = sizeof u.chacha;
  } else {
    errno = 0;
    die("cipher must be aes128, aes256 or chacha");
  }
  if (setsockopt(fd, SOL_TLS, optname, &u, len) < 0)
    die(optname == TLS_TX ? "setsockopt TLS_TX" : "setsockopt TLS_RX");
}

static int listen_on(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (fd < 0) die("socket");
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
  if (listen(fd, 64) < 0) die("listen");
  return fd;
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect to the backend");
  return fd;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) die("write");
    p += w;
    n -= (size_t)w;
  }
}

/* Reads and throws away until EOF or an error (the peer's close). */
static void drain(int fd) {
  char buf[4096];
  for (int i = 0; i < 1 << 20; i++)
    if (read(fd, buf, sizeof buf) <= 0) return;
}

/* One line (up to 63 bytes) read byte by byte, so nothing after it is taken. */
static void read_line(int fd, char *line, size_t cap) {
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = read(fd, line + n, 1);
    if (r <= 0) break;
    if (line[n] == '\n') break;
    n++;
  }
  line[n] = 0;
}

static void send_file(int sock, int file, off_t size) {
  off_t off = 0;
  while (off < size) { /* each call moves at least one byte or fails */
    ssize_t s = sendfile(sock, file, &off, (size_t)(size - off));
    if (s <= 0) die("sendfile");
  }
}

/* A pipe's default capacity: a bigger pipe (1 MiB) measured dearer. */
#define WINDOW (64 * 1024)

/* splice() src -> pipe -> dst until `limit` bytes (or EOF when limit < 0). */
static long long splice_loop(int src, int dst, long long limit) {
  int p[2];
  if (pipe(p) < 0) die("pipe");
  long long moved = 0;
  while (limit < 0 || moved < limit) {
    size_t want = WINDOW;
    if (limit >= 0 && (long long)want > limit - moved) want = (size_t)(limit - moved);
    ssize_t in = splice(src, NULL, p[1], NULL, want, SPLICE_F_MOVE);
    if (in < 0) die("splice from the socket");
    if (in == 0) break;
    for (ssize_t left = in; left > 0;) {
      ssize_t out = splice(p[0], NULL, dst, NULL, (size_t)left, SPLICE_F_MOVE);
      if (out <= 0) die("splice to the socket");
      left -= out;
    }
    moved += in;
  }
  close(p[0]);
  close(p[1]);
  return moved;
}

static off_t file_size(int fd) {
  struct stat st;
  if (fstat(fd, &st) < 0) die("fstat");
  return st.st_size;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: floor serve PORT FILE CIPHER N | proxy-down PORT BACKEND CIPHER N |"
                    " proxy-up PORT BACKEND CIPHER N BYTES | backend PORT FILE N\n");
    return 2;
  }
  const char *mode = argv[1];
  int port = atoi(argv[2]);
  int is_backend = !strcmp(mode, "backend");
  if (!is_backend && argc < 6) { errno = 0; die("missing arguments"); }
  int n = atoi(argv[is_backend ? 4 : 5]);
  int ls = listen_on(port);
  printf("floor %s listening on %d\n", mode, port);
  fflush(stdout);
  for (int i = 0; i < n; i++) {
    int c = accept(ls, NULL, NULL);
    if (c < 0) die("accept");
    if (!strcmp(mode, "serve")) {
      int f = open(argv[3], O_RDONLY);
      if (f < 0) die("open FILE");
      char req[4096];
      if (read(c, req, sizeof req) <= 0) { /* closed without a request: nothing to serve */
        close(f);
        close(c);
        continue;
      }
      set_ktls(c, TLS_TX, argv[4]);
      send_file(c, f, file_size(f));
      close(f);
      shutdown(c, SHUT_WR);
      drain(c);
    } else if (!strcmp(mode, "proxy-down")) {
      set_ktls(c, TLS_TX, argv[4]);
      int b = connect_to(atoi(argv[3]));
      write_all(b, "D\n", 2);
      splice_loop(b, c, -1);
      shutdown(c, SHUT_WR);
      drain(c);
      close(b);
    } else if (!strcmp(mode, "proxy-up")) {
      if (argc < 7) { errno = 0; die("proxy-up needs BYTES"); }
      long long bytes = atoll(argv[6]);
      set_ktls(c, TLS_RX, argv[4]);
      int b = connect_to(atoi(argv[3]));
      char line[64];
      int k = snprintf(line, sizeof line, "U %lld\n", bytes);
      write_all(b, line, (size_t)k);
      long long moved = splice_loop(c, b, bytes);
      if (moved != bytes) { errno = 0; die("the client closed before BYTES arrived"); }
      read_line(b, line, sizeof line);
      k = (int)strlen(line);
      line[k++] = '\n';
      write_all(c, line, (size_t)k); /* kTLS is RX only here: this goes in the clear */
      shutdown(c, SHUT_WR);
      drain(c);
      close(b);
    } else if (!strcmp(mode, "backend")) {
      char line[64];
      read_line(c, line, sizeof line);
      if (line[0] == 'D') {
        int f = open(argv[3], O_RDONLY);
        if (f < 0) die("open FILE");
        send_file(c, f, file_size(f));
        close(f);
        shutdown(c, SHUT_WR);
      } else if (line[0] == 'U') {
        long long want = atoll(line + 2), got = 0;
        static char buf[1 << 18];
        while (got < want) {
          ssize_t r = read(c, buf, sizeof buf);
          if (r <= 0) break;
          got += r;
        }
        int k = snprintf(line, sizeof line, "%lld\n", got);
        write_all(c, line, (size_t)k);
      }
      drain(c);
    } else {
      errno = 0;
      die("unknown mode");
    }
    close(c);
  }
  return 0;
}
