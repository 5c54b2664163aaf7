package tcpfault

import "bytes"

// MatchFunc reports whether a chunk of bytes the proxy read is the one a
// rule waits for. It is called with the proxy's lock held, so it must not
// call the [Proxy]'s methods, and it must not keep chunk.
type MatchFunc func(chunk []byte) bool

// Contains matches a chunk that contains b.
func Contains(b []byte) MatchFunc {
	b = bytes.Clone(b)
	return func(chunk []byte) bool { return bytes.Contains(chunk, b) }
}

// postgresCommitComplete is PostgreSQL's CommandComplete message of a
// COMMIT: 'C', the length (11), the tag "COMMIT" and its NUL.
var postgresCommitComplete = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

// PostgresCommitComplete matches a reply from PostgreSQL that holds the
// CommandComplete of a COMMIT (sent alone or at the end of a pipeline).
// Use it with [Proxy.DropReply] to lose the answer to a COMMIT that was
// applied.
func PostgresCommitComplete(chunk []byte) bool {
	return bytes.Contains(chunk, postgresCommitComplete)
}

// mysqlCommitQuery is the MySQL protocol's COM_QUERY (0x03) of the text
// "COMMIT", after the packet header (3 bytes of length, 1 of sequence).
var mysqlCommitQuery = []byte("\x03COMMIT")

// MySQLCommitQuery matches a chunk from a MySQL or MariaDB client that holds
// a COM_QUERY "COMMIT" packet. A chunk may hold several packets
// (go-sql-driver sends COM_STMT_CLOSE without waiting for an answer, so it
// may arrive with the next command); each is looked at. A packet split
// across chunks is not recognised. Use it with [Proxy.DropReplyTo] to lose
// the answer to a COMMIT that was applied.
func MySQLCommitQuery(chunk []byte) bool {
	for len(chunk) >= 4 {
		n := int(chunk[0]) | int(chunk[1])<<8 | int(chunk[2])<<16
		if len(chunk) < 4+n {
			return false
		}
		if bytes.Equal(chunk[4:4+n], mysqlCommitQuery) {
			return true
		}
		chunk = chunk[4+n:]
	}
	return false
}
