// Package tcpfault is a loopback TCP proxy for tests that must break the
// path to a database without touching the database itself: the shared
// PostgreSQL, MariaDB and Redis are never restarted, a test puts a [Proxy]
// of its own between its client and the server and misbehaves there.
//
// [Start] listens on 127.0.0.1:0 and forwards every connection it accepts to
// a target address; the client dials [Proxy.Addr] instead of the target.
// Then the test can
//
//   - cut the path: [Proxy.Cut] closes every connection and refuses new ones
//     until [Proxy.Restore]; [Proxy.CutFor] refuses them for a while only
//     (CutFor(0) closes the connections and refuses nothing);
//   - freeze it: [Proxy.Freeze] keeps every connection, existing or new, up
//     but forwards no byte in either direction until [Proxy.Thaw] (or
//     [Proxy.Restore]), which delivers what was held;
//   - lose one answer: [Proxy.DropReply] and [Proxy.DropReplyTo] let the
//     server receive and apply a statement, then close the client's
//     connection instead of relaying the server's reply, once.
//     [Proxy.Dropped] counts the replies lost so.
//
// Matching is done on the chunks the proxy reads (one Read each), so a
// pattern split across two reads is not recognised; on loopback the short
// messages of a database protocol arrive whole. [Contains] matches bytes
// anywhere in a chunk; [PostgresCommitComplete] and [MySQLCommitQuery]
// recognise a COMMIT's answer and a COMMIT itself.
//
// Nothing here sleeps: a frozen chunk waits on a channel, closed by Thaw,
// Restore, a cut or Close.
package tcpfault
