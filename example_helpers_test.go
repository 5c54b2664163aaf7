package idemkit_test

import (
	"database/sql"

	_ "modernc.org/sqlite"
)

func openSQLite(path string) (*sql.DB, error) {
	return sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
}
