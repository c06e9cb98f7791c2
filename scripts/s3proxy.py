"""A proxy in front of an S3-compatible server for the object-store checks: it counts the
requests that pass (by method, ranged or not, and key), and can delay each one, answer some
with 503 and drop some connections without an answer.

    proxy = S3Proxy("http://127.0.0.1:5000")   # starts on a free loopback port
    proxy.delay = 0.02; proxy.fail_every = 3; proxy.drop_every = 5
    proxy.log   # [[method, path, ranged, status, bytes answered, signed (an Authorization header)]]
    entered, release = proxy.hold("PUT", "/bucket/key")   # the next such request waits
    proxy.refuse = ("PUT", "/bucket/key")                 # the next such request gets a 403
"""

import http.client
import http.server
import socket
import threading
import time
import urllib.parse


class S3Proxy:
    def __init__(self, upstream):
        u = urllib.parse.urlparse(upstream)
        self.host, self.port_up = u.hostname, u.port
        self.delay = 0.0
        self.fail_every = 0  # every n-th request gets a 503 (0: none)
        self.drop_every = 0  # every n-th request's connection is closed unanswered
        self.fail_all = False
        self.log = []
        self.lock = threading.Lock()
        self.n = 0
        self.in_flight = 0
        self.most_in_flight = 0  # the most requests under way at once since `reset`
        self.held = None  # (method, path, entered, release): see `hold`
        self.refuse = None  # (method, path): the next such request is answered 403, not retried
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def injected(self, entry, status, code):
                # An S3 error reply the proxy makes up, logged as the request's status.
                entry[3] = status
                msg = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)

            def handle_any(self):
                with proxy.lock:
                    proxy.in_flight += 1
                    proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                try:
                    self.relay()
                finally:
                    with proxy.lock:
                        proxy.in_flight -= 1

            def relay(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy.lock:
                    proxy.n += 1
                    n = proxy.n
                    entry = [self.command, urllib.parse.urlparse(self.path).path, "Range" in self.headers, None, 0,
                             "Authorization" in self.headers]
                    proxy.log.append(entry)
                    held = proxy.held if proxy.held and proxy.held[:2] == (entry[0], entry[1]) else None
                    if held:
                        proxy.held = None
                    refused = proxy.refuse == (entry[0], entry[1])
                    if refused:
                        proxy.refuse = None
                if refused:
                    return self.injected(entry, 403, "AccessDenied")
                if held:
                    held[2].set()
                    held[3].wait(60)
                if proxy.delay:
                    time.sleep(proxy.delay)
                if proxy.drop_every and n % proxy.drop_every == 0:
                    entry[3] = "dropped"
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if proxy.fail_all or (proxy.fail_every and n % proxy.fail_every == 0):
                    return self.injected(entry, 503, "SlowDown")
                conn = http.client.HTTPConnection(proxy.host, proxy.port_up, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                entry[3] = resp.status
                entry[4] = len(data)
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self):
        with self.lock:
            self.log = []
            self.most_in_flight = self.in_flight

    def settle(self, quiet=0.3, most=10.0):
        """Wait until no request is under way and none has come for `quiet` seconds (at most
        `most`): what a lookup started in the background (its siblings' listing) is done."""
        end = time.monotonic() + most
        seen = -1
        while time.monotonic() < end:
            with self.lock:
                now = (len(self.log), self.in_flight)
            if now[1] == 0 and now[0] == seen:
                return
            seen = now[0] if now[1] == 0 else -1
            time.sleep(quiet)

    def hold(self, method, path):
        """Hold the next `method` request of `path` (as the proxy sees it: /bucket/key) until
        `release` is set (at most 60 s); `entered` is set when it arrives."""
        entered, release = threading.Event(), threading.Event()
        with self.lock:
            self.held = (method, path, entered, release)
        return entered, release

    def entries(self):
        with self.lock:
            return list(self.log)

    def close(self):
        self.server.shutdown()


class DelayProxy:
    """A TCP proxy that holds every request a client sends for `delay` seconds before passing it
    on (one added round trip per request, as a distant server has) and passes answers straight
    back; it counts requests (HTTP request lines) and the bytes answered. Fast enough to stay out
    of the way of a benchmark, unlike S3Proxy, which parses every request. With `tls` (a
    certificate's and its key's paths) it answers HTTPS: an HTTPS front for a plain server.
    """

    def __init__(self, upstream, delay, tls=None):
        import asyncio
        import ssl

        u = urllib.parse.urlparse(upstream)
        self.delay = delay
        self.requests = 0
        self.answered = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def pipe(reader, writer, up):
            try:
                while data := await reader.read(1 << 20):
                    if up:
                        self.requests += data.count(b" HTTP/1.1\r\n")
                        await asyncio.sleep(self.delay)
                    else:
                        self.answered += len(data)
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def serve(client_r, client_w):
            try:
                up_r, up_w = await asyncio.open_connection(u.hostname, u.port)
            except OSError:
                client_w.close()
                return
            await asyncio.gather(pipe(client_r, up_w, True), pipe(up_r, client_w, False))

        async def start():
            context = None
            if tls:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(*tls)
            self.server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        def run():
            self.loop.run_until_complete(start())
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        ready.wait()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"

    def reset(self):
        self.requests = 0
        self.answered = 0
