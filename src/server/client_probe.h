#pragma once
// Seeing a client hang up while a handler waits. cpp-httplib 0.11 hands a handler the request but not
// its connection, so a non-streaming request could not be cancelled when its client left; these find
// the connection's socket by its peer address and look at it without reading anything. Linux.
#include <string>

namespace ft::server {

/** The server side of the connection whose peer is addr:port (httplib's Request::remote_addr and
 *  remote_port), found among this process's open sockets (/proc/self/fd); -1 when there is none. The
 *  descriptor stays this connection's while its handler runs (the server closes it afterwards). */
int client_socket(const std::string& addr, int port);

/** True when the peer of the connected socket `fd` has closed or reset the connection (a peek that
 *  reads end-of-stream or fails); false while it is open, pipelined bytes included. Never blocks. */
bool client_gone(int fd);

}  // namespace ft::server
