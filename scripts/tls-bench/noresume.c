/*
 * LD_PRELOAD shim for wrk: every new connection makes a full TLS handshake.
 *
 * wrk closes a connection with SSL_shutdown + SSL_clear and reuses the SSL object for the next
 * one. After a clean shutdown, SSL_clear keeps the session (with the TLS 1.3 tickets the server
 * sent), so the next SSL_connect offers it as a PSK and any server that accepts its own tickets
 * resumes: with `-H "Connection: close"` wrk then measures resumed handshakes. OpenSSL's
 * configuration has no client-side switch for this (Options = -SessionTicket does not stop a
 * TLS 1.3 client from offering a ticket), hence this shim: after SSL_clear, forget the session.
 *
 * Built by tlsbench.py at run time: cc -O2 -shared -fPIC -o noresume.so noresume.c -ldl
 * The harness's handshake census checks that no ClientHello offers a PSK.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef struct ssl_st SSL;
typedef struct ssl_session_st SSL_SESSION;

extern int SSL_set_session(SSL *s, SSL_SESSION *session);

int SSL_clear(SSL *s)
{
    static int (*real_clear)(SSL *);
    if (real_clear == NULL)
        real_clear = (int (*)(SSL *))dlsym(RTLD_NEXT, "SSL_clear");
    int ok = real_clear(s);
    SSL_set_session(s, NULL);
    return ok;
}
